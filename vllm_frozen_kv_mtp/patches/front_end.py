"""Patch body: accept and translate method 'frozen_kv_mtp' in ``EngineArgs``.

Registry entries (generated from ``patches/__init__.py``; edit them there):

Patch 1: ``vllm.engine.arg_utils.EngineArgs.create_speculative_config`` (front end)
Why: ``SpeculativeConfig.method`` is a pydantic ``Literal``; vLLM has no proposer
    registry, so ``"frozen_kv_mtp"`` is rejected before any hook could see it.
How: wrap the method. For ``method == "frozen_kv_mtp"`` only: validate the request
    (assistant, target, k, shapes, PP, keys; errors name the fix), rewrite it to vLLM's
    own ``"mtp"`` (so every in-tree gate keeps working: async scheduling, Model Runner
    V2 eligibility, attention init) and carry the plugin options to every process in
    ``additional_config``. Any other method goes straight to the original.
Upstream: RFC vllm-project/vllm#36219 (proposer interface unification).
Remove when: vLLM can register a speculative method and its proposer by name.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from vllm_frozen_kv_mtp.patches.state import wrap_once


def _patch_create_speculative_config(mod: ModuleType) -> None:
    wrap_once(mod.EngineArgs, "create_speculative_config", _translating)


def _translating(original: Callable[..., Any]) -> Callable[..., Any]:
    from vllm_frozen_kv_mtp.frontend.translate import (
        check_translated,
        translate_speculative_config,
    )

    def create_speculative_config(
        self: Any, target_model_config: Any, target_parallel_config: Any
    ) -> Any:
        translated = translate_speculative_config(self, target_model_config, target_parallel_config)
        result = original(self, target_model_config, target_parallel_config)
        if translated:
            check_translated(result)
        return result

    return create_speculative_config
