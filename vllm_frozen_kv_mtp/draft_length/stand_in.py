"""The stand-in schedule vLLM needs under "auto", and the k's that get CUDA graphs.

vLLM learns which k a step may run at from ``num_speculative_tokens_per_batch_size``
only: it has no way to be told "any k in 0..k_max, chosen per step". Under ``"auto"``
the front end hands it a stand-in schedule that puts every k at some batch size
(:func:`graph_capture_schedule`), and :func:`runnable_draft_lengths` says which k's an
engine may run, for the graph captures that must cover them (this package's
``__init__`` lists every place that compensates for the stand-in).
"""

from __future__ import annotations

from typing import Any

from vllm_frozen_kv_mtp.adapters import active
from vllm_frozen_kv_mtp.options import AUTO_K, FrozenKVOptions


def graph_capture_schedule(k_max: int) -> list[list[int]]:
    """The schedule vLLM gets under "auto": it makes every k in 0..k_max appear in vLLM's
    dense table, so Model Runner V2 captures a graph per (batch bucket, k) and vLLM stops
    padding decode batches to a fixed k. Our scheduler replaces the table itself."""
    return [[i + 1, i + 1, k_max - i] for i in range(k_max + 1)]


def runnable_draft_lengths(
    options: FrozenKVOptions, speculative_config: Any, k_max: int, max_num_reqs: int
) -> list[int]:
    """Every k a step of this engine may run at, largest first, 0 included: what CUDA
    graphs must be captured for. Under "auto" all of 0..k_max whatever ``max_num_reqs``
    is (vLLM's dense table of the stand-in schedule holds only its first ``max_num_reqs``
    rows); under a schedule, the k's of vLLM's dense table."""
    if options.k_policy == AUTO_K:
        return list(range(k_max, -1, -1))
    dense = active.frontend.dense_k_table(
        speculative_config.num_speculative_tokens_per_batch_size, max_num_reqs, k_max
    )
    return sorted(set(dense[1:]), reverse=True)
