"""Patch body: Model Runner V2 hands its sampling states to our speculator at load.

vLLM's V2 speculator decides sampled drafts per engine: with
``draft_sample_method="probabilistic"`` every round computes full-vocabulary draft
logits, greedy batches included. Ours decides per batch, as vLLM's V1 runner does, and
needs each request's temperature on the host to do it without a device sync. The model
runner builds its sampler (and the per-request ``SamplingStates``) in ``load_model``,
after the speculator, and never passes it on.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from vllm_frozen_kv_mtp.patches.state import wrap_once


def _patch_hand_sampling_states(mod: ModuleType) -> None:
    wrap_once(mod.GPUModelRunner, "load_model", _handing_sampling_states)


def _handing_sampling_states(original: Callable[..., Any]) -> Callable[..., Any]:
    def load_model(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        hand_sampling_states(self)
        return result

    return load_model


def hand_sampling_states(runner: Any) -> bool:
    """Give the runner's speculator its sampler's states, if the speculator is ours."""
    attach = getattr(getattr(runner, "speculator", None), "attach_sampling_states", None)
    states = getattr(getattr(runner, "sampler", None), "sampling_states", None)
    if attach is None or states is None:
        return False
    attach(states)
    return True
