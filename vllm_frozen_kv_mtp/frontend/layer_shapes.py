"""Pure helpers over Gemma 4 configs: per-layer KV shapes and drafter->target layer owners.

They accept both config styles seen in the wild: hub ``config.json`` files
(``global_head_dim``, ``num_global_key_value_heads``) and configs written by
transformers >= 5.15 (``per_layer_config``, sparse dict or per-layer view).
"""

from __future__ import annotations

from typing import Any

GEMMA4_TARGET_TYPES = ("gemma4", "gemma4_text")
GEMMA4_ASSISTANT_TYPES = ("gemma4_assistant",)


def text_config(cfg: Any) -> Any:
    get = getattr(cfg, "get_text_config", None)
    tc = get() if callable(get) else getattr(cfg, "text_config", None) or cfg
    return tc


def _override(per_layer: Any, idx: int, key: str) -> Any:
    if per_layer is None:
        return None
    if isinstance(per_layer, dict):
        entry = per_layer.get(str(idx), per_layer.get(idx))
        if entry is None:
            return None
        return entry.get(key) if isinstance(entry, dict) else getattr(entry, key, None)
    try:
        layer = per_layer[idx]
    except (IndexError, KeyError, TypeError):
        return None
    return layer.get(key) if isinstance(layer, dict) else getattr(layer, key, None)


def layer_kv_shape(tc: Any, idx: int) -> tuple[int, int]:
    """(num KV heads, head size) of decoder layer ``idx`` of a Gemma 4 text config."""
    layer_types = list(getattr(tc, "layer_types", None) or [])
    is_full = idx < len(layer_types) and layer_types[idx] == "full_attention"
    per_layer = getattr(tc, "per_layer_config", None)
    head_dim = _override(per_layer, idx, "head_dim")
    kv_heads = _override(per_layer, idx, "num_key_value_heads")
    if head_dim is None:
        head_dim = getattr(tc, "global_head_dim", None) if is_full else None
        head_dim = head_dim or getattr(tc, "head_dim", None)
    if kv_heads is None:
        if is_full and getattr(tc, "attention_k_eq_v", False):
            kv_heads = getattr(tc, "num_global_key_value_heads", None)
        kv_heads = kv_heads or getattr(tc, "num_key_value_heads", None)
    if head_dim is None or kv_heads is None:
        raise ValueError(f"cannot read the attention shape of layer {idx} from {type(tc).__name__}")
    return int(kv_heads), int(head_dim)


def kv_owner_layers(target_tc: Any) -> dict[str, int]:
    """Layer type -> index of the target's last non-KV-shared layer of that type.

    This is the layer whose KV cache a drafter layer of that type reads (the same
    rule as vLLM's ``Gemma4Proposer._setup_gemma4_kv_sharing`` and SGLang).
    """
    layer_types = list(getattr(target_tc, "layer_types", None) or [])
    num_shared = int(getattr(target_tc, "num_kv_shared_layers", 0) or 0)
    owners: dict[str, int] = {}
    for idx, lt in enumerate(layer_types[: len(layer_types) - num_shared]):
        owners[lt] = idx
    return owners


def drafter_layer_types(draft_tc: Any) -> list[str]:
    n = int(getattr(draft_tc, "num_hidden_layers", 0) or 0)
    types = list(getattr(draft_tc, "layer_types", None) or [])
    return [types[i] if i < len(types) else "full_attention" for i in range(n)]
