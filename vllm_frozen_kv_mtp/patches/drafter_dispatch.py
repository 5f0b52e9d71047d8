"""Patch bodies: build our drafter subclass where vLLM builds Gemma 4's (V1 and V2)."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from vllm_frozen_kv_mtp.patches.state import MARK


def _dispatching_new(base: type, subclass_path: str) -> Any:
    """A ``__new__`` for ``base`` that builds our subclass when frozen_kv_mtp is on."""

    def __new__(cls: type, vllm_config: Any, *args: Any, **kwargs: Any) -> Any:
        if cls is base:
            from vllm_frozen_kv_mtp.options import options_from_vllm_config

            if options_from_vllm_config(vllm_config) is not None:
                module_name, _, cls_name = subclass_path.rpartition(".")
                cls = getattr(importlib.import_module(module_name), cls_name)
        return object.__new__(cls)

    setattr(__new__, MARK, True)
    return __new__


def _patch_v1_proposer_new(mod: ModuleType) -> None:
    cls = mod.Gemma4Proposer
    if getattr(cls.__dict__.get("__new__"), MARK, False):
        return
    cls.__new__ = _dispatching_new(cls, "vllm_frozen_kv_mtp.drafters.proposer.FrozenKVMTPProposer")


def _patch_v2_speculator_new(mod: ModuleType) -> None:
    cls = mod.Gemma4Speculator
    if getattr(cls.__dict__.get("__new__"), MARK, False):
        return
    cls.__new__ = _dispatching_new(
        cls, "vllm_frozen_kv_mtp.drafters.speculator.FrozenKVMTPSpeculator"
    )
