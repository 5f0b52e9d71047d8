"""``FrozenKVMTPProposer`` for vLLM 0.32 and 0.33's V1 runner (also the CPU runner).

``drafters/seed_proposer.FrozenSeedProposer`` ahead of vLLM's ``Gemma4Proposer``: the
overrides here are of upstream's private methods, by their 0.32 / 0.33 names, and
depend on how upstream's bodies use them (``propose`` on how ``Gemma4Proposer.propose``
shifts ids, gathers rows and copies into its buffers: hash-pinned in
tests/unit/test_vllm_surface.py). vLLM 0.34 has no V1 runner, so no later adapter
subclasses this one.
"""

from __future__ import annotations

from typing import Any

import torch
from vllm.v1.spec_decode.gemma4 import Gemma4Proposer

from vllm_frozen_kv_mtp.drafters.kv_guard import KVWriteError
from vllm_frozen_kv_mtp.drafters.seed_metadata import one_row_decode_metadata, seed_row_indices
from vllm_frozen_kv_mtp.drafters.seed_proposer import (
    FrozenSeedProposer,
    redraw_seeded_rows,
    truncate_like_target,
)


def _gather_rows(src: torch.Tensor, rows: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    """``src[rows]``, written into ``dst`` when the dtypes allow (no temporary)."""
    if src.dtype != dst.dtype:
        return src[rows]
    return torch.index_select(src, 0, rows, out=dst)


class FrozenKVMTPProposer(FrozenSeedProposer, Gemma4Proposer):
    """Gemma 4 MTP drafting from one seed row per request over read-only target KV."""

    def _setup_centroids_cuda_graphs(self) -> None:
        if self.device.type != "cuda":
            # Upstream always captures torch.cuda graphs here, which crashes off CUDA.
            self._centroids_sizes: list[int] = []
            return
        super()._setup_centroids_cuda_graphs()

    def _greedy_sample(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if not self._centroids_sizes and getattr(self.model, "masked_embedding", None) is not None:
            return self.model.get_top_tokens(hidden_states)  # sparse centroid argmax
        return super()._greedy_sample(hidden_states)

    def _sample_from_logits(
        self, logits: torch.Tensor, sampling_metadata: Any
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        # vLLM samples drafts at the temperature only; a q truncated like the target's
        # p overlaps it more (sum min(p, q) is the acceptance), and vLLM still verifies
        # with exactly the q the draft was drawn from, so the output stays p's.
        if not self._enable_probabilistic_draft_probs or sampling_metadata.all_greedy:
            return super()._sample_from_logits(logits, sampling_metadata)
        truncate_like_target(logits, sampling_metadata)
        token_ids, probs = super()._sample_from_logits(logits, sampling_metadata)
        if probs is not None and sampling_metadata.generators:
            redraw_seeded_rows(token_ids, probs, sampling_metadata.generators)
        return token_ids, probs

    # ---- one draft round --------------------------------------------------------

    def build_per_group_and_layer_attn_metadata(
        self, common_attn_metadata: Any, draft_index: int = 0
    ) -> tuple[list[object], dict[str, object]]:
        # Every step of a round queries the same position over the same prefix, so
        # the metadata of the seed step serves the whole round.
        if self._round_attn_metadata is None:
            self._round_attn_metadata = super().build_per_group_and_layer_attn_metadata(
                common_attn_metadata, draft_index
            )
            self.frozen_stats.metadata_builds += 1
        return self._round_attn_metadata

    def propose(  # type: ignore[override]
        self,
        num_speculative_tokens: int,
        target_token_ids: torch.Tensor,
        target_positions: torch.Tensor,
        target_hidden_states: torch.Tensor,
        next_token_ids: torch.Tensor,
        token_indices_to_sample: torch.Tensor | None,
        common_attn_metadata: Any,
        sampling_metadata: Any,
        mm_embed_inputs: Any = None,
        num_rejected_tokens_gpu: torch.Tensor | None = None,
        slot_mappings: Any = None,
    ) -> torch.Tensor:
        if target_positions.dim() != 1:
            raise NotImplementedError("frozen_kv_mtp does not support M-RoPE targets")
        batch = common_attn_metadata.batch_size()
        if num_speculative_tokens == 0:
            # The scheduler chose no drafts this step. Upstream still runs a draft
            # forward to keep its draft KV in sync; a frozen-KV drafter has none.
            self.num_speculative_tokens = 0
            self._last_draft_probs = None
            self.frozen_stats.count_skipped()
            return torch.empty((batch, 0), dtype=torch.int64, device=target_positions.device)
        rows = seed_row_indices(token_indices_to_sample, common_attn_metadata.query_start_loc)
        seed_cad = one_row_decode_metadata(
            common_attn_metadata,
            num_rejected_tokens_gpu,
            self.arange,
            self._no_write_slots,
        )
        # Gather the seeds straight into rows 0..batch-1 of the drafter's input
        # buffers; the parent's copies into those buffers then find source ==
        # destination and return at once.
        positions = _gather_rows(target_positions, rows, self.positions[:batch])
        hidden = _gather_rows(target_hidden_states, rows, self.hidden_states[:batch])
        # The seed of request i is row i: the parent's index ops with this take
        # views instead of gathers (and a slice write instead of an index_put).
        seed_rows: Any = slice(0, batch)
        before = self._kv_checksum() if self.frozen_options.kv_guard else None
        self._round_attn_metadata = None
        try:
            draft = super().propose(
                num_speculative_tokens=num_speculative_tokens,
                # The parent shifts target ids left and then overwrites every sampled
                # row with next_token_ids; with one row per request only the latter stays.
                target_token_ids=next_token_ids,
                target_positions=positions,
                target_hidden_states=hidden,
                next_token_ids=next_token_ids,
                token_indices_to_sample=seed_rows,
                common_attn_metadata=seed_cad,
                sampling_metadata=sampling_metadata,
                mm_embed_inputs=None,
                num_rejected_tokens_gpu=None,  # already applied to seed_cad.seq_lens
                slot_mappings=slot_mappings,
            )
        finally:
            self._round_attn_metadata = None
        self.frozen_stats.rounds += 1
        self.frozen_stats.sampled_rounds += bool(
            self._enable_probabilistic_draft_probs and not sampling_metadata.all_greedy
        )
        self.frozen_stats.count_round(num_speculative_tokens)
        self.frozen_stats.seed_rows += batch
        self.frozen_stats.forwards += max(num_speculative_tokens, 1)
        if before is not None and self._kv_checksum() != before:
            raise KVWriteError("frozen_kv_mtp: a draft round changed the target KV cache")
        return draft
