"""``FrozenKVMTPSpeculator`` for vLLM 0.32 and 0.33's Model Runner V2 (the GPU default).

``drafters/seed_round.FrozenRound`` ahead of vLLM's ``Gemma4Speculator``. Everything here
is bound to these releases: the overrides by upstream's names (``propose``,
``_generate_fused_drafts``, ``_multi_step_decode``, ``capture``, ``init_cudagraph_manager``,
``sample_draft``, ``_configure_decode_metadata_update``), the copies of upstream's control
flow they hold (hash-pinned in tests/unit/test_vllm_surface.py), the one-step method they
call (``_generate_draft``), the graph manager's constructor and the DP helpers. A port
subclasses this class in the next adapter and overrides what the release changed
(docs/upstream.md, "The adapter seam").
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import torch
from vllm.config.compilation import CUDAGraphMode
from vllm.v1.worker.gpu.attn_utils import build_slot_mappings_by_layer
from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp
from vllm.v1.worker.gpu.spec_decode.gemma4.speculator import Gemma4Speculator
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

from vllm_frozen_kv_mtp.draft_length.stand_in import runnable_draft_lengths
from vllm_frozen_kv_mtp.drafters.kv_guard import KVWriteError
from vllm_frozen_kv_mtp.drafters.seed_round import FrozenRound

logger = logging.getLogger("vllm.frozen_kv_mtp")


class FrozenKVMTPSpeculator(FrozenRound, Gemma4Speculator):
    """Gemma 4 MTP drafting from one seed row per request, whole round in one graph."""

    def _configure_decode_metadata_update(self) -> None:
        # The parent turns in-graph metadata refresh off for k=1 (no decode steps);
        # here the seed step itself is a decode step, so keep vLLM's backend check.
        DraftModelSpeculator._configure_decode_metadata_update(self)

    # ---- CUDA graphs: one graph per batch-size bucket for the whole round -------

    def init_cudagraph_manager(self, cudagraph_mode: CUDAGraphMode) -> None:
        super().init_cudagraph_manager(cudagraph_mode)
        sampled = self.decode_cudagraph_manager
        if self._draft_logits_buffer is not None and sampled is not None:
            # Same class, mode and sizes: greedy rounds replay graphs of their own.
            self.greedy_cudagraph_manager = self._new_round_graphs(sampled.cudagraph_mode)

    def _new_round_graphs(self, cudagraph_mode: CUDAGraphMode) -> Any:
        """A whole-round graph manager built as upstream builds the drafter's decode one
        (the constructor changes between releases: the next adapter overrides this)."""
        sampled = self.decode_cudagraph_manager
        return type(sampled)(self.vllm_config, self.device, cudagraph_mode, decode_query_len=1)

    def capture(self) -> None:
        # Mirrors the decode half of TargetDependentARSpeculator.capture (hash-pinned):
        # no draft-prefill graphs (a frozen round has no prefill), and one capture per
        # round family (sampled, greedy).
        assert self.decode_cudagraph_manager is not None
        logger.info("frozen_kv_mtp: capturing whole-round draft CUDA graphs")
        self._capture_prologue()
        self.on_multi_step_decode_begin(self.max_num_reqs)
        for greedy in self._round_families():
            with self._draft_family(greedy):
                if (
                    self.supports_decode_metadata_update
                    and self.speculative_config.uses_dynamic_speculative_decoding()
                ):
                    self._specialize_capture_descs()
                self.decode_cudagraph_manager.capture(
                    self._round_fn(),
                    self.model_state,
                    self.input_buffers,
                    self.block_tables,
                    self.attn_groups,
                    self.kv_cache_config,
                    progress_bar_desc="Capturing frozen-KV draft round CUDA graphs"
                    + (" (greedy rounds)" if greedy else ""),
                )
        self._greedy_round = False
        self.on_multi_step_decode_end(self.max_num_reqs)

    def _round_families(self) -> list[bool]:
        """The round families ``capture`` records graphs for (False: sampled, True:
        greedy). Greedy rounds get graphs only where a greedy manager exists and the
        model runner handed its sampling states over at load (patch 7), since without
        them no round drafts greedily. A release that hands them over after capture
        overrides this."""
        if self.greedy_cudagraph_manager is None:
            return [False]
        if self.frozen_sampling_states is None:
            logger.warning(
                "frozen_kv_mtp: the model runner's sampling states were not handed "
                "over, so every draft round samples, greedy batches included"
            )
            return [False]
        return [False, True]

    def _capture_prologue(self) -> None:
        """The buffer state upstream's ``capture`` sets before its graphs (this release's)."""
        self.last_token_indices.zero_()
        self.idx_mapping.zero_()

    def _specialize_capture_descs(self) -> None:
        """One whole-round graph per (batch bucket, k) for every k > 0 the policy can pick.

        Mirrors ``SpeculatorCudaGraphManager.capture(specialize_spec_tokens=True)``
        (``.../spec_decode/target_dependent_ar/cudagraph_utils.py``; 0.34:
        ``.../spec_decode/autoregressive/cudagraph_utils.py``), which
        leaves k = 1 out: upstream's k = 1 round has no decode step. Here the seed step
        is a decode step, so k = 1 gets its graph too.
        """
        manager = self.decode_cudagraph_manager
        assert manager is not None
        # The descriptor class lives beside the manager's class, whose module moves
        # between releases (``...target_dependent_ar.cudagraph_utils`` on 0.32/0.33,
        # ``...autoregressive.cudagraph_utils`` on 0.34): read it from there, so this
        # module imports nothing a later release lacks.
        descriptor_cls = sys.modules[type(manager).__module__].SpeculatorBatchDescriptor
        ks = [
            k
            for k in runnable_draft_lengths(
                self.frozen_options,
                self.speculative_config,
                self.vllm_config.num_speculative_tokens,
                manager.max_num_reqs,
            )
            if k > 0
        ]
        manager._capture_descs = {
            mode: [
                descriptor_cls(**vars(desc), num_speculative_tokens=k) for desc in descs for k in ks
            ]
            for mode, descs in manager._capture_descs.items()
        }
        logger.info("frozen_kv_mtp: draft round CUDA graphs for k in %s", sorted(ks))

    def _round_fn(self) -> Any:
        return (
            self._generate_fused_drafts
            if self.supports_decode_metadata_update
            else self._generate_draft
        )

    # ---- one draft round --------------------------------------------------------

    @torch.inference_mode()
    def propose(  # type: ignore[override]
        self,
        input_batch: Any,
        attn_metadata: dict[str, Any],
        slot_mappings: dict[str, torch.Tensor],
        last_hidden_states: torch.Tensor,
        aux_hidden_states: list[torch.Tensor] | None,
        num_sampled: torch.Tensor,
        num_rejected: torch.Tensor,
        last_sampled: torch.Tensor,
        next_prefill_tokens: torch.Tensor,
        temperature: torch.Tensor,
        seeds: torch.Tensor,
        dp_sync_state: Any = None,
        dummy_run: bool = False,
        skip_attn_for_dummy_run: bool = False,
        mm_inputs: Any = None,
        is_profile: bool = False,
        num_speculative_tokens: int | None = None,
    ) -> torch.Tensor:
        # Replaces TargetDependentARSpeculator.propose (hash-pinned): its draft prefill
        # over the target's tokens is the step a frozen round drops, and it has no hook
        # between that prefill and the decode steps. Kept from it: the request-input
        # copy, the DP clamp and sync, the decode-graph dispatch and the decode call.
        num_reqs = input_batch.num_reqs
        k = self._begin_round(input_batch, temperature, seeds, dummy_run, num_speculative_tokens)
        if k == 0:
            return self.draft_tokens[:num_reqs]
        self._load_seed(
            input_batch,
            last_hidden_states,
            num_sampled,
            num_rejected,
            last_sampled,
            next_prefill_tokens,
        )

        # Mirrors upstream (vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py,
        # 0.33): an idle DP rank's dummy batch may hold a padded FULL-graph request count,
        # above DPSyncState.num_reqs (0.33: the largest real count on any rank), which
        # _build_uniform_batch_dp_sync asserts against; the draft round shrinks to it.
        # On 0.32, num_reqs is already the padded count there, so this is a no-op.
        if dummy_run and dp_sync_state is not None:
            num_reqs = min(num_reqs, dp_sync_state.num_reqs)
        if num_reqs < input_batch.num_reqs:
            # The seed rows past the shrunk batch become graph padding, as upstream's
            # prepare_decode_inputs pads them: empty queries that read no keys.
            self.input_buffers.query_start_loc[num_reqs + 1 :] = num_reqs
            self.input_buffers.seq_lens[num_reqs:] = 0

        # A dummy run (idle DP rank, warm-up) keeps the family of the last real round:
        # the next verification reads it.
        greedy = self._greedy_round if dummy_run else self._drafts_greedily(input_batch)
        with self._draft_family(greedy):
            batch_sync, num_batch_tokens = (
                self._build_uniform_batch_dp_sync(dp_sync_state, num_reqs, num_query_per_req=1)
                if dp_sync_state is not None
                else (None, num_reqs)
            )
            batch_desc, batch_sync = dispatch_cg_and_sync_dp(
                self.decode_cudagraph_manager,
                num_reqs,
                num_batch_tokens,
                uniform_token_count=1,
                dp_size=self.dp_size,
                dp_rank=self.dp_rank,
                need_eager=is_profile,
                dp_sync_state=batch_sync,
            )
            if self.decode_cudagraph_manager is not None:  # None while memory is profiled
                wanted_full = batch_desc.cg_mode == CUDAGraphMode.FULL and not dummy_run
                batch_desc = self.decode_cudagraph_manager.specialize_spec_tokens(batch_desc, k)
                self.frozen_stats.graph_rounds += wanted_full
                if wanted_full and batch_desc.cg_mode != CUDAGraphMode.FULL:
                    self.frozen_stats.graph_misses += 1  # no graph for this k: eager round
            tokens_across_dp = batch_sync.num_tokens_across_dp if batch_sync is not None else None

            before = self._kv_checksum() if self.frozen_options.kv_guard else None
            self.on_multi_step_decode_begin(num_reqs)
            run = (
                self._fused_multi_step_decode
                if self.supports_decode_metadata_update
                else self._multi_step_decode
            )
            run(
                num_reqs,
                dummy_run and skip_attn_for_dummy_run,
                batch_desc,
                tokens_across_dp,
                input_batch.seq_lens_cpu_upper_bound,
                k,
            )
            self.on_multi_step_decode_end(num_reqs)
            self._end_round(k, num_reqs, dummy_run, before)
        return self.draft_tokens[:num_reqs]

    def _begin_round(
        self,
        input_batch: Any,
        temperature: torch.Tensor,
        seeds: torch.Tensor,
        dummy_run: bool,
        num_speculative_tokens: int | None,
    ) -> int:
        """The round's k, with the request inputs copied; 0 when the scheduler chose no
        drafts: then there is no round (no drafter KV to keep in sync) and the batch's
        draft tokens are -1."""
        num_reqs = input_batch.num_reqs
        k = self.num_speculative_steps if num_speculative_tokens is None else num_speculative_tokens
        if k == 0:
            if not dummy_run:
                self.frozen_stats.count_skipped()
            self.draft_tokens[:num_reqs].fill_(-1)
            return 0
        self._copy_request_inputs(
            num_reqs, input_batch.idx_mapping, temperature, seeds, dummy_run=dummy_run
        )
        # Host-side upper bound (a CPU tensor): no device sync.
        max_seq_len = int(input_batch.seq_lens_cpu_upper_bound[:num_reqs].max())
        self.draft_max_seq_len = min(max_seq_len, self.max_model_len)
        return k

    def _end_round(self, k: int, num_reqs: int, dummy_run: bool, kv_before: str | None) -> None:
        """Count a real round of ``k`` steps over ``num_reqs`` seed rows, and check the
        target KV against its checksum from before the round (option kv_guard)."""
        if not dummy_run:
            self.frozen_stats.rounds += 1
            self.frozen_stats.count_round(k)
            self.frozen_stats.seed_rows += num_reqs
            self.frozen_stats.forwards += k
            self.frozen_stats.metadata_builds += 1
            self.frozen_stats.sampled_rounds += self.draft_logits is not None
        if kv_before is not None and self._kv_checksum() != kv_before:
            raise KVWriteError("frozen_kv_mtp: a draft round changed the target KV cache")

    def _generate_fused_drafts(
        self,
        num_reqs: int,
        num_tokens_padded: int,
        attn_metadata: dict[str, Any] | None,
        slot_mappings: dict[str, torch.Tensor] | None,
        num_tokens_across_dp: torch.Tensor | None,
        cudagraph_runtime_mode: CUDAGraphMode,
        num_speculative_steps: int,
    ) -> None:
        # Mirrors TargetDependentARSpeculator._generate_fused_drafts (hash-pinned in
        # tests/unit/test_vllm_surface.py) with the seed step as step 0: steps 0..k-1
        # over metadata refreshed once (in-graph). Upstream starts at step 1, after its
        # draft prefill, and offers no hook for that step.
        if attn_metadata is not None:
            self.block_tables.compute_slot_mappings(
                self.idx_mapping[:num_reqs],
                self.input_buffers.query_start_loc[: num_reqs + 1],
                self.input_buffers.positions[:num_reqs],
                num_tokens_padded,
            )
            self._update_draft_decode_metadata(attn_metadata, num_reqs)
        for step in range(num_speculative_steps):
            self.current_draft_step.fill_(step)
            self._generate_draft(
                num_reqs,
                num_tokens_padded,
                attn_metadata,
                slot_mappings,
                num_tokens_across_dp,
                cudagraph_runtime_mode,
                num_speculative_steps,
            )

    def _multi_step_decode(
        self,
        num_reqs: int,
        skip_attn: bool,
        batch_desc: Any,
        num_tokens_across_dp: torch.Tensor | None,
        seq_lens_cpu_upper_bound: torch.Tensor,
        num_speculative_steps: int,
    ) -> None:
        # Mirrors TargetDependentARSpeculator._multi_step_decode (hash-pinned) with the
        # seed step as step 0. Backends that cannot refresh metadata in a graph: build it
        # once, then run (or replay) one step per draft token, the seed step first.
        attn_metadata = None
        slot_mappings_by_layer = None
        if not skip_attn:
            slot_mappings = self.block_tables.compute_slot_mappings(
                self.idx_mapping[:num_reqs],
                self.input_buffers.query_start_loc[: num_reqs + 1],
                self.input_buffers.positions[:num_reqs],
                batch_desc.num_tokens,
            )
            slot_mappings_by_layer = build_slot_mappings_by_layer(
                slot_mappings, self.kv_cache_config
            )
            attn_metadata = self._build_uniform_attn_metadata(
                num_reqs=num_reqs,
                batch_desc=batch_desc,
                num_query_per_req=1,
                seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                step=1,
            )
        for step in range(num_speculative_steps):
            self.current_draft_step.fill_(step)
            if batch_desc.cg_mode == CUDAGraphMode.FULL:
                assert self.decode_cudagraph_manager is not None
                self.decode_cudagraph_manager.run_fullgraph(batch_desc)
            else:
                self._generate_draft(
                    num_reqs,
                    batch_desc.num_tokens,
                    attn_metadata,
                    slot_mappings_by_layer,
                    num_tokens_across_dp=num_tokens_across_dp,
                    cudagraph_runtime_mode=batch_desc.cg_mode,
                    num_speculative_steps=num_speculative_steps,
                )

    # ---- draft tokens from a centroid head -------------------------------------

    def sample_draft(  # type: ignore[override]
        self,
        hidden_states: torch.Tensor,
        sample_src_positions: torch.Tensor,
        idx_mapping: torch.Tensor,
        temperature: torch.Tensor,
        seeds: torch.Tensor,
        draft_step: torch.Tensor,
        draft_logits: torch.Tensor | None,
        spec_step_idx: int = 0,
        num_steps: int = 1,  # vLLM 0.33 (draft watermarking); 0.32's parent has none
    ) -> torch.Tensor:
        # Greedy drafts from the plugin's heads where they apply (FrozenRound), else
        # vLLM's own sampler.
        tokens = self._frozen_greedy_draft(hidden_states, draft_logits)
        if tokens is None:
            tokens = super().sample_draft(
                hidden_states,
                sample_src_positions,
                idx_mapping,
                temperature,
                seeds,
                draft_step,
                draft_logits,
                spec_step_idx,
                **({"num_steps": num_steps} if num_steps != 1 else {}),
            )
        return self._padding_rows_draft_token_zero(tokens, idx_mapping)
