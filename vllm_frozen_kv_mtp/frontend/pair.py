"""Does the assistant go with the target? The pair checks of the front end.

A frozen-KV drafter reads the target's KV cache through its own attention layers, so the
assistant must be a Gemma 4 assistant trained for this target's size: same hidden size,
same vocabulary, and for every drafter layer a target layer of its type with the same KV
shape. Each refusal names the fix; a missing ``"model"`` names the target's own assistant
where it can be found.
"""

from __future__ import annotations

import difflib
import json
import os
from pathlib import Path
from typing import Any

from vllm_frozen_kv_mtp.frontend.layer_shapes import (
    GEMMA4_ASSISTANT_TYPES,
    GEMMA4_TARGET_TYPES,
    drafter_layer_types,
    kv_owner_layers,
    layer_kv_shape,
    text_config,
)
from vllm_frozen_kv_mtp.options import FrozenKVMTPConfigError


def missing_model_fix(target_model_config: Any) -> str:
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


def load_assistant_config(model: str, revision: str | None, trust_remote_code: bool) -> Any:
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
