"""Engine settings shared by the CUDA tests."""

from typing import Any

#: a small KV cache keeps the per-round KV checksums (kv_guard) cheap
KV_BYTES = 64 * 1024 * 1024
#: CUDA graphs (FULL for uniform decode batches) without torch.compile: compile adds
#: minutes per engine and does not change what these tests check
GRAPH_KW: dict[str, Any] = {
    "compilation_config": {"mode": 0, "cudagraph_mode": "FULL_AND_PIECEWISE"},
    "enforce_eager": False,
    "kv_cache_memory_bytes": KV_BYTES,
}
