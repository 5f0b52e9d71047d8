"""Parsing and validation of ``{"method": "frozen_kv_mtp", ...}``.

Every config-time error message of the plugin lives here. Validation runs in the
front end (``EngineArgs.create_speculative_config``), before any engine starts,
and each message names the problem and the fix.
"""

from __future__ import annotations

import difflib
import logging
from dataclasses import asdict, dataclass, fields
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
    }
)

#: vLLM keys we refuse, with the reason shown to the user
UNSUPPORTED_KEYS = {
    "kv_cache_dtype": "the drafter owns no KV; it reads the target's cache in the target's "
    "--kv-cache-dtype",
    "attention_backend": "the drafter must use the target's attention backend to read its KV",
    "disable_padded_drafter_batch": "frozen_kv_mtp always drafts from a padded one-row batch",
    "draft_sample_method": "frozen_kv_mtp drafts greedily; verification is lossless at any "
    "temperature",
    "num_speculative_tokens_per_batch_size": "dynamic k is not supported yet",
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

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> FrozenKVOptions:
        d = dict(d or {})
        d.pop("num_speculative_tokens", None)  # informational copy, see translate
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})


PLUGIN_KEYS = frozenset(f.name for f in fields(FrozenKVOptions))


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


def _check_k(k: Any) -> int:
    if isinstance(k, bool) or not isinstance(k, int):
        raise FrozenKVMTPConfigError(
            f"num_speculative_tokens must be an integer, got {k!r}.",
            f"pass an integer between 1 and {MAX_NUM_SPECULATIVE_TOKENS}, e.g. 4.",
        )
    if not 1 <= k <= MAX_NUM_SPECULATIVE_TOKENS:
        raise FrozenKVMTPConfigError(
            f"num_speculative_tokens={k} is out of range.",
            f"pass an integer between 1 and {MAX_NUM_SPECULATIVE_TOKENS} "
            "(Gemma 4 recipes use 2 for E2B and 4 for E4B/26B/31B).",
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
        return None

    _check_keys(cfg)
    model = cfg.get("model")
    if not model:
        target = getattr(target_model_config, "model", "<target>")
        raise FrozenKVMTPConfigError(
            'the speculative config has no assistant "model".',
            f'add "model": "<the target\'s assistant>", e.g. "{target}-assistant" '
            "(Gemma 4 assistants are published as google/gemma-4-<size>-it-assistant).",
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

    if "num_speculative_tokens" in cfg:
        k = _check_k(cfg["num_speculative_tokens"])
    else:
        k = default_k(assistant_cfg)
        logger.info("frozen_kv_mtp: num_speculative_tokens not set, using %d", k)

    options = FrozenKVOptions(**{key: cfg[key] for key in PLUGIN_KEYS if key in cfg})
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
    translated.update(method="mtp", model=model, num_speculative_tokens=k)
    engine_args.speculative_config = translated
    extra = dict(getattr(engine_args, "additional_config", None) or {})
    extra[ADDITIONAL_CONFIG_KEY] = {**asdict(options), "num_speculative_tokens": k}
    engine_args.additional_config = extra
    logger.info(
        "frozen_kv_mtp: assistant %s, k=%d, target %s (drafting from one seed row per "
        "request over the target's read-only KV)",
        model,
        k,
        getattr(target_model_config, "model", "?"),
    )
    return Translation(options=options, num_speculative_tokens=k)
