"""Load-time read-only checks against vLLM's real KV-cache config classes (no engine)."""

from __future__ import annotations

import pytest


def test_drafter_owning_kv_memory_is_caught() -> None:
    """The load-time check reads vLLM's real KVCacheTensor: an allocation placed for
    drafter layers alone is an error, one shared with target layers is not."""
    from types import SimpleNamespace

    from vllm.v1.kv_cache_interface import KVCacheTensor

    from vllm_frozen_kv_mtp.drafters.kv_readonly import ReadOnlyKVError, check_drafter_owns_no_kv

    def tensor(*layers: str) -> KVCacheTensor:
        return KVCacheTensor(size=1024, layers=list(layers), layer_stride=512, block_stride=64)

    draft = ["draft.0.attn", "draft.1.attn"]
    shared = SimpleNamespace(kv_cache_tensors=[tensor("model.0.attn", "model.1.attn")])
    check_drafter_owns_no_kv(shared, draft)
    owned = SimpleNamespace(kv_cache_tensors=[tensor("model.0.attn"), tensor(*draft)])
    with pytest.raises(ReadOnlyKVError, match="draft.0.attn"):
        check_drafter_owns_no_kv(owned, draft)
