"""``dense_head``: the fused dense head picks each row's best token as a torch argmax
over the same (dequantised) table does, and the option reaches the speculator.

The kernels run in Triton's CPU interpreter (fp32: the interpreter's bf16 ``tl.dot`` is
wrong), in a subprocess with the Triton folder ``make install`` sets aside (see
test_seed_rows.py). tests/unit/test_kernels_compile.py compiles them for sm_90 in bf16
with FP8 weights.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from tests.utils.triton_interpreter import run_in_triton_interpreter
from vllm_frozen_kv_mtp.drafters.heads import build_dense_head
from vllm_frozen_kv_mtp.kernels.dense_head import (
    FP8_MAX,
    FP8_MAX_ROWS,
    dense_top_tokens_reference,
    quantize_rows_fp8,
)
from vllm_frozen_kv_mtp.options import DENSE_HEADS


def make_case(rows: int, vocab: int, dim: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(rows, dim + 8, generator=g)[:, :dim]  # strided rows
    weight = torch.randn(vocab + 64, dim, generator=g)  # padded table: rows past vocab
    weight[vocab:] = 100.0  # would win if read
    return hidden, weight


def check() -> None:
    """Run inside the interpreter subprocess."""
    from vllm_frozen_kv_mtp.kernels.dense_head import dense_top_tokens

    # rows below one tl.dot block, across two row blocks; vocab not a block multiple
    for rows, vocab, dim in ((3, 1000, 96), (70, 517, 64)):
        hidden, weight = make_case(rows, vocab, dim, rows)
        want = dense_top_tokens_reference(hidden, weight, None, vocab)
        got = dense_top_tokens(hidden, weight, None, vocab)
        assert torch.equal(got, want), (rows, (got != want).sum())
        # suppressed tokens: the winners themselves are never picked again
        suppress = want[:2].clone()
        got = dense_top_tokens(hidden, weight, None, vocab, suppress)
        assert torch.equal(got, dense_top_tokens_reference(hidden, weight, None, vocab, suppress))
        assert not set(got.tolist()) & set(suppress.tolist())
        # FP8 rows with per-row scales: the same pick as torch over the dequantised table
        w8, scale = quantize_rows_fp8(weight, chunk=128)
        got = dense_top_tokens(hidden, w8, scale, vocab)
        assert torch.equal(got, dense_top_tokens_reference(hidden, w8, scale, vocab)), rows
        # another launch shape (bench.micro.dense_head_gpu sweeps them): the same picks
        other = dense_top_tokens(hidden, w8, scale, vocab, block_n=64, block_k=32, max_block_m=16)
        assert torch.equal(other, got), rows
        wide = dense_top_tokens(hidden, w8, scale, vocab, block_k=128)  # small batches' shape
        assert torch.equal(wide, got), rows
    # equal scores: the lowest token id wins, across vocabulary blocks as well. Small
    # integers make every score exact in fp32 whatever the summation order (BLAS may sum
    # columns at different block positions differently), so the four rows truly tie.
    hidden, weight = make_case(2, 600, 32, 7)
    weight[:600] = weight[:600].round().clamp(-4, 4)
    weight[[5, 300, 400, 590]] = 4.0  # the largest score any row can reach: 4 * 4 * 32
    hidden[:, :] = 4.0
    got = dense_top_tokens(hidden, weight, None, 600)
    assert got.tolist() == [5, 5], got
    print("dense head matches the reference")


def test_dense_head_matches_the_reference() -> None:
    out = run_in_triton_interpreter("from tests.unit.test_dense_head import check; check()")
    assert "dense head matches the reference" in out


def test_fp8_rows_keep_each_row_within_range() -> None:
    weight = torch.randn(40, 32) * torch.logspace(-3, 2, 40)[:, None]
    weight[7] = 0.0
    w8, scale = quantize_rows_fp8(weight, chunk=16)
    assert w8.dtype == torch.float8_e4m3fn and scale.shape == (40,)
    assert float(scale[7]) == 1.0 and not w8[7].float().any()
    back = w8.float() * scale[:, None]
    rel = (back - weight).abs().amax(dim=1) / weight.abs().amax(dim=1).clamp_min(1e-30)
    assert float(rel[torch.arange(40) != 7].max()) < 0.07  # E4M3: 3 mantissa bits
    assert float(w8.float().abs().amax()) <= FP8_MAX


def _model(centroids: bool = False) -> SimpleNamespace:
    return SimpleNamespace(
        masked_embedding=object() if centroids else None,
        lm_head=SimpleNamespace(weight=torch.randn(1088, 32)),
        logits_processor=SimpleNamespace(org_vocab_size=1000),
        _suppress_idx=torch.tensor([3, 9]),
    )


@pytest.mark.parametrize("mode", DENSE_HEADS)
def test_build_dense_head(mode: str) -> None:
    model = _model()
    head = build_dense_head(model, mode)
    if mode == "upstream":
        assert head is None
        return
    assert head is not None and head.vocab == 1000
    assert head.suppress is model._suppress_idx
    if mode == "fused":
        assert head.weight is model.lm_head.weight and head.scale is None
        assert head.table is None
        for rows in (1, 32, 128):  # one launch shape, the loaded table
            assert head.launch(rows) == (head.weight, None, {})
    else:
        assert head.weight.dtype == torch.float8_e4m3fn and head.scale is not None
        assert head.table is model.lm_head.weight
        # the FP8 copy up to FP8_MAX_ROWS rows (128-wide hidden chunks up to 16), then
        # the loaded table, whose launch was faster at 128 rows on the H200
        for rows, (weight, scale, shape) in (
            (1, (head.weight, head.scale, {"block_k": 128})),
            (8, (head.weight, head.scale, {"block_k": 128})),
            (16, (head.weight, head.scale, {"block_k": 128})),
            (17, (head.weight, head.scale, {})),
            (FP8_MAX_ROWS, (head.weight, head.scale, {})),
            (FP8_MAX_ROWS + 1, (head.table, None, {})),
            (128, (head.table, None, {})),
        ):
            got = head.launch(rows)
            assert got[0] is weight and got[1] is scale and got[2] == shape, rows
    assert build_dense_head(_model(centroids=True), mode) is None  # centroid_head's job
    assert build_dense_head(model, mode, tp_size=2) is None  # vocabulary-parallel


def test_v2_sample_draft_uses_the_dense_head(monkeypatch: pytest.MonkeyPatch) -> None:
    """``FrozenKVMTPSpeculator.sample_draft`` drafts a greedy round of a dense assistant
    with the prepared head; a round that needs draft logits, and a head whose launch
    failed (``top_tokens`` None), go to vLLM's own ``sample_draft``."""
    from tests.utils.v2_speculator import sampling_speculator, upstream_class
    from vllm_frozen_kv_mtp.drafters.speculator import FrozenKVMTPSpeculator as cls

    seen: list[str] = []
    monkeypatch.setattr(
        upstream_class(cls),
        "sample_draft",
        lambda self, h, *a, **k: seen.append("upstream") or h[:, 0].long(),
    )

    class Head:
        failed = False

        def top_tokens(self, h: torch.Tensor) -> torch.Tensor | None:
            seen.append("dense")
            return None if self.failed else h[:, 0].long()

    spec = sampling_speculator(SimpleNamespace(masked_embedding=None), dense_head="fp8")
    head = Head()
    spec.frozen_dense_head = head
    h = torch.arange(6.0).view(3, 2)
    args = (h, None, torch.arange(3), None, None, None)
    assert spec.sample_draft(*args, None).tolist() == [0, 2, 4]
    spec.sample_draft(*args, torch.zeros(3, 8))  # draft logits wanted: vLLM's path
    head.failed = True
    spec.sample_draft(*args, None)
    assert seen == ["dense", "upstream", "dense", "upstream"]
    assert object.__new__(cls).frozen_dense_head is None  # upstream's head by default
