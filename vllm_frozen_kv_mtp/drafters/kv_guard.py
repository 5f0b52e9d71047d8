"""Option ``kv_guard``: checksum the target's KV cache around every draft round.

The drafter owns no KV and must only read the target's. The load-time checks
(``kv_readonly.py``) prove the wiring; this debugging guard proves the behaviour, round
by round, and fails the engine on any change. It syncs with the device, so it is off by
default.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

import torch

from vllm_frozen_kv_mtp.drafters.kv_readonly import attention_layers


def _tensors(items: Iterable[Any]) -> Iterable[torch.Tensor]:
    for t in items:
        if isinstance(t, torch.Tensor):
            yield t
        elif isinstance(t, (list, tuple)):
            yield from _tensors(t)


def _device_digest(t: torch.Tensor) -> bytes:
    """Two int64 reductions over the raw words, on the tensor's device: copying a
    GPU cache of tens of GiB to the host every round would stall the engine."""
    flat = t.detach().reshape(-1).view(torch.uint8)
    words = flat[: flat.numel() // 4 * 4].view(torch.int32)
    plain = torch.sum(words, dtype=torch.int64)
    # position-weighted over a strided view, so moved values change the digest too
    odd = torch.sum(words[1::2], dtype=torch.int64) * 3
    return torch.stack([plain, odd]).cpu().numpy().tobytes()


def kv_checksum(kv_caches: Iterable[Any]) -> str:
    """A digest of the given KV cache tensors (syncs; tests and kv_guard only).

    Host tensors are hashed byte for byte; device tensors are reduced on the device.
    """
    h = hashlib.sha256()
    seen: set[int] = set()
    for t in _tensors(kv_caches):
        if t.device.type != "cpu":
            key = t.untyped_storage().data_ptr()
            if key not in seen:
                seen.add(key)
                h.update(_device_digest(t))
            continue
        key = t.untyped_storage().data_ptr()
        if key in seen:  # shared layers alias one tensor
            continue
        seen.add(key)
        h.update(t.detach().contiguous().view(torch.uint8).cpu().numpy().tobytes())
    return h.hexdigest()


def target_kv_checksum(vllm_config: Any) -> str:
    """:func:`kv_checksum` over every attention layer's KV cache (both runners)."""
    layers = attention_layers(vllm_config)
    return kv_checksum(getattr(layer, "kv_cache", None) for layer in layers.values())


class KVWriteError(RuntimeError):
    """The drafter changed the target's KV cache (it must only read it)."""
