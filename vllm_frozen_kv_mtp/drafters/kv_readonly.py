"""Load-time checks that the drafter only reads target KV and owns none."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from vllm_frozen_kv_mtp.adapters import active


def attention_layers(vllm_config: Any) -> dict[str, Any]:
    """Every attention layer of the engine (target and drafter), by name."""
    return active.frontend.attention_layers(vllm_config)


class ReadOnlyKVError(RuntimeError):
    """The drafter's attention is not wired read-only onto a matching target layer."""


def _attn_shape(layer: Any) -> tuple[Any, Any, Any]:
    impl = getattr(layer, "impl", None)
    window = getattr(impl, "sliding_window", None)
    if window is None:
        window = getattr(layer, "sliding_window", None)
    return getattr(layer, "num_kv_heads", None), getattr(layer, "head_size", None), window


def check_readonly_wiring(vllm_config: Any, draft_layer_names: Iterable[str]) -> None:
    """Every drafter attention layer shares a target layer of the same type and head size."""
    layers = attention_layers(vllm_config)
    names = sorted(draft_layer_names)
    if not names:
        raise ReadOnlyKVError("frozen_kv_mtp: the drafter has no attention layers")
    for name in names:
        layer = layers[name]
        target = getattr(layer, "kv_sharing_target_layer_name", None)
        if not target:
            raise ReadOnlyKVError(
                f"frozen_kv_mtp: drafter layer {name} does not share a target layer's KV"
            )
        if target in names or target not in layers:
            raise ReadOnlyKVError(
                f"frozen_kv_mtp: drafter layer {name} shares {target!r}, not a target layer"
            )
        if _attn_shape(layer) != _attn_shape(layers[target]):
            raise ReadOnlyKVError(
                f"frozen_kv_mtp: drafter layer {name} (kv heads, head size, window) = "
                f"{_attn_shape(layer)} does not match target layer {target} = "
                f"{_attn_shape(layers[target])}"
            )


def check_drafter_owns_no_kv(kv_cache_config: Any, draft_layer_names: Iterable[str]) -> None:
    """No KV cache tensor is allocated for a drafter layer alone."""
    draft = set(draft_layer_names)
    for tensor in kv_cache_config.kv_cache_tensors:
        owners = set(tensor.layers)  # the layers placed in this allocation
        if owners and owners <= draft:
            raise ReadOnlyKVError(
                f"frozen_kv_mtp: KV memory was allocated for drafter layers {sorted(owners)}"
            )


def copy_target_kv_scales(vllm_config: Any, draft_layer_names: Iterable[str]) -> None:
    """Give each drafter layer its target layer's K/V scales (FP8 KV caches).

    The V1 proposer leaves the drafter's scales at 1.0 while it reads the
    target's calibrated FP8 cache (vllm-project/vllm#41789). Model Runner V2
    already copies them; we reuse its helper rather than a copy of it.
    """
    layers = attention_layers(vllm_config)
    for name in draft_layer_names:
        layer = layers[name]
        target = layers[layer.kv_sharing_target_layer_name]
        if hasattr(layer, "_k_scale") and hasattr(target, "_k_scale"):
            active.proposer_helpers.copy_target_kv_scales(layer, target)
