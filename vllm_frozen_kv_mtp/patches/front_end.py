"""Patch body: accept and translate method 'frozen_kv_mtp' in ``EngineArgs``."""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from vllm_frozen_kv_mtp.patches.state import MARK


def _patch_create_speculative_config(mod: ModuleType) -> None:
    from vllm_frozen_kv_mtp.config import translate_speculative_config

    cls = mod.EngineArgs
    original = cls.create_speculative_config
    if getattr(original, MARK, False):
        return

    @functools.wraps(original)
    def create_speculative_config(
        self: Any, target_model_config: Any, target_parallel_config: Any
    ) -> Any:
        translated = translate_speculative_config(self, target_model_config, target_parallel_config)
        result = original(self, target_model_config, target_parallel_config)
        if translated is not None:
            translated.check_result(result)
        return result

    setattr(create_speculative_config, MARK, True)
    cls.create_speculative_config = create_speculative_config
