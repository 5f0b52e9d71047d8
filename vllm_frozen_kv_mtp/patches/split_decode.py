"""Patch body: with ``draft_attention="split"``, the drafter's TRITON_ATTN layers run their
one-row decode batches with ``kernels/decode_attention_kernel``.

Each drafter attention layer keeps vLLM's ``TritonAttentionImpl`` object, metadata
builder and KV-sharing wiring; only the class of that one object changes, to a subclass
whose ``forward`` calls the split decode kernel when the batch is one query row per
request over an unquantised or FP8 (per-tensor scale) cache, FP8 queries included, and
vLLM's own ``forward`` otherwise (profiling runs, per-token-head quantised KV, per-head
query scales, sinks, ALiBi, multimodal prefix ranges, output quantisation, a batch
larger than the workspace). The target's layers are never touched. All drafter layers
share one workspace, sized at load for the largest split batch up to ``max_num_reqs``
rows (batches that fill the GPU take one split and need none), so the calls can be
captured in the round's CUDA graph.

Registry entries (generated from ``patches/__init__.py``; edit them there):

Patch 10: ``vllm.v1.attention.backends.triton_attn.TritonAttentionImpl.__class__`` (load
    time, per drafter layer; Model Runner V2, opt-in ``draft_attention="split"``,
    TRITON_ATTN, made by
    ``vllm_frozen_kv_mtp.patches.split_decode.install_split_decode_attention``)
Why: the drafter's one-row decode batches read long prefixes with few rows; a split
    decode kernel spreads them over more SMs.
How: ``install_split_decode_attention`` swaps the drafter layers' ``impl.__class__`` to
    a subclass that routes one-row batches to ``kernels/decode_attention_kernel`` and
    all else to vLLM's ``forward``. Target layers are never touched.
Upstream: not filed in vllm-project/vllm.
Remove when: the option is removed.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from vllm_frozen_kv_mtp.kernels import fallbacks
from vllm_frozen_kv_mtp.kernels.decode_attention_kernel import (
    DecodeAttentionWorkspace,
    decode_attention,
    default_splits,
    workspace_parts,
)

logger = logging.getLogger("vllm.frozen_kv_mtp")


def _split_decode_class(base: type) -> type:
    class SplitDecodeTritonImpl(base):  # type: ignore[misc, valid-type]
        """vLLM's TRITON_ATTN impl; one-row decode batches use the split kernel."""

        frozen_workspace: DecodeAttentionWorkspace

        def forward(  # type: ignore[override]
            self,
            layer: torch.nn.Module,
            query: torch.Tensor,
            key: torch.Tensor,
            value: torch.Tensor,
            kv_cache: torch.Tensor,
            attn_metadata: Any,
            output: torch.Tensor,
            output_scale: torch.Tensor | None = None,
            output_block_scale: torch.Tensor | None = None,
        ) -> torch.Tensor:
            # Under CUDA graphs this runs only at warm-up and capture, so the counts in
            # ``fallbacks`` say what the captured rounds decode with. No metadata
            # (profiling runs) is no fallback.
            if attn_metadata is not None:
                refused = self._split_decode(
                    layer, query, kv_cache, attn_metadata, output, output_scale, output_block_scale
                )
                if refused is None:
                    fallbacks.launched("split_decode")
                    return output
                fallbacks.record("split_decode", refused)
            return super().forward(
                layer,
                query,
                key,
                value,
                kv_cache,
                attn_metadata,
                output,
                output_scale,
                output_block_scale,
            )

        def _split_decode(
            self,
            layer: torch.nn.Module,
            query: torch.Tensor,
            kv_cache: torch.Tensor,
            attn_metadata: Any,
            output: torch.Tensor,
            output_scale: torch.Tensor | None,
            output_block_scale: torch.Tensor | None,
        ) -> str | None:
            """Run the split kernel into ``output``; None, or why it cannot run here."""
            refused = split_decode_refusal(self, attn_metadata, output_scale, output_block_scale)
            if refused is not None:
                return refused
            kv = kv_views(self, layer, kv_cache, query)
            if kv is None:
                return f"a {self.kv_cache_dtype!r} KV cache the kernel cannot read"
            n = attn_metadata.num_actual_tokens
            window = _window(self)
            splits = default_splits(n, self.num_kv_heads, self.head_size, window)
            if not self.frozen_workspace.fits(n, self.num_heads, splits, self.head_size):
                return "a batch larger than the split workspace"
            key_cache, value_cache, k_scale, v_scale, q_scale = kv
            decode_attention(
                query[:n],
                key_cache,
                value_cache,
                attn_metadata.block_table,
                attn_metadata.seq_lens,
                output[:n],
                self.scale,
                window,
                self.logits_soft_cap or 0.0,
                k_scale,
                v_scale,
                num_splits=splits,
                workspace=self.frozen_workspace,
                q_scale=q_scale,
            )
            return None

    return SplitDecodeTritonImpl


#: KV cache dtypes stored as FP8 E4M3 with one scale per tensor (vLLM's per-layer
#: ``_k_scale``/``_v_scale``), which the kernel dequantises as vLLM's does
FP8_PER_TENSOR = ("fp8", "fp8_e4m3")


def kv_views(impl: Any, layer: Any, kv_cache: torch.Tensor, query: torch.Tensor) -> Any:
    """(K, V, K scale, V scale, Q scale) for the kernel from vLLM's ``[blocks, KV heads,
    block, 2 x head]`` cache; the scales None when unquantised, the Q scale None unless
    the query is FP8 (vLLM's ``Attention`` quantises queries for FP8 caches on CUDA,
    with one scale per tensor or per KV head). None when the kernel cannot read it: a
    cache dtype other than the query's that is not FP8 per tensor, or per-head Q scales.
    """
    key_cache, value_cache = kv_cache.transpose(1, 2).split(impl.head_size, dim=-1)
    fp8 = getattr(impl, "fp8_dtype", None)
    if key_cache.dtype == query.dtype != fp8:
        return key_cache, value_cache, None, None, None
    if impl.kv_cache_dtype not in FP8_PER_TENSOR or fp8 is None:
        return None
    q_scale = None
    if query.dtype == fp8:
        q_scale = getattr(layer, "_q_scale", None)
        if q_scale is None or q_scale.numel() != 1:
            return None
    return key_cache.view(fp8), value_cache.view(fp8), layer._k_scale, layer._v_scale, q_scale


def _window(impl: Any) -> int:
    """The keys a row reads in a sliding layer (vLLM keeps ``(left, 0)``), 0 if full."""
    left = impl.sliding_window[0]
    return left + 1 if left >= 0 else 0


_CLASSES: dict[type, type] = {}


def split_decode_class(base: type) -> type:
    """The subclass of ``base`` (vLLM's ``TritonAttentionImpl``), one per base."""
    if base not in _CLASSES:
        _CLASSES[base] = _split_decode_class(base)
    return _CLASSES[base]


def split_decode_refusal(
    impl: Any, metadata: Any, output_scale: Any = None, output_block_scale: Any = None
) -> str | None:
    """Why the split kernel cannot run this batch (the first feature it lacks), or None
    for one query row per request, causal, with none of those features."""
    checks = (
        (metadata.max_query_len == 1, "more than one query row per request"),
        (metadata.causal is True, "non-causal attention"),
        (output_scale is None and output_block_scale is None, "quantised output"),
        (getattr(metadata, "mm_prefix_range_tensor", None) is None, "multimodal prefix ranges"),
        (getattr(metadata, "rswa_prefix_lens", None) is None, "RSWA prefix lengths"),
        (getattr(impl, "sinks", None) is None, "attention sinks"),
        (getattr(impl, "alibi_slopes", None) is None, "ALiBi"),
        (not getattr(impl, "_is_per_token_head_quant", False), "per-token-head quantised KV"),
        (getattr(impl, "chunk_lookback", -1) == -1, "chunk lookback"),
        (not getattr(impl, "use_td", False), "use_td"),
        (
            str(getattr(impl.attn_type, "value", impl.attn_type)) == "decoder",
            "a non-decoder attention type",
        ),
    )
    return next((why for ok, why in checks if not ok), None)


def split_decode_applies(
    impl: Any, metadata: Any, output_scale: Any = None, output_block_scale: Any = None
) -> bool:
    """One query row per request, causal, and none of the features the kernel lacks."""
    return split_decode_refusal(impl, metadata, output_scale, output_block_scale) is None


def install_split_decode_attention(
    layers: dict[str, Any], max_rows: int, device: torch.device | str
) -> list[str]:
    """Switch the drafter's ``TritonAttentionImpl`` objects to the split-decode subclass,
    with one shared workspace for ``max_rows`` rows; returns the layer names switched.
    Layers on another backend keep it (the caller logs which)."""
    from vllm_frozen_kv_mtp.adapters import active

    TritonAttentionImpl = active.frontend.triton_attention_impl_cls()

    switched = {
        name: layer
        for name, layer in sorted(layers.items())
        if type(getattr(layer, "impl", None)) is TritonAttentionImpl
    }
    if not switched:
        return []
    impls = [layer.impl for layer in switched.values()]
    parts = max(
        workspace_parts(max_rows, i.num_heads, i.num_kv_heads, i.head_size, _window(i))
        for i in impls
    )
    workspace = DecodeAttentionWorkspace.of_parts(parts, max(i.head_size for i in impls), device)
    cls = split_decode_class(TritonAttentionImpl)
    for layer in switched.values():
        layer.impl.__class__ = cls
        layer.impl.frozen_workspace = workspace
    logger.info(
        "frozen_kv_mtp: draft_attention='split': %d drafter layers decode with the split "
        "kernel (workspace %.1f MiB)",
        len(switched),
        (workspace.acc.numel() + 2 * workspace.m.numel()) * 4 / 2**20,
    )
    return list(switched)
