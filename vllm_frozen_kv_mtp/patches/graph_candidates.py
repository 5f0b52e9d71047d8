"""Patch body: every uniform decode batch finds its FULL CUDA graph when k varies.

With one query length (a fixed k) the smallest captured size at or above a token count
always holds a graph of that length. When k varies, the graphs of the other query
lengths sit at other sizes, which the tail of a batch as requests finish and any load
between buckets meet. Under ``"auto"`` the k's come from
``draft_length.stand_in.runnable_draft_lengths`` (the V2 speculator's draft graphs read
the same list), whatever ``max_num_seqs`` is; the manager's own limits (request count,
capture ceiling) still apply.

Registry entries (generated from ``patches/__init__.py``; edit them there):

Patch 6: ``vllm.v1.worker.gpu.cudagraph_utils.CudaGraphManager._init_candidates`` (Model
    Runner V2, k that varies: ``"auto"`` or a batch-size schedule; vLLM < 0.34)
Why: vLLM captures a FULL graph per (batch bucket, query length) when k varies, but
    gives each token count the graphs of the smallest captured size at or above it only.
    A uniform batch whose length has no graph at that size runs without a FULL graph
    (piecewise, or eager without torch.compile) although a larger graph of its length
    exists: 1 request verifying 4 drafts (5 tokens) finds only the 8-token graphs of
    lengths 1, 2, 4 and 8. Every batch size that is not a captured one hits this. Under
    ``"auto"`` vLLM also reads the k's to capture from the stand-in batch-size schedule
    cut at ``max_num_seqs``, which drops k's when ``max_num_seqs < k_max + 1``
    (draft_length/__init__.py, 3).
How: after vLLM builds the candidates, each token count also gets the smallest FULL
    graph of every other query length that fits (ahead of piecewise ones);
    ``_is_compatible`` still decides. Under ``"auto"`` the module's
    ``build_dynamic_sd_schedule_lookup`` is swapped while the method runs, so that the
    table holds every k in 0..k_max. Only in frozen_kv_mtp engines.
Upstream: not filed in vllm-project/vllm yet (v1/worker/gpu/cudagraph_utils.py,
    ``_init_candidates`` groups candidates by token count alone).
Remove when: vLLM's candidates cover every captured query length per token count (0.34
    looks graphs up per query length), and the goodput scheduler can name its k's to
    vLLM without a stand-in schedule.

Patch 6b: ``vllm.config.vllm.VllmConfig.get_decode_cudagraph_query_lens`` (Model Runner
    V2, ``"auto"``; vLLM >= 0.34)
Why: vLLM 0.34 sizes each verify query length's FULL graphs from the batch-size
    schedule: a query length ``k + 1`` gets graphs up to the widest batch size the
    schedule gives that k. Under ``"auto"`` the schedule is a stand-in that puts k_max
    at 1 request, k_max - 1 at 2, ..., so a large batch verifying many drafts would find
    no FULL graph, and k's past ``max_num_seqs - 1`` none at all, though the goodput
    scheduler picks any k in 0..k_max at any batch size.
How: wrap the method. Under ``"auto"`` (this engine's frozen_kv_mtp options), return
    every query length ``k + n`` (k in 0..k_max, n the new tokens a step samples) mapped
    to ``max_num_seqs``; the target's graphs then cover every k at every captured batch
    size. Any other engine, and a query length with no drafts, gets vLLM's answer.
Upstream: not filed in vllm-project/vllm yet (a speculative-config list of the k's a
    scheduler may pick would remove the stand-in schedule).
Remove when: the goodput scheduler can name its k's to vLLM without a stand-in schedule.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from vllm_frozen_kv_mtp.patches.state import wrap_once


def _patch_uniform_graph_candidates(mod: ModuleType) -> None:
    full = mod.CUDAGraphMode.FULL

    def with_uniform_fallbacks(original: Callable[[Any], None]) -> Callable[[Any], None]:
        def _init_candidates(self: Any) -> None:
            from vllm_frozen_kv_mtp.draft_length.stand_in import runnable_draft_lengths
            from vllm_frozen_kv_mtp.options import AUTO_K, options_from_vllm_config

            options = options_from_vllm_config(self.vllm_config)
            if options is not None and options.k_policy == AUTO_K:
                ks = runnable_draft_lengths(
                    options,
                    self.vllm_config.speculative_config,
                    self.vllm_config.num_speculative_tokens,
                    self.max_num_reqs,
                )
                with dense_schedule_holding(mod, ks):
                    original(self)
            else:
                original(self)
            if options is not None:
                add_uniform_fallbacks(self._candidates, self._capture_descs, full)

        return _init_candidates

    wrap_once(mod.CudaGraphManager, "_init_candidates", with_uniform_fallbacks)


def _patch_decode_query_lens(mod: ModuleType) -> None:
    def with_every_k(original: Callable[..., dict[int, int]]) -> Callable[..., dict[int, int]]:
        def get_decode_cudagraph_query_lens(self: Any, decode_query_len: int) -> dict[int, int]:
            from vllm_frozen_kv_mtp.options import AUTO_K, options_from_vllm_config

            options = options_from_vllm_config(self)
            lens = original(self, decode_query_len)
            if options is None or options.k_policy != AUTO_K:
                return lens
            return every_k_query_lens(
                lens,
                decode_query_len,
                self.num_speculative_tokens,
                self.scheduler_config.max_num_seqs,
            )

        return get_decode_cudagraph_query_lens

    wrap_once(mod.VllmConfig, "get_decode_cudagraph_query_lens", with_every_k)


def every_k_query_lens(
    lens: dict[int, int], decode_query_len: int, k_max: int, max_num_seqs: int
) -> dict[int, int]:
    """vLLM's query length -> widest batch table (``lens``, for the widest query length
    ``decode_query_len``) with every k in 0..k_max at every batch size: ``{k + n:
    max_num_seqs}``, n the new tokens a decode step samples. A query length with no
    drafts (n <= 0) keeps vLLM's table. Pure: tested on CPU."""
    num_new = decode_query_len - k_max
    if num_new <= 0:
        return lens
    return {k + num_new: max_num_seqs for k in range(k_max + 1)}


@contextmanager
def dense_schedule_holding(mod: ModuleType, ks: list[int]) -> Iterator[None]:
    """While vLLM's ``_init_candidates`` runs, its dense batch-size -> k table holds the
    k's ``ks``. That method reads only the set of k's in the table (one decode query
    length each), so the table's order and length do not matter there. Start-up runs it
    once per manager, on the worker's main thread; nothing else in ``mod`` reads the name."""
    lookup = mod.build_dynamic_sd_schedule_lookup

    def dense_table(*_: object, **__: object) -> list[int]:
        return [0, *ks]  # index 0 is vLLM's unused slot

    setattr(mod, "build_dynamic_sd_schedule_lookup", dense_table)  # noqa: B010 (a module)
    try:
        yield
    finally:
        setattr(mod, "build_dynamic_sd_schedule_lookup", lookup)  # noqa: B010


def add_uniform_fallbacks(
    candidates: dict[tuple[int, int], list[Any]], capture_descs: dict[Any, list[Any]], full: Any
) -> int:
    """Give each (token count, LoRA case) key the smallest FULL graph of every uniform query
    length its list lacks; returns how many were added. Pure: tested on CPU."""
    by_shape: dict[tuple[int, int, int], list[Any]] = defaultdict(list)
    for d in capture_descs.get(full, []):
        if d.uniform_token_count is not None:
            by_shape[d.uniform_token_count, d.num_active_loras, d.num_ubatches].append(d)
    if len({u for u, _, _ in by_shape}) < 2:
        return 0  # one query length: vLLM's candidates already cover it
    for descs in by_shape.values():
        descs.sort(key=lambda d: d.num_tokens)
    added = 0
    for (num_tokens, loras), cands in candidates.items():
        present = {(d.uniform_token_count, d.num_ubatches) for d in cands if d.cg_mode == full}
        extra = []
        for (u, lora_case, ubatches), descs in by_shape.items():
            if lora_case != loras or (u, ubatches) in present:
                continue
            fit = next((d for d in descs if d.num_tokens >= num_tokens), None)
            if fit is not None:
                extra.append(fit)
        if extra:
            n_full = sum(1 for d in cands if d.cg_mode == full)  # FULL entries lead
            cands[n_full:n_full] = sorted(extra, key=lambda d: d.num_tokens)
            added += len(extra)
    return added
