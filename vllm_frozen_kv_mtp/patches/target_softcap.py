"""Patch body: the target's logit soft-cap in one in-place pass (NVIDIA GPUs)."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from vllm_frozen_kv_mtp.patches.state import TARGET_SOFTCAP_ATTR, wrap_once


def _patch_one_pass_softcap(mod: ModuleType) -> None:
    wrap_once(mod.LogitsProcessor, "forward", _one_pass_softcap)


def _one_pass_softcap(original: Callable[..., Any]) -> Callable[..., Any]:
    def forward(
        self: Any,
        lm_head: Any,
        hidden_states: Any,
        embedding_bias: Any = None,
        skip_gather: bool = False,
    ) -> Any:
        mode = getattr(self, TARGET_SOFTCAP_ATTR, None)
        if not (
            mode
            and self.soft_cap is not None
            and self.scale == 1.0
            and not self.logits_as_input
            and hidden_states.is_cuda
        ):
            return original(self, lm_head, hidden_states, embedding_bias, skip_gather)
        from vllm_frozen_kv_mtp.kernels import fallbacks
        from vllm_frozen_kv_mtp.kernels.softcap_kernel import (
            eager_softcap,
            one_pass_softcap_refusal,
            softcap_in_place,
        )

        logits = self._get_logits(hidden_states, lm_head, embedding_bias, skip_gather)
        if logits is None:  # TP ranks > 0 under gather
            return None
        refused = one_pass_softcap_refusal(logits)
        if refused is not None:
            fallbacks.record("one_pass_softcap", refused)
            return eager_softcap(logits, self.soft_cap)
        return softcap_in_place(logits, self.soft_cap)

    return forward
