"""``FrozenKVMTPSpeculator`` for vLLM 0.34's Model Runner V2.

The 0.32/0.33 class, with what 0.34 changed (docs/upstream.md, "What breaks on 0.34.0"):

* C1: the graph manager and its descriptor moved to ``spec_decode.autoregressive``;
  the inherited code reads the descriptor from the manager's module, so only the
  constructor here names the new path.
* C2: ``CudaGraphManager`` takes ``decode_query_lens`` and ``decode_request_sizes``: the
  greedy family's manager is built as ``AutoRegressiveSpeculator`` builds the drafter's.
* C3: one draft step is ``_decode`` (0.32: ``_generate_draft``), which the inherited
  loops reach through :meth:`FrozenKVMTPSpeculator._generate_draft`.
* C4: the fused inner loop is now ``_fused_multi_step_decode`` (0.32:
  ``_generate_fused_drafts``) and the wrapper that replays or runs it is
  ``_run_fused_multi_step_decode``. The inner loop is overridden with the seed step as
  step 0, so eager rounds (no FULL graph for the batch or k) run it too; upstream's loop
  starts at step 1, after a draft prefill a frozen round does not have.
* M5 and hook 4: ``propose`` loads the seed and calls upstream's ``_run_multi_step_decode``
  (DP clamp and sync with ``parallel_config``, graph dispatch, ``specialize_spec_tokens``,
  the begin/end hooks, kernel block tables before a replay) instead of mirroring it; the
  seed rows are written from ``_prepare_decode_inputs``, which sees the request count
  after the DP clamp. ``capture`` starts from 0.34's prologue (``idx_mapping`` -1: padded
  rows neither sample nor map slots).
* Hook 2: the sampler's states (host temperatures, which pick each batch's round
  family) arrive through upstream's ``prepare_propose``, called before every
  ``propose``, rather than through patch 7 on ``GPUModelRunner.load_model``. They arrive
  after capture, so ``capture`` records both round families whenever the greedy
  family's manager exists (``_round_families``).
* M3: the draft-logits cache stays replicated (``supports_batch_sharded_draft_logits``),
  since greedy rounds hide it from the runner; its size is logged from ``load_model``,
  where 0.34 allocates it.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from vllm.config.compilation import CUDAGraphMode
from vllm.v1.worker.gpu.spec_decode.autoregressive.cudagraph_utils import (
    SpeculatorCudaGraphManager,
)

from vllm_frozen_kv_mtp.adapters.vllm_0_32 import speculator as v0_32

logger = logging.getLogger("vllm.frozen_kv_mtp")


class FrozenKVMTPSpeculator(v0_32.FrozenKVMTPSpeculator):
    """Gemma 4 MTP drafting from one seed row per request, whole round in one graph."""

    #: what ``propose`` hands ``_prepare_decode_inputs`` through upstream's
    #: ``_run_multi_step_decode``, which passes neither on: the seed's inputs
    _frozen_seed_args: tuple[Any, ...] = ()
    #: whether the round running now is a dummy one (no stats)
    _frozen_dummy_round: bool = False

    # ---- C3: one draft step --------------------------------------------------------

    def _generate_draft(self, *args: Any, **kwargs: Any) -> None:
        """0.32's name for one draft step, which the inherited loops call: 0.34's
        ``_decode``, same parameters."""
        self._decode(*args, **kwargs)

    # ---- C4: the fused loop -----------------------------------------------------

    def _fused_multi_step_decode(
        self,
        num_reqs: int,
        num_tokens_padded: int,
        attn_metadata: dict[str, Any] | None,
        slot_mappings: dict[str, torch.Tensor] | None,
        num_tokens_across_dp: torch.Tensor | None,
        cudagraph_runtime_mode: CUDAGraphMode,
        num_speculative_steps: int,
    ) -> None:
        # 0.34's inner loop is 0.32's _generate_fused_drafts (steps 1..k-1 upstream); the
        # inherited override runs steps 0..k-1, the seed step first, over metadata
        # refreshed once. The wrapper (_run_fused_multi_step_decode) calls this when no
        # FULL graph fits, and capture() records it (via _round_fn) for the graphs.
        self._generate_fused_drafts(
            num_reqs,
            num_tokens_padded,
            attn_metadata,
            slot_mappings,
            num_tokens_across_dp,
            cudagraph_runtime_mode,
            num_speculative_steps,
        )

    # ---- C2: the greedy family's graphs ----------------------------------------------

    def init_cudagraph_manager(self, cudagraph_mode: CUDAGraphMode) -> None:
        super().init_cudagraph_manager(cudagraph_mode)
        manager = self.decode_cudagraph_manager
        if self.num_speculative_steps == 1 and manager is not None:
            # Upstream gives one-token drafts no decode graphs at k = 1 (its k = 1 round
            # is the draft prefill alone); here the seed step is a decode step.
            self.decode_cudagraph_manager = self._new_round_graphs(manager.cudagraph_mode)

    def _new_round_graphs(self, cudagraph_mode: CUDAGraphMode) -> Any:
        # As AutoRegressiveSpeculator.init_cudagraph_manager builds the drafter's decode
        # manager. Its request sizes are empty below two draft tokens; None then takes
        # the target's decode sizes, as 0.32/0.33 did.
        return SpeculatorCudaGraphManager(
            self.vllm_config,
            self.device,
            cudagraph_mode,
            decode_query_lens={1: self.max_num_reqs},
            decode_request_sizes=(
                self.vllm_config.get_draft_decode_cudagraph_request_sizes() or None
            ),
        )

    def _capture_prologue(self) -> None:
        # 0.34's AutoRegressiveSpeculator.capture: -1 keeps padded rows from sampling
        # and from writing through a stale request-state row's block ids.
        self.last_token_indices.zero_()
        self.idx_mapping.fill_(-1)
        self.current_draft_step.zero_()

    # ---- hook 2: the sampler's states, handed over before every round ----------------

    def prepare_propose(
        self,
        input_batch: Any,
        num_sampled: torch.Tensor,
        num_rejected: torch.Tensor,
        sampler: Any,
    ) -> None:
        super().prepare_propose(input_batch, num_sampled, num_rejected, sampler)
        # The runner's sampler and its states live as long as the runner: take them once.
        if self.frozen_sampling_states is None:
            self.attach_sampling_states(sampler.sampling_states)

    def _round_families(self) -> list[bool]:
        # Capture runs before the first prepare_propose, so the states are not here yet:
        # greedy rounds get their graphs whenever their manager exists.
        return [False] if self.greedy_cudagraph_manager is None else [False, True]

    # ---- M3: draft logits ---------------------------------------------------------

    def supports_batch_sharded_draft_logits(self) -> bool:
        # A greedy round hides the cache from the runner (draft_logits is None), which
        # would skip a sharded cache's per-step row assignment and its stale-row check.
        return False

    def load_model(self, target_model: Any) -> None:
        super().load_model(target_model)
        cache = self._draft_logits_buffer
        if cache is not None:  # 0.34 allocates the cache here, not in __init__
            self._log_sampled_drafts(cache.values)

    # ---- one draft round (hook 4) ----------------------------------------------------

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
        # Replaces TargetDependentARSpeculator.propose, whose draft prefill over the
        # target's tokens is the step a frozen round drops; everything after it is
        # upstream's _run_multi_step_decode.
        num_reqs = input_batch.num_reqs
        k = self._begin_round(input_batch, temperature, seeds, dummy_run, num_speculative_tokens)
        if k == 0:
            return self.draft_tokens[:num_reqs]
        self._frozen_seed_args = (
            last_hidden_states,
            num_sampled,
            last_sampled,
            next_prefill_tokens,
        )
        self._frozen_dummy_round = dummy_run
        # A dummy run (idle DP rank, warm-up) keeps the family of the last real round:
        # the next verification reads it.
        greedy = self._greedy_round if dummy_run else self._drafts_greedily(input_batch)
        with self._draft_family(greedy):
            before = self._kv_checksum() if self.frozen_options.kv_guard else None
            self._run_multi_step_decode(
                input_batch,
                num_rejected,
                num_reqs,
                dummy_run and skip_attn_for_dummy_run,
                dp_sync_state,
                input_batch.seq_lens_cpu_upper_bound,
                is_profile,
                k,
            )
            self._frozen_seed_args = ()
            self._end_round(k, num_reqs, dummy_run, before)
        return self.draft_tokens[:num_reqs]

    def _prepare_decode_inputs(
        self,
        input_batch: Any,
        num_rejected: torch.Tensor,
        num_reqs: int,
        skip_attn: bool,
        batch_desc: Any,
    ) -> None:
        # Upstream's hook between the graph dispatch and the decode loop: the seed rows
        # (one per request) are the round's first decode inputs. ``num_reqs`` is the
        # count after the DP clamp; ``batch_desc`` the dispatched, k-specialised graph.
        hidden_states, num_sampled, last_sampled, next_prefill_tokens = self._frozen_seed_args
        self._load_seed(
            input_batch,
            hidden_states,
            num_sampled,
            num_rejected,
            last_sampled,
            next_prefill_tokens,
        )
        if num_reqs < input_batch.num_reqs:
            # An idle DP rank's dummy batch shrunk to the synced request count: the seed
            # rows past it become graph padding (empty queries that read no keys), as
            # upstream's _prepare_decode_inputs pads them.
            self.input_buffers.query_start_loc[num_reqs + 1 :] = num_reqs
            self.input_buffers.seq_lens[num_reqs:] = 0
        if not self._frozen_dummy_round and self.decode_cudagraph_manager is not None:
            # specialize_spec_tokens turns a FULL descriptor without a graph for this k
            # into a k-specialised one that runs eagerly: that is a graph miss.
            specialised = hasattr(batch_desc, "num_speculative_tokens")
            full = batch_desc.cg_mode == CUDAGraphMode.FULL
            self.frozen_stats.graph_rounds += full or specialised
            self.frozen_stats.graph_misses += specialised and not full
