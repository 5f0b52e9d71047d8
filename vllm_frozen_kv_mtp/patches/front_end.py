"""Patch body: accept and translate method 'frozen_kv_mtp' in ``EngineArgs``.

Registry entries (generated from ``patches/__init__.py``; edit them there):

Patch 1: ``vllm.engine.arg_utils.EngineArgs.create_speculative_config`` (front end)
Why: ``SpeculativeConfig.method`` is a pydantic ``Literal``; vLLM 0.32/0.33 have no
    proposer registry, so ``"frozen_kv_mtp"`` is rejected before any hook could see it.
    vLLM 0.34 registers methods, but ``num_speculative_tokens="auto"`` (a string where
    vLLM wants an integer, and a scheduler class no speculator config can set) and the
    ``--spec-*`` flags still need translating before vLLM reads them.
How: wrap the method. For ``method == "frozen_kv_mtp"`` only: validate the request
    (assistant, target, k, shapes, PP, keys; errors name the fix) and hand it to vLLM as
    the adapter does (``carry_options``). On 0.32/0.33: rewritten to vLLM's own
    ``"mtp"`` (so every in-tree gate keeps working: async scheduling, Model Runner V2
    eligibility, attention init), the plugin options carried to every process in
    ``additional_config``. On 0.34: the method kept (registered with vLLM, which runs it
    as Gemma 4 MTP's ``"mtp"``), the options in ``speculator_options``. Any other method
    goes straight to the original.
Upstream: RFC vllm-project/vllm#36219 (proposer interface unification); vLLM 0.34's
    ``register_speculative_method`` covers the method name and the drafter.
Remove when: the goodput policy's k and scheduler can be set without translating
    ``"auto"`` (vLLM 0.34 registers the method and its speculator by name).
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
