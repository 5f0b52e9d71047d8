"""``centroid_head="fused"``: the Triton kernels pick what the torch heads pick.

Runs the kernels in Triton's CPU interpreter, in a subprocess with the Triton folder
``make install`` sets aside (see test_seed_rows.py); vLLM is not imported there, so the
embedder is a stand-in with the attributes the heads read (``_model`` below). That the
torch heads equal vLLM's own pick is shown in test_centroid_head.py.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from tests.utils.triton_interpreter import run_in_triton_interpreter

VOCAB, CENTROIDS, TOP_K, DIM = 2048, 32, 4, 160  # DIM: 2 blocks of 128, the last partial


def _model(seed: int, suppress: list[int] | None) -> Any:
    """A centroid-masked head: VOCAB tokens in CENTROIDS clusters of 64, padded table."""
    g = torch.Generator().manual_seed(seed)
    centroids = torch.nn.Linear(DIM, CENTROIDS, bias=False)
    with torch.no_grad():
        centroids.weight.copy_(torch.randn(CENTROIDS, DIM, generator=g))
    me = SimpleNamespace(
        centroids=centroids,
        token_ordering=torch.randperm(VOCAB, generator=g),
        num_centroids=CENTROIDS,
        vocab_size=VOCAB,
        vocab_size_per_centroid=VOCAB // CENTROIDS,
        centroid_intermediate_top_k=TOP_K,
    )
    weight = torch.randn(VOCAB + 5, DIM, generator=g)
    return SimpleNamespace(
        masked_embedding=me,
        _suppress_idx=torch.tensor(suppress) if suppress else None,
        _get_full_lm_head_weight=lambda: weight[:VOCAB],
    )


def check() -> None:
    """Run inside the interpreter subprocess."""
    from vllm_frozen_kv_mtp.drafters.heads import candidate_tokens, top_centroids, top_tokens
    from vllm_frozen_kv_mtp.kernels.centroid_kernel import (
        fused_head_supported,
        fused_top_centroids,
        fused_top_tokens,
    )

    check_top_centroids(fused_top_centroids)

    assert fused_head_supported(VOCAB // CENTROIDS)
    with torch.no_grad():
        for seed, rows in ((0, 40), (1, 9), (2, 1)):
            h = torch.randn(rows, DIM, generator=torch.Generator().manual_seed(100 + seed))
            want = top_tokens(_model(seed, None), h, "dense")
            assert torch.equal(top_tokens(_model(seed, None), h, "fused"), want), seed
            # Suppress the picks of a few rows: they must move to another candidate.
            banned = want[:3].tolist()
            model = _model(seed, banned)
            got = top_tokens(model, h, "fused")
            assert torch.equal(got, top_tokens(model, h, "dense")), seed
            assert not set(got.tolist()) & set(banned)
        # Exact ties: the lowest token id wins, wherever it sits among the candidates.
        model = _model(7, None)
        h = torch.randn(2, DIM, generator=torch.Generator().manual_seed(7))
        h = (h * 8).round() / 8  # eighths: the tied rows' scores are exact in any sum order
        row = candidate_tokens(model.masked_embedding, h)[0].tolist()
        i, j = next(
            (i, j) for i in range(len(row)) for j in range(i + 1, len(row)) if row[i] > row[j]
        )
        weight = model._get_full_lm_head_weight()
        weight[row[i]] = weight[row[j]] = h[0] * 10
        assert top_tokens(model, h, "fused")[0].item() == row[j] == top_tokens(model, h, "dense")[0]
        # Any order of the selected centroids gives the same pick, ties included (on
        # CUDA the head takes torch.topk's unsorted set).
        me = model.masked_embedding
        top = top_centroids(me, h)
        for perm in (top.flip(1), top.roll(1, dims=1)):
            got = fused_top_tokens(h, weight, me.token_ordering, perm, 64, None)
            assert got is not None and got[0].item() == row[j], perm
            assert torch.equal(got, fused_top_tokens(h, weight, me.token_ordering, top, 64, None))
        # Rows of NaN (stale padded graph rows) still get a real token id.
        h[1] = float("nan")
        assert 0 <= top_tokens(model, h, "fused")[1].item() < VOCAB
    with torch.no_grad():
        # A launch that raises: counted, logged, and the head scores with "dense" from then on.
        import vllm_frozen_kv_mtp.kernels.centroid_kernel as centroid_kernel

        model = _model(7, None)
        me = model.masked_embedding
        weight = model._get_full_lm_head_weight()

        centroid_kernel._row_best_kernel = _Raising()  # type: ignore[assignment]
        h = torch.randn(4, DIM, generator=torch.Generator().manual_seed(9))
        top = top_centroids(me, h)
        from vllm_frozen_kv_mtp.kernels import fallbacks

        assert fused_top_tokens(h, weight, me.token_ordering, top, 64, None) is None
        assert fallbacks.count("centroid_head") == 1 and not fused_head_supported(64)
        assert torch.equal(top_tokens(model, h, "fused"), top_tokens(model, h, "dense"))
        # A top-k launch that raises: counted, and the centroids come from torch.topk.
        from vllm_frozen_kv_mtp.drafters.heads import fused_head_centroids

        centroid_kernel._centroid_topk_kernel = _Raising()  # type: ignore[assignment]
        assert fused_top_centroids(me.centroids(h), TOP_K) is None
        assert fallbacks.count("centroid_head") == 2
        got = fused_head_centroids(me, h).sort(dim=1).values
        assert torch.equal(got, top_centroids(me, h).sort(dim=1).values)
    print("fused head matches")


def check_top_centroids(fused_top_centroids: Any) -> None:
    """The top-k kernel selects what ``torch.topk`` selects, best first and the lowest
    index first among equal scores (ties at the cut included), for bf16 and fp32 scores,
    non-power-of-two sizes, signed zeros and NaN rows."""
    g = torch.Generator().manual_seed(11)
    cases = ((2048, 32, torch.bfloat16), (40, 5, torch.float32), (300, 7, torch.float32))
    for n, k, dtype in cases:
        scores = torch.randn(6, n, generator=g)
        if n == 2048:
            scores = (scores * 4).round() / 4  # coarse values: many ties, also at the cut
        scores[1, : n // 2] = -0.0
        scores[1, n // 2 :] = 0.0  # signed zeros tie: the lowest indices win
        scores[2, n // 3] = float("inf")
        scores = scores.to(dtype)
        got = fused_top_centroids(scores, k)
        assert got is not None and got.shape == (6, k) and got.dtype == torch.int64
        for r in range(5):
            row = scores[r].float().tolist()
            assert got[r].tolist() == sorted(range(n), key=lambda i: (-row[i], i))[:k], (n, r)
        assert torch.equal(scores[:5].gather(1, got[:5]), torch.topk(scores[:5], k).values)
        scores[5] = float("nan")  # a stale padded row: still k distinct, valid indices
        assert fused_top_centroids(scores, k)[5].tolist() == list(range(k))
    print("top-k kernel matches")


class _Raising:
    """A kernel whose launch raises (as a compile error would)."""

    def __getitem__(self, grid: Any) -> Any:
        def launch(*args: Any, **kwargs: Any) -> None:
            raise RuntimeError("compile error")

        return launch


def test_fused_head_picks_what_the_dense_head_picks() -> None:
    out = run_in_triton_interpreter("from tests.unit.test_centroid_kernel import check; check()")
    assert "top-k kernel matches" in out and "fused head matches" in out
