"""Patch body: Model Runner V2 hands its sampling states to our speculator at load.

Registry entries (generated from ``patches/__init__.py``; edit them there):

Patch 7: ``vllm.v1.worker.gpu.model_runner.GPUModelRunner.load_model`` (Model Runner V2,
    ``draft_sample_method="probabilistic"``, the default; vLLM < 0.34)
Why: vLLM's V2 speculator samples drafts per engine: every round computes full-
    vocabulary draft logits, all-greedy batches included. Ours picks per batch (vLLM's
    V1 rule: sampled drafts when a request samples), which needs each request's
    temperature on the host; the runner builds its sampler's ``SamplingStates`` in
    ``load_model``, after the speculator, and never passes them on.
How: after vLLM's ``load_model``, hand ``self.sampler.sampling_states`` to the
    speculator when it is ours (``attach_sampling_states``); any other speculator is
    left alone. Read-only: the states stay vLLM's.
Upstream: not filed in vllm-project/vllm yet (V2 ``propose`` takes the temperature
    tensor only, on the device).
Remove when: V2 chooses draft sampling per batch, or passes host sampling states to
    ``propose``.
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
