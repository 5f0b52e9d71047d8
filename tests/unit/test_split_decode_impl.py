"""``draft_attention="split"``: vLLM's ``TritonAttentionImpl`` objects of the drafter
switch to the split-decode subclass, which decodes one-row batches with the split kernel
on vLLM's KV layout and hands every other batch to vLLM's ``forward``.

The kernel runs in Triton's CPU interpreter (see test_seed_rows.py); vLLM's own Triton
kernels do not run on CPU, so the fallback is observed through a base class that
records its calls. Model Runner V2 itself needs CUDA: tests/gpu covers the engine.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from tests.utils.triton_interpreter import run_in_triton_interpreter
from vllm_frozen_kv_mtp.kernels.decode_attention_kernel import default_splits
from vllm_frozen_kv_mtp.patches.split_decode import split_decode_applies, split_decode_refusal

HEAD, Q_HEADS, KV_HEADS, BLOCK = 256, 4, 2, 16
SEQ_LENS = (5, 40, 33)


def _impl(window: int | None, kv_cache_dtype: str = "auto") -> Any:
    from vllm.v1.attention.backends.triton_attn import TritonAttentionImpl

    return TritonAttentionImpl(
        num_heads=Q_HEADS,
        head_size=HEAD,
        scale=0.0625,
        num_kv_heads=KV_HEADS,
        alibi_slopes=None,
        sliding_window=window,
        kv_cache_dtype=kv_cache_dtype,
    )


def _batch(query_len: int = 1) -> tuple[torch.Tensor, torch.Tensor, Any]:
    """q, vLLM's KV cache ([blocks, kv heads, block, 2 x head]) and decode metadata."""
    g = torch.Generator().manual_seed(0)
    rows = len(SEQ_LENS)
    per_row = -(-max(SEQ_LENS) // BLOCK)
    kv_cache = torch.randn(rows * per_row + 1, KV_HEADS, BLOCK, 2 * HEAD, generator=g)
    table = (torch.randperm(rows * per_row, generator=g) + 1).to(torch.int32)
    q = torch.randn(rows, Q_HEADS, HEAD, generator=g)
    metadata = SimpleNamespace(
        num_actual_tokens=rows,
        max_query_len=query_len,
        causal=True,
        seq_lens=torch.tensor(SEQ_LENS, dtype=torch.int32),
        block_table=table.view(rows, per_row),
        mm_prefix_range_tensor=None,
        rswa_prefix_lens=None,
    )
    return q, kv_cache, metadata


def check() -> None:
    """Run inside the interpreter subprocess (vLLM imported, its Triton disabled)."""
    from vllm.v1.attention.backends.triton_attn import TritonAttentionImpl

    from vllm_frozen_kv_mtp.kernels.decode_attention_kernel import decode_attention_reference
    from vllm_frozen_kv_mtp.patches.split_decode import (
        install_split_decode_attention,
        split_decode_class,
    )

    calls: list[int] = []

    class Recording(TritonAttentionImpl):  # stands in for vLLM's kernels
        def forward(self, layer: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            calls.append(int(query.shape[0]))
            return args[-1] if args else kwargs["output"]

    layers = {f"draft.{i}": SimpleNamespace(impl=_impl(w)) for i, w in enumerate((24, None))}
    layers["other"] = SimpleNamespace(impl=Recording(4, 256, 1.0, 2, None, None, "auto"))
    assert install_split_decode_attention(layers, 8, "cpu") == ["draft.0", "draft.1"]
    assert type(layers["other"].impl) is Recording  # another class: left alone
    workspace = layers["draft.0"].impl.frozen_workspace
    assert workspace is layers["draft.1"].impl.frozen_workspace
    assert workspace.fits(8, Q_HEADS, 16, HEAD) and not workspace.fits(9, Q_HEADS, 16, HEAD)
    assert workspace.fits(4096, Q_HEADS, 1, HEAD)  # one split writes out directly

    q, kv_cache, metadata = _batch()
    key_cache, value_cache = kv_cache.transpose(1, 2).split(HEAD, dim=-1)
    for name, window in (("draft.0", 24), ("draft.1", 0)):
        out = torch.full_like(q, float("nan"))
        impl = layers[name].impl
        impl.forward(None, q, None, None, kv_cache, metadata, out)
        want = decode_attention_reference(
            q, key_cache, value_cache, metadata.block_table, metadata.seq_lens, 0.0625, window
        )
        assert float((out - want).abs().max()) < 1e-4, name

    # An FP8 cache (vLLM allocates it as bytes) with per-tensor scales: the kernel
    # dequantises it as vLLM does; an FP8 E5M2 cache goes to vLLM's forward.
    fp8 = layers["draft.0"].impl.__class__
    impl = _impl(24, "fp8")
    impl.__class__ = fp8
    impl.frozen_workspace = workspace
    scaled = SimpleNamespace(_k_scale=torch.tensor([2.0]), _v_scale=torch.tensor([0.5]))
    kv8 = torch.cat([key_cache / 2.0, value_cache / 0.5], dim=-1).transpose(1, 2)
    kv8 = kv8.to(torch.float8_e4m3fn).contiguous()
    k8, v8 = kv8.transpose(1, 2).split(HEAD, dim=-1)
    out = torch.full_like(q, float("nan"))
    impl.forward(scaled, q, None, None, kv8.view(torch.uint8), metadata, out)
    want = decode_attention_reference(
        q, k8, v8, metadata.block_table, metadata.seq_lens, 0.0625, 24, 0.0, 2.0, 0.5
    )
    assert float((out - want).abs().max()) < 1e-4, "fp8"
    # On CUDA vLLM's Attention quantises the query as well for FP8 caches (one scale per
    # tensor) and hands an output in the model's dtype: the kernel dequantises the query.
    scaled.__dict__["_q_scale"] = torch.tensor([0.25])
    q8 = (q / 0.25).to(torch.float8_e4m3fn)
    out = torch.full_like(q, float("nan"))
    impl.forward(scaled, q8, None, None, kv8.view(torch.uint8), metadata, out)
    want = decode_attention_reference(
        q8.float() * 0.25, k8, v8, metadata.block_table, metadata.seq_lens, 0.0625, 24, 0.0,
        2.0, 0.5,
    )  # fmt: skip
    assert float((out - want).abs().max()) < 1e-4, "fp8 query"

    # Not one row per request: vLLM's forward (the base class) runs it.
    impl = _impl(24)
    impl.__class__ = split_decode_class(Recording)
    impl.frozen_workspace = workspace
    out = torch.zeros_like(q)
    impl.forward(None, q, None, None, kv_cache, _batch(query_len=2)[2], out)
    impl.forward(None, q, None, None, kv_cache, None, out)  # profiling run
    impl.forward(None, q, None, None, kv_cache.to(torch.float16), metadata, out)  # cache dtype
    e5m2 = _impl(24, "fp8_e5m2")
    e5m2.__class__ = split_decode_class(Recording)
    e5m2.frozen_workspace = workspace
    e5m2.forward(scaled, q, None, None, kv8.view(torch.uint8), metadata, out)
    per_head = _impl(24, "fp8")  # per-KV-head query scales: not the kernel's
    per_head.__class__ = split_decode_class(Recording)
    per_head.frozen_workspace = workspace
    two = SimpleNamespace(_k_scale=scaled._k_scale, _v_scale=scaled._v_scale,
                          _q_scale=torch.tensor([0.25, 0.5]))  # fmt: skip
    per_head.forward(two, q8, None, None, kv8.view(torch.uint8), metadata, out)
    assert calls == [3, 3, 3, 3, 3]
    from vllm_frozen_kv_mtp.kernels import fallbacks

    counts = fallbacks.launches()["split_decode"], fallbacks.count("split_decode")
    impl.forward(None, q, None, None, kv_cache, metadata, out)
    assert calls == [3, 3, 3, 3, 3] and out.abs().sum() > 0
    # the two layers and the two FP8 calls above; four fallbacks with metadata
    assert counts == (4, 4), counts
    assert fallbacks.launches()["split_decode"] == 5
    summary = fallbacks.summary()
    assert summary is not None and 'draft_attention="split": 4' in summary, summary
    print("split decode impl matches the reference and falls back")


def test_split_decode_impl_in_the_interpreter() -> None:
    out = run_in_triton_interpreter("from tests.unit.test_split_decode_impl import check; check()")
    assert "split decode impl matches the reference and falls back" in out


@pytest.mark.parametrize(
    ("change", "applies"),
    [
        ({}, True),
        ({"max_query_len": 4}, False),
        ({"causal": False}, False),
        ({"mm_prefix_range_tensor": torch.zeros(1)}, False),
        ({"sinks": torch.zeros(4)}, False),
        ({"alibi_slopes": [1.0]}, False),
        ({"_is_per_token_head_quant": True}, False),
        ({"attn_type": "encoder"}, False),
    ],
)
def test_what_the_split_kernel_takes(change: dict[str, Any], applies: bool) -> None:
    impl = SimpleNamespace(
        sinks=None,
        alibi_slopes=None,
        _is_per_token_head_quant=False,
        chunk_lookback=-1,
        use_td=False,
        attn_type="decoder",
    )
    metadata = SimpleNamespace(max_query_len=1, causal=True, mm_prefix_range_tensor=None)
    for key, value in change.items():
        setattr(impl if hasattr(impl, key) else metadata, key, value)
    assert split_decode_applies(impl, metadata) is applies
    assert (split_decode_refusal(impl, metadata) is None) is applies
    assert split_decode_applies(impl, metadata, output_scale=torch.ones(1)) is False
    if applies:
        assert split_decode_refusal(impl, metadata, torch.ones(1)) == "quantised output"


def test_splits_are_fixed_per_row_count() -> None:
    # the full layer (window 0) may split up to MAX_SPLITS; a 512-key window at 64-key
    # tiles, at most 8
    assert default_splits(1, 2, 512, 0) == 16
    assert default_splits(1, 2, 256, 512) == 8
    assert default_splits(64, 2, 256, 512) == 2
    assert default_splits(128, 2, 256, 512) == 1
    assert default_splits(256, 2, 512, 0) == 1
