"""Every ``--speculative-config`` key a ``frozen_kv_mtp`` engine reads, in one table.

``frozen-kv-mtp options`` prints it, so a user finds each key, its default and where it
is documented without leaving the terminal; a unit test keeps it, the config parser
and the docs in step (a key accepted but not listed here, or listed but missing from
its doc, fails it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields

from vllm_frozen_kv_mtp.frontend.translate import PASSTHROUGH_KEYS, UNSUPPORTED_KEYS
from vllm_frozen_kv_mtp.options import (
    AUTO_DEFAULT_K_MAX,
    CENTROID_HEADS,
    DENSE_HEADS,
    DRAFT_SAMPLE_METHODS,
    MAX_NUM_SPECULATIVE_TOKENS,
    PLUGIN_KEYS,
    REJECTION_METHODS,
    TARGET_SOFTCAPS,
    FrozenKVOptions,
)

README = "README.md#options"
TUNING = "docs/tuning.md"


@dataclass(frozen=True)
class KeyHelp:
    default: str
    meaning: str
    doc: str = README


def _plugin_default(name: str) -> str:
    value = next(f.default for f in fields(FrozenKVOptions) if f.name == name)
    return "-1 (vLLM's)" if name == "sliding_split_kv_max_rows" else json.dumps(value)


def _one_of(values: tuple[str, ...]) -> str:
    return " | ".join(f'"{v}"' for v in values)


#: what a user sets: README's options table
USER_KEYS: dict[str, KeyHelp] = {
    "method": KeyHelp("-", '"frozen_kv_mtp"'),
    "model": KeyHelp("required", "the target's Gemma 4 assistant checkpoint"),
    "num_speculative_tokens": KeyHelp(
        "2 for E2B-sized targets, else 4",
        f'k, drafts per round: 1..{MAX_NUM_SPECULATIVE_TOKENS}, or "auto" (k chosen each '
        "step from measured acceptance and step costs)",
    ),
    "max_num_speculative_tokens": KeyHelp(str(AUTO_DEFAULT_K_MAX), 'the ceiling of "auto"'),
    "num_speculative_tokens_per_batch_size": KeyHelp(
        "none", "vLLM's batch-size schedule [[first, last, k], ...] (k = 0 allowed)"
    ),
    "draft_sample_method": KeyHelp(
        '"probabilistic"',
        f"{_one_of(DRAFT_SAMPLE_METHODS)}; chosen per batch: all-greedy batches draft "
        "greedily, a batch with a sampled request samples its drafts from the assistant",
    ),
    "rejection_sample_method": KeyHelp(
        '"standard"',
        f'{_one_of(REJECTION_METHODS)}; "block" on Model Runner V2 and vLLM >= 0.33 only, '
        '"synthetic" for benchmarks on dummy weights (GPU only)',
    ),
    "synthetic_acceptance_rates": KeyHelp(
        "none", 'per-position acceptance for rejection_sample_method="synthetic"'
    ),
    "synthetic_acceptance_length": KeyHelp(
        "none", 'mean acceptance length for rejection_sample_method="synthetic"'
    ),
    "draft_tensor_parallel_size": KeyHelp(
        "the target's TP", "must equal the target's TP (the drafter reads its sharded KV)"
    ),
    "revision": KeyHelp("vLLM's", "the assistant's revision"),
    "code_revision": KeyHelp("vLLM's", "as in vLLM"),
    "quantization": KeyHelp("vLLM's", "the assistant's quantization"),
    "max_model_len": KeyHelp("the target's", "as in vLLM"),
    "enforce_eager": KeyHelp("vLLM's", "run the drafter without CUDA graphs"),
}

#: expert knobs: docs/tuning.md
EXPERT_KEYS: dict[str, KeyHelp] = {
    "centroid_head": KeyHelp(
        _plugin_default("centroid_head"),
        f"{_one_of(CENTROID_HEADS)}; how Model Runner V2 scores greedy drafts from an "
        "E2B/E4B centroid head",
        TUNING,
    ),
    "dense_head": KeyHelp(
        _plugin_default("dense_head"),
        f"{_one_of(DENSE_HEADS)}; greedy drafts without a logits tensor (31B/26B-A4B, TP 1)",
        TUNING,
    ),
    "draft_attention": KeyHelp(
        _plugin_default("draft_attention"),
        '"vllm" | "split"; the drafter\'s one-row decode attention (TRITON_ATTN)',
        TUNING,
    ),
    "sliding_split_kv_max_rows": KeyHelp(
        _plugin_default("sliding_split_kv_max_rows"),
        "largest batch whose sliding-window drafter layers split KV (TRITON_ATTN)",
        TUNING,
    ),
    "target_softcap": KeyHelp(
        _plugin_default("target_softcap"),
        f"{_one_of(TARGET_SOFTCAPS)}; the target's logit soft-cap in one pass (NVIDIA)",
        TUNING,
    ),
    "kv_guard": KeyHelp(
        _plugin_default("kv_guard"),
        "checksum the target KV around every draft round (debugging; syncs the device)",
        TUNING,
    ),
}


def accepted_keys() -> set[str]:
    """What the config parser lets through (config._check_keys)."""
    return set(PASSTHROUGH_KEYS) | set(PLUGIN_KEYS) | {"method"}


def render() -> str:
    """The ``frozen-kv-mtp options`` text."""
    out = ["Keys of --speculative-config for method frozen_kv_mtp:", ""]
    for title, table in (("Options", USER_KEYS), ("Expert knobs", EXPERT_KEYS)):
        doc = next(iter(table.values())).doc
        out.append(f"{title} (documented in {doc}):")
        width = max(len(k) for k in table)
        for key, h in table.items():
            out.append(f"  {key:<{width}}  default {h.default}")
            out.append(f"  {'':<{width}}  {h.meaning}")
        out.append("")
    out.append("Refused at config time (the error names the fix):")
    width = max(len(k) for k in UNSUPPORTED_KEYS)
    for key, why in sorted(UNSUPPORTED_KEYS.items()):
        out.append(f"  {key:<{width}}  {why}")
    out += [
        "",
        "Check a config without starting an engine:",
        "  frozen-kv-mtp check-config TARGET "
        '\'{"method":"frozen_kv_mtp","model":"ASSISTANT","num_speculative_tokens":4}\'',
    ]
    return "\n".join(out)
