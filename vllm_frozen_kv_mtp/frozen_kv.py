"""Runner-independent frozen-KV drafting logic, shared by the V1 proposer and the V2 speculator.

The drafter owns no KV. Its attention layers are Q-only and read the target's
paged KV for the committed prefix. So a draft round needs exactly one row per
request: the seed (target post-norm hidden at the last accepted position, plus
the bonus token), queried at that constant position over keys <= position, for
every one of the k recurrent steps. That is a uniform decode batch whose
attention metadata is the same for all steps and is built once per round.
"""

from __future__ import annotations

import atexit
import dataclasses
import hashlib
import logging
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

logger = logging.getLogger("vllm.frozen_kv_mtp")

#: slot id that attention backends treat as "do not write"; the drafter writes nothing
PADDING_SLOT_ID = -1


def seed_row_indices(
    token_indices_to_sample: torch.Tensor | None, query_start_loc: torch.Tensor
) -> torch.Tensor:
    """Flat row index of each request's seed in the target's batch.

    After a verify step vLLM hands us ``token_indices_to_sample`` (row
    ``accept_len - 1`` of each request's block); after a prefill it is the last
    scheduled row of each request. Device-side only: no host sync.
    """
    if token_indices_to_sample is not None:
        return token_indices_to_sample
    return query_start_loc[1:] - 1


def committed_seq_lens(
    seq_lens: torch.Tensor, num_rejected_tokens: torch.Tensor | None
) -> torch.Tensor:
    """Length of the committed prefix per request (keys the seed row may attend to).

    The target's ``seq_lens`` count every verified slot, rejected drafts included;
    a new tensor is returned so the target's metadata is left untouched.
    """
    if num_rejected_tokens is None:
        return seq_lens.clone()
    return seq_lens - num_rejected_tokens.to(seq_lens.dtype)


def one_row_decode_metadata(
    cad: Any,
    num_rejected_tokens: torch.Tensor | None,
    query_start_loc: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> Any:
    """Turn the target's (multi-row) attention metadata into the drafter's one-row batch.

    ``query_start_loc`` must be ``arange(batch + 1)`` on the device and
    ``slot_mapping`` a ``[batch]`` tensor of :data:`PADDING_SLOT_ID` (no KV writes).
    Block tables are kept: per-KV-cache-group tables are swapped in by the proposer.
    """
    batch = cad.batch_size()
    return dataclasses.replace(
        cad,
        query_start_loc=query_start_loc[: batch + 1],
        query_start_loc_cpu=torch.arange(batch + 1, dtype=torch.int32),
        seq_lens=committed_seq_lens(cad.seq_lens, num_rejected_tokens),
        num_reqs=batch,
        num_actual_tokens=batch,
        max_query_len=1,
        slot_mapping=slot_mapping[:batch],
        causal=True,
        logits_indices_padded=None,
        num_logits_indices=None,
        max_logits_per_req=None,
        positions=None,
        is_prefilling=None,
        req_idx=None,
        _num_computed_tokens_cache=None,
        _token_to_req_indices_cache=None,
    )


@dataclass
class DraftStats:
    """Host-side counters (no device sync) of the draft rounds run so far."""

    rounds: int = 0
    #: rows in each round's first drafter forward, summed (one per request)
    seed_rows: int = 0
    #: drafter forwards (k per round)
    forwards: int = 0
    metadata_builds: int = 0
    #: steps whose k was 0: no draft round ran
    skipped_rounds: int = 0
    #: draft rounds per k (the k the scheduler asked for)
    rounds_by_k: dict[int, int] = dataclasses.field(default_factory=dict)
    #: V2 rounds at a k whose CUDA graph was not captured (ran eagerly instead)
    graph_misses: int = 0
    #: rounds whose drafts were sampled from the assistant (a batch with a sampled
    #: request, draft_sample_method "probabilistic"); the other rounds drafted greedily
    sampled_rounds: int = 0

    def count_round(self, k: int) -> None:
        self.rounds_by_k[k] = self.rounds_by_k.get(k, 0) + 1

    def summary(self) -> str:
        """What the drafter did, in one line (logged when the process exits)."""
        per_k = ", ".join(f"k={k}: {n}" for k, n in sorted(self.rounds_by_k.items()))
        return (
            f"frozen_kv_mtp: {self.rounds} draft rounds ({per_k or 'none'}); "
            f"{self.sampled_rounds} sampled their drafts, the others drafted greedily; "
            f"{self.skipped_rounds} steps with k=0; {self.graph_misses} rounds without "
            "their CUDA graph"
        )

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = dict(dataclasses.asdict(self))
        d["seed_rows_per_round"] = self.seed_rows / self.rounds if self.rounds else 0.0
        d["metadata_builds_per_round"] = self.metadata_builds / self.rounds if self.rounds else 0.0
        return d


def _tensors(items: Iterable[Any]) -> Iterable[torch.Tensor]:
    for t in items:
        if isinstance(t, torch.Tensor):
            yield t
        elif isinstance(t, (list, tuple)):
            yield from _tensors(t)


def _device_digest(t: torch.Tensor) -> bytes:
    """Two int64 reductions over the raw words, on the tensor's device: copying a
    GPU cache of tens of GiB to the host every round would stall the engine."""
    flat = t.detach().reshape(-1).view(torch.uint8)
    words = flat[: flat.numel() // 4 * 4].view(torch.int32)
    plain = torch.sum(words, dtype=torch.int64)
    # position-weighted over a strided view, so moved values change the digest too
    odd = torch.sum(words[1::2], dtype=torch.int64) * 3
    return torch.stack([plain, odd]).cpu().numpy().tobytes()


def kv_checksum(kv_caches: Iterable[Any]) -> str:
    """A digest of the given KV cache tensors (syncs; tests and kv_guard only).

    Host tensors are hashed byte for byte; device tensors are reduced on the device.
    """
    h = hashlib.sha256()
    seen: set[int] = set()
    for t in _tensors(kv_caches):
        if t.device.type != "cpu":
            key = t.untyped_storage().data_ptr()
            if key not in seen:
                seen.add(key)
                h.update(_device_digest(t))
            continue
        key = t.untyped_storage().data_ptr()
        if key in seen:  # shared layers alias one tensor
            continue
        seen.add(key)
        h.update(t.detach().contiguous().view(torch.uint8).cpu().numpy().tobytes())
    return h.hexdigest()


def target_kv_checksum(vllm_config: Any) -> str:
    """:func:`kv_checksum` over every attention layer's KV cache (both runners)."""
    from vllm_frozen_kv_mtp.kv_readonly import attention_layers

    layers = attention_layers(vllm_config)
    return kv_checksum(getattr(layer, "kv_cache", None) for layer in layers.values())


class KVWriteError(RuntimeError):
    """The drafter changed the target's KV cache (it must only read it)."""


#: the drafters' counters in this process, logged at exit while their drafter lives
_exit_stats: list[weakref.ref[DraftStats]] = []


def log_stats_at_exit(stats: DraftStats) -> None:
    """Log ``stats.summary()`` when this process exits (engine core or worker)."""
    if not _exit_stats:
        atexit.register(_log_exit_stats)
    _exit_stats.append(weakref.ref(stats))


def _log_exit_stats() -> None:
    for ref in _exit_stats:
        stats = ref()
        if stats is not None and (stats.rounds or stats.skipped_rounds):
            logger.info("%s", stats.summary())
