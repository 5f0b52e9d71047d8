"""Patch bodies: the target's logit soft-cap in one in-place pass (NVIDIA GPUs), and the
mark that keeps it to this engine's target.

Registry entries (generated from ``patches/__init__.py``; edit them there):

Patch 5: ``vllm.model_executor.layers.logits_processor.LogitsProcessor.forward`` (NVIDIA
    GPUs, option ``target_softcap="one_pass"``, the default)
Why: Gemma 4 soft-caps its logits as three eager ops, each a full pass over [rows,
    vocabulary]. A verify pass scores (k+1) x c rows, so this is part of the speculative
    overhead that grows with the batch (docs/tuning.md, ``target_softcap``).
How: when the logits processor has a soft-cap and a scale of 1 (Gemma 4), take the
    logits from vLLM's own ``_get_logits`` and soft-cap them in place with
    ``kernels/softcap_kernel.softcap_in_place``, which rounds where the eager ops round:
    the result is bitwise vLLM's (every bf16 and fp16 value is checked in tests/gpu).
    Only the logits processors our drafter marks at load time (patch 8: its engine's
    target) take this path; anything else goes to vLLM's method.
Upstream: not filed in vllm-project/vllm yet; a one-pass soft-cap in ``LogitsProcessor``
    would serve every Gemma model (and no speculation).
Remove when: vLLM soft-caps logits in one pass.

Patch 8: ``vllm.model_executor.layers.logits_processor.LogitsProcessor._frozen_kv_mtp_ta
    rget_softcap`` (load time, with patch 5, made by
    ``vllm_frozen_kv_mtp.patches.target_softcap.mark_target_logits``)
Why: patch 5 must act on this engine's target only, not on the drafter's head or on
    another engine in the same process.
How: ``mark_target_logits`` sets the attribute on the target's soft-capped
    ``LogitsProcessor`` instances when the drafter loads.
Upstream: goes with patch 5 (not filed in vllm-project/vllm).
Remove when: patch 5 is removed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import ModuleType
from typing import Any

from vllm_frozen_kv_mtp.patches.state import TARGET_SOFTCAP_ATTR, wrap_once

logger = logging.getLogger("vllm.frozen_kv_mtp")


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


def mark_target_logits(target_model: Any, mode: str = "one_pass") -> int:
    """Mark the target's soft-capped logits processors for patch 5 with ``mode`` (option
    ``target_softcap``, "one_pass"); how many were marked (0: the target does not
    soft-cap)."""
    from vllm_frozen_kv_mtp.adapters import active

    LogitsProcessor = active.frontend.logits_processor_cls()

    modules = getattr(target_model, "modules", None)  # wrappers forward it to the model
    if modules is None:
        logger.warning(
            "frozen_kv_mtp: cannot reach the target's modules through %s; its soft-cap "
            "keeps vLLM's ops",
            type(target_model).__name__,
        )
        return 0
    marked = 0
    for module in modules():
        if isinstance(module, LogitsProcessor) and module.soft_cap is not None:
            setattr(module, TARGET_SOFTCAP_ATTR, mode)
            marked += 1
    if marked and _on_cuda(target_model):
        logger.info(
            "frozen_kv_mtp: the target's logit soft-cap runs in one pass on CUDA "
            "(target_softcap=%r; bitwise vLLM's three ops)",
            mode,
        )
    elif marked:
        logger.info(
            "frozen_kv_mtp: target_softcap=%r is a CUDA kernel; on this device the "
            "target's logit soft-cap keeps vLLM's ops",
            mode,
        )
    return marked


def _on_cuda(target_model: Any) -> bool:
    """Whether the target's weights are on a CUDA device (patch 5 runs only there)."""
    parameters = getattr(target_model, "parameters", None)
    first = next(iter(parameters()), None) if parameters is not None else None
    return first is not None and first.is_cuda
