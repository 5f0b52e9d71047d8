"""Patch body: accept and translate method 'frozen_kv_mtp' in ``EngineArgs``."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from vllm_frozen_kv_mtp.patches.state import wrap_once


def _patch_create_speculative_config(mod: ModuleType) -> None:
    wrap_once(mod.EngineArgs, "create_speculative_config", _translating)


def _translating(original: Callable[..., Any]) -> Callable[..., Any]:
    from vllm_frozen_kv_mtp.frontend.translate import translate_speculative_config

    def create_speculative_config(
        self: Any, target_model_config: Any, target_parallel_config: Any
    ) -> Any:
        translated = translate_speculative_config(self, target_model_config, target_parallel_config)
        result = original(self, target_model_config, target_parallel_config)
        if translated is not None:
            translated.check_result(result)
        return result

    return create_speculative_config
