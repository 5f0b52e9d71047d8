"""The options contract every process reads: what a ``frozen_kv_mtp`` engine carries.

The front end (``frontend/``) validates the user's config and writes
:class:`FrozenKVOptions` where the adapter carries them (``carry_options``): on vLLM
0.32/0.33 ``VllmConfig.additional_config[ADDITIONAL_CONFIG_KEY]``, on 0.34 the
speculative config's ``speculator_options`` under the registered method; the engine core
and every worker read them back with :func:`options_from_vllm_config`. This module also
holds each option's value list and the error type every config-time refusal raises, so
that no reader has to import the front end to learn them. It imports neither vLLM nor
torch.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from vllm_frozen_kv_mtp.identity import METHOD

#: key in ``VllmConfig.additional_config`` that carries our options to every process
#: (vLLM 0.32/0.33)
ADDITIONAL_CONFIG_KEY = METHOD
MAX_NUM_SPECULATIVE_TOKENS = 32

#: value of num_speculative_tokens that turns on the goodput policy (draft_length/)
AUTO_K = "auto"
#: the ceiling of "auto" when max_num_speculative_tokens is not given
AUTO_DEFAULT_K_MAX = 7
#: how k is chosen per step: a fixed k, vLLM's batch-size schedule, or the goodput policy
K_POLICIES = ("static", "schedule", AUTO_K)

#: vLLM's rejection methods, all of which work with frozen_kv_mtp where vLLM runs them
REJECTION_METHODS = ("standard", "synthetic", "block")
#: values of draft_sample_method (vLLM's)
DRAFT_SAMPLE_METHODS = ("greedy", "probabilistic")
#: values of the ``centroid_head`` option (drafters/heads.py)
CENTROID_HEADS = ("upstream", "sparse", "dense", "fused", "auto")
#: values of the ``dense_head`` option (drafters/heads.py, kernels/dense_head.py)
DENSE_HEADS = ("upstream", "fused", "fp8")
#: values of the ``target_softcap`` option (patches/target_softcap.py)
TARGET_SOFTCAPS = ("one_pass", "vllm")
#: values of the ``draft_attention`` option: vLLM's kernels (default) or the split
#: decode kernel for one-row batches (patches/split_decode.py)
DRAFT_ATTENTIONS = ("vllm", "split")
#: ``sliding_split_kv_max_rows`` default: leave vLLM's split-KV threshold alone
#: (patches/sliding_split_kv.py)
VLLM_SPLIT_KV_THRESHOLD = -1


class FrozenKVMTPConfigError(ValueError):
    """A bad ``frozen_kv_mtp`` speculative config, found before any engine starts."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(f"frozen_kv_mtp: {problem} Fix: {fix}")
        self.problem = problem
        self.fix = fix


@dataclass(frozen=True)
class FrozenKVOptions:
    """Plugin-only options; they travel to workers with the engine config."""

    #: checksum every target KV block around each draft round and fail on any change
    #: (a debugging guard: it syncs with the device, so keep it off in production)
    kv_guard: bool = False
    #: how Model Runner V2 picks draft tokens from a centroid head (E2B/E4B assistants):
    #: "auto" (default: fused where its Triton kernels run; else dense from
    #: AUTO_DENSE_MIN_ROWS rows and upstream's below; on the V1 runner, V1's own head),
    #: "upstream" (vLLM's full-vocabulary argmax), "sparse", "dense" or "fused"; see
    #: drafters/heads.py
    centroid_head: str = "auto"
    #: Model Runner V2 with TRITON_ATTN: the drafter's sliding-window layers split KV
    #: (vLLM's "3D" kernel plus a reduce) only for batches of at most this many rows,
    #: and read the window in one pass above; -1 keeps vLLM's threshold, which it can
    #: only lower (see patches/sliding_split_kv.py)
    sliding_split_kv_max_rows: int = VLLM_SPLIT_KV_THRESHOLD
    #: Model Runner V2 with TRITON_ATTN: "vllm" (default) runs the drafter's attention
    #: with vLLM's kernels; "split" (opt-in) runs its one-row decode batches with
    #: decode_attention_kernel (see patches/split_decode.py)
    draft_attention: str = "vllm"
    #: Model Runner V2, assistants without centroids (31B, 26B-A4B), one GPU per
    #: drafter: "upstream" (default) drafts with vLLM's logits and argmax; "fused" and
    #: "fp8" with two Triton launches and no logits tensor, "fp8" over FP8 weights with
    #: one scale per vocabulary row (see kernels/dense_head.py)
    dense_head: str = "upstream"
    #: NVIDIA GPUs, both runners: "one_pass" (default) soft-caps the target's logits
    #: (the (k+1) x c rows of each verify pass) in one in-place kernel, bitwise vLLM's
    #: result; "vllm" keeps vLLM's three eager ops (see kernels/softcap_kernel.py)
    target_softcap: str = "one_pass"
    #: ceiling of num_speculative_tokens="auto" (the goodput policy picks 0..this)
    max_num_speculative_tokens: int = AUTO_DEFAULT_K_MAX
    #: how k is chosen per step, set by the front end (not a user key): one of K_POLICIES
    k_policy: str = "static"

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> FrozenKVOptions:
        d = dict(d or {})
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})


#: options the front end sets itself
INTERNAL_KEYS = frozenset({"k_policy"})
PLUGIN_KEYS = frozenset(f.name for f in fields(FrozenKVOptions)) - INTERNAL_KEYS


def options_from_vllm_config(vllm_config: Any) -> FrozenKVOptions | None:
    """Our options if this engine asked for frozen_kv_mtp, else None."""
    from vllm_frozen_kv_mtp.adapters import active

    raw = active.frontend.options_of(vllm_config)
    if raw is None:
        return None
    spec = getattr(vllm_config, "speculative_config", None)
    if spec is None or not spec.use_gemma4_mtp():
        return None
    return FrozenKVOptions.from_dict(raw)
