"""Patch bodies: build our drafter subclass where vLLM builds Gemma 4's (V1 and V2).

Registry entries (generated from ``patches/__init__.py``; edit them there):

Patch 2: ``vllm.v1.spec_decode.gemma4.Gemma4Proposer.__new__`` (V1 runner, also vLLM's
    CPU runner; vLLM < 0.34)
Why: ``GPUModelRunner.__init__`` picks the drafter class from a hard-coded if/elif chain
    over the speculative config, and later asserts ``isinstance(drafter,
    Gemma4Proposer)`` against that same class.
How: give ``Gemma4Proposer`` a ``__new__`` that builds our subclass
    ``FrozenKVMTPProposer`` when the engine's ``additional_config`` carries
    frozen_kv_mtp options, and a plain ``Gemma4Proposer`` otherwise. No module global is
    rebound, so every isinstance check keeps holding and runs that did not ask for
    frozen_kv_mtp are untouched.
Upstream: RFC vllm-project/vllm#36219; vllm-ascend ports Gemma 4 MTP as a subclass too
    (vllm-ascend#13045).
Remove when: the window drops vLLM 0.33 (0.34 has no V1 runner).

Patch 3: ``vllm.v1.worker.gpu.spec_decode.gemma4.speculator.Gemma4Speculator.__new__``
    (Model Runner V2, the GPU default; vLLM < 0.34)
Why: ``init_speculator`` constructs ``Gemma4Speculator`` for method 'mtp' with a Gemma 4
    assistant; there is no hook to pick another class.
How: as patch 2: a ``__new__`` that builds ``FrozenKVMTPSpeculator`` (a subclass) only
    when the engine asked for frozen_kv_mtp.
Upstream: RFC vllm-project/vllm#36219 (V2 port of Gemma 4 MTP: vllm-project/vllm#43241).
Remove when: vLLM can register a speculative method and its speculator by name (0.34:
    the registered config's ``speculator_class``).
"""

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
