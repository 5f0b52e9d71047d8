"""``FrozenKVMTPSpeculator``: frozen-KV drafting on Model Runner V2 (the GPU default).

A thin subclass of vLLM's ``Gemma4Speculator``: model loading, KV sharing, KV-scale
copying (FP8), per-group block tables, attention backends and the rejection
sampler are vLLM's. What changes:

* no draft "prefill" over the target's tokens: the round starts from one seed row
  per request (target post-norm hidden at the last accepted position, bonus token);
* the seed step is step 0 of the uniform one-row decode loop, so attention
  metadata is refreshed once per round and the whole round (seed step, k-1
  recurrent steps, logits/top-k) is one CUDA-graph replay per batch-size bucket;
* no draft-prefill CUDA graphs are captured (they would never run).

Sampled drafts (``draft_sample_method="probabilistic"``) and block verification
(``rejection_sample_method="block"``) are vLLM's own: the parent Gumbel-samples each
step's draft at the request's temperature and caches its logits, which vLLM's rejection
sampler reads as q. The sampling key advances per step (``sample_src_positions``) even
though the attention position stays constant, so each step draws fresh noise.

vLLM decides sampled drafts per engine on this runner. Here the choice is made per
batch, as vLLM's V1 runner makes it: a batch whose requests are all greedy drafts
greedily (centroid or dense head, no draft logits) and hands the rejection sampler no
q, so greedy traffic pays nothing for an engine that also serves sampled requests.
Each family has its own whole-round graphs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from vllm_frozen_kv_mtp.adapters.vllm_0_32.speculator import (
    CUDAGraphMode,
    DraftModelSpeculator,
    Gemma4Speculator,
    SpeculatorBatchDescriptor,
    build_slot_mappings_by_layer,
    dispatch_cg_and_sync_dp,
)
from vllm_frozen_kv_mtp.draft_length.stand_in import runnable_draft_lengths
from vllm_frozen_kv_mtp.drafters.heads import build_dense_head, head_for_rows, top_tokens
from vllm_frozen_kv_mtp.drafters.kv_guard import KVWriteError, target_kv_checksum
from vllm_frozen_kv_mtp.drafters.kv_readonly import (
    attention_layers,
    check_drafter_owns_no_kv,
    check_readonly_wiring,
)
from vllm_frozen_kv_mtp.drafters.seed_rows import SeedBuffers, SeedInputs, load_seed_rows
from vllm_frozen_kv_mtp.drafters.stats import DraftStats, log_stats_at_exit
from vllm_frozen_kv_mtp.kernels.centroid_kernel import fused_head_supported
from vllm_frozen_kv_mtp.kernels.dense_head import DenseHead
from vllm_frozen_kv_mtp.options import FrozenKVOptions, options_from_vllm_config
from vllm_frozen_kv_mtp.patches import enable_frozen_runtime_fixes
from vllm_frozen_kv_mtp.patches.sliding_split_kv import set_sliding_split_kv_max_rows
from vllm_frozen_kv_mtp.patches.target_softcap import mark_target_logits

logger = logging.getLogger("vllm.frozen_kv_mtp")
#: (option, head) pairs already logged: say once which head "auto" resolved to
_LOGGED_HEADS: set[tuple[str, str]] = set()


class FrozenKVMTPSpeculator(Gemma4Speculator):
    """Gemma 4 MTP drafting from one seed row per request, whole round in one graph."""

    #: option dense_head's prepared head (load_model), None for upstream's
    frozen_dense_head: DenseHead | None = None
    #: the model runner's per-request sampling states (handed over at load by the patch
    #: on ``GPUModelRunner.load_model``), read on the host to pick each batch's drafts
    frozen_sampling_states: Any = None
    #: whole-round graphs of the round family running now (vLLM's attribute; swapped
    #: for ``greedy_cudagraph_manager`` during a greedy round)
    decode_cudagraph_manager: Any
    #: whole-round graphs of greedy rounds, in an engine that also samples drafts
    greedy_cudagraph_manager: Any = None
    #: vLLM's draft-logits buffer (``draft_sample_method="probabilistic"``), else None
    _draft_logits_buffer: torch.Tensor | None = None
    #: the latest round drafted greedily: its verification must see no q
    _greedy_round: bool = False

    @property  # type: ignore[override]
    def draft_logits(self) -> torch.Tensor | None:
        """vLLM's draft logits, or None after a greedy round: the model runner passes
        this to the rejection sampler, which then checks the drafts as greedy ones.
        ``_generate_draft`` passes it to ``sample_draft``, which then drafts greedily."""
        return None if self._greedy_round else self._draft_logits_buffer

    @draft_logits.setter
    def draft_logits(self, value: torch.Tensor | None) -> None:
        self._draft_logits_buffer = value

    def __init__(self, vllm_config: Any, device: torch.device) -> None:
        super().__init__(vllm_config, device)
        options = options_from_vllm_config(vllm_config)
        assert options is not None
        self.frozen_options: FrozenKVOptions = options
        self.frozen_stats = DraftStats()
        log_stats_at_exit(self.frozen_stats)
        enable_frozen_runtime_fixes()
        logger.info("frozen_kv_mtp: Model Runner V2 speculator active (one seed row per request)")
        buffer = self._draft_logits_buffer
        if buffer is not None:
            # vLLM's probabilistic path: each step's logits are cached (pre-temperature)
            # for the rejection sampler's q, and drafts are Gumbel-sampled from them.
            logger.info(
                "frozen_kv_mtp: sampled drafts for batches with a sampled request "
                "(draft_sample_method='probabilistic'); all-greedy batches draft greedily. "
                "The draft logits take max_num_seqs x k x vocab = %s %s, %.1f MiB, "
                "allocated at start-up; sampled rounds compute full-vocabulary logits",
                " x ".join(str(n) for n in buffer.shape),
                str(buffer.dtype).removeprefix("torch."),
                buffer.numel() * buffer.element_size() / 2**20,
            )
            for name, is_set in (
                ("centroid_head", options.centroid_head not in ("auto", "upstream")),
                ("dense_head", options.dense_head != "upstream"),
            ):
                if is_set:
                    logger.info(
                        "frozen_kv_mtp: %s=%r scores greedy rounds only: sampled drafts "
                        "come from vLLM's full-vocabulary logits",
                        name,
                        getattr(options, name),
                    )

    # ---- load-time guarantees -------------------------------------------------

    def load_model(self, target_model: Any) -> None:
        super().load_model(target_model)
        check_readonly_wiring(self.vllm_config, self.draft_attn_layer_names)
        if self.frozen_options.target_softcap != "vllm":
            mark_target_logits(target_model, self.frozen_options.target_softcap)
        if self.frozen_options.draft_attention == "split":
            self._install_split_decode_attention()
        self.frozen_dense_head = build_dense_head(
            self.model,
            self.frozen_options.dense_head,
            self.vllm_config.parallel_config.tensor_parallel_size,
        )

    def _install_split_decode_attention(self) -> None:
        from vllm_frozen_kv_mtp.patches.split_decode import install_split_decode_attention

        layers = attention_layers(self.vllm_config)
        names = set(self.draft_attn_layer_names)
        switched = install_split_decode_attention(
            {n: layer for n, layer in layers.items() if n in names},
            self.max_num_reqs,
            self.device,
        )
        if len(switched) < len(names):
            logger.warning(
                "frozen_kv_mtp: draft_attention='split' needs TRITON_ATTN; drafter layers %s "
                "keep their backend",
                sorted(names - set(switched)),
            )

    def set_attn(self, model_state: Any, kv_cache_config: Any, *args: Any, **kwargs: Any) -> None:
        super().set_attn(model_state, kv_cache_config, *args, **kwargs)
        check_drafter_owns_no_kv(kv_cache_config, self.draft_attn_layer_names)
        # Before any metadata is built or graph captured: both read the threshold.
        set_sliding_split_kv_max_rows(
            self.attn_groups, self.frozen_options.sliding_split_kv_max_rows
        )

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
            self.greedy_cudagraph_manager = type(sampled)(
                self.vllm_config, self.device, sampled.cudagraph_mode, decode_query_len=1
            )

    @contextmanager
    def _draft_family(self, greedy: bool) -> Iterator[None]:
        """Run or capture a greedy or a sampled round; the choice outlives the round,
        since the next step's verification reads ``draft_logits``."""
        sampled = self.decode_cudagraph_manager
        if greedy and self.greedy_cudagraph_manager is not None:
            self.decode_cudagraph_manager = self.greedy_cudagraph_manager
        self._greedy_round = greedy
        try:
            yield
        finally:
            self.decode_cudagraph_manager = sampled

    def _drafts_greedily(self, input_batch: Any) -> bool:
        """A batch drafts greedily unless one of its requests samples (vLLM's V1 rule,
        ``all_greedy``). Host arrays only: no device sync."""
        if self._draft_logits_buffer is None:
            return True
        states = self.frozen_sampling_states
        if states is None:
            return False
        rows = input_batch.idx_mapping_np[: input_batch.num_reqs]
        return not bool(np.any(states.temperature.np[rows] != 0.0))

    def attach_sampling_states(self, sampling_states: Any) -> None:
        self.frozen_sampling_states = sampling_states

    def capture(self) -> None:
        # Mirrors the decode half of TargetDependentARSpeculator.capture (hash-pinned):
        # no draft-prefill graphs (a frozen round has no prefill), and one capture per
        # round family (sampled, greedy).
        assert self.decode_cudagraph_manager is not None
        logger.info("frozen_kv_mtp: capturing whole-round draft CUDA graphs")
        self.last_token_indices.zero_()
        self.idx_mapping.zero_()
        self.on_multi_step_decode_begin(self.max_num_reqs)
        families = [False]
        if self.greedy_cudagraph_manager is not None:
            if self.frozen_sampling_states is None:
                logger.warning(
                    "frozen_kv_mtp: the model runner's sampling states were not handed "
                    "over, so every draft round samples, greedy batches included"
                )
            else:
                families.append(True)
        for greedy in families:
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

    def _specialize_capture_descs(self) -> None:
        """One whole-round graph per (batch bucket, k) for every k > 0 the policy can pick.

        Mirrors ``SpeculatorCudaGraphManager.capture(specialize_spec_tokens=True)``
        (vllm/v1/worker/gpu/spec_decode/target_dependent_ar/cudagraph_utils.py), which
        leaves k = 1 out: upstream's k = 1 round has no decode step. Here the seed step
        is a decode step, so k = 1 gets its graph too.
        """
        manager = self.decode_cudagraph_manager
        assert manager is not None
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
                SpeculatorBatchDescriptor(**vars(desc), num_speculative_tokens=k)
                for desc in descs
                for k in ks
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

    def _load_seed(
        self,
        input_batch: Any,
        hidden_states: torch.Tensor,
        num_sampled: torch.Tensor,
        num_rejected: torch.Tensor,
        last_sampled: torch.Tensor,
        next_prefill_tokens: torch.Tensor,
    ) -> None:
        """Write one seed row per request into the decode buffers (one device launch)."""
        buffers = self.input_buffers
        load_seed_rows(
            SeedInputs(
                num_reqs=input_batch.num_reqs,
                query_start_loc=input_batch.query_start_loc,
                positions=input_batch.positions,
                seq_lens=input_batch.seq_lens,
                idx_mapping=input_batch.idx_mapping,
                hidden_states=hidden_states,
                num_sampled=num_sampled,
                num_rejected=num_rejected,
                # Both are indexed by request-state slot; their leading storage row is
                # the one vLLM's own prepare kernel reads ([max_reqs, 1], [lookahead, max_reqs]).
                last_sampled=last_sampled,
                next_prefill_tokens=next_prefill_tokens,
            ),
            SeedBuffers(
                input_ids=buffers.input_ids,
                positions=buffers.positions,
                seq_lens=buffers.seq_lens,
                query_start_loc=buffers.query_start_loc,
                hidden_states=self.hidden_states,
                sample_src_positions=self.sample_src_positions,
                draft_step=self.current_draft_step,
            ),
        )

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
        k = self.num_speculative_steps if num_speculative_tokens is None else num_speculative_tokens
        if k == 0:
            # The scheduler chose no drafts: no drafter KV to keep in sync, so no round.
            if not dummy_run:
                self.frozen_stats.skipped_rounds += 1
            self.draft_tokens[:num_reqs].fill_(-1)
            return self.draft_tokens[:num_reqs]
        self._copy_request_inputs(
            num_reqs, input_batch.idx_mapping, temperature, seeds, dummy_run=dummy_run
        )
        # Host-side upper bound (a CPU tensor): no device sync.
        max_seq_len = int(input_batch.seq_lens_cpu_upper_bound[:num_reqs].max())
        self.draft_max_seq_len = min(max_seq_len, self.max_model_len)
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
                wanted_full = batch_desc.cg_mode == CUDAGraphMode.FULL
                batch_desc = self.decode_cudagraph_manager.specialize_spec_tokens(batch_desc, k)
                if wanted_full and batch_desc.cg_mode != CUDAGraphMode.FULL and not dummy_run:
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
            if not dummy_run:
                self.frozen_stats.rounds += 1
                self.frozen_stats.count_round(k)
                self.frozen_stats.seed_rows += num_reqs
                self.frozen_stats.forwards += k
                self.frozen_stats.metadata_builds += 1
                self.frozen_stats.sampled_rounds += self.draft_logits is not None
            if before is not None and self._kv_checksum() != before:
                raise KVWriteError("frozen_kv_mtp: a draft round changed the target KV cache")
        return self.draft_tokens[:num_reqs]

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
        # Greedy drafts without the full-vocabulary logits tensor upstream builds just
        # to argmax it: from a centroid head (option centroid_head) or a dense one
        # (option dense_head).
        me = getattr(self.model, "masked_embedding", None)
        head = head_for_rows(
            self.frozen_options.centroid_head,
            hidden_states.shape[0],
            fused_ok=me is not None and fused_head_supported(me.vocab_size_per_centroid),
        )
        if me is not None and (self.frozen_options.centroid_head, head) not in _LOGGED_HEADS:
            _LOGGED_HEADS.add((self.frozen_options.centroid_head, head))
            logger.info(
                "frozen_kv_mtp: centroid_head=%r scores greedy drafts with the %r head",
                self.frozen_options.centroid_head,
                head,
            )
        if (
            head != "upstream"
            and draft_logits is None
            and self.acceptance_estimator is None
            and me is not None
        ):
            return top_tokens(self.model, hidden_states, head)
        if (
            self.frozen_dense_head is not None
            and draft_logits is None
            and self.acceptance_estimator is None
        ):
            tokens = self.frozen_dense_head.top_tokens(hidden_states)
            if tokens is not None:
                return tokens
        return super().sample_draft(
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

    def _kv_checksum(self) -> str:
        return target_kv_checksum(self.vllm_config)
