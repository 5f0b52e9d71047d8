"""The centroid heads pick the token Model Runner V2's default path picks.

Reference: vLLM's own ``Gemma4MTP.compute_logits`` (centroid-masked full-vocabulary
logits, ``suppress_tokens`` filled with -inf) followed by the argmax V2 takes.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from vllm_frozen_kv_mtp.drafters.heads import (
    AUTO_DENSE_MIN_ROWS,
    candidate_tokens,
    head_for_rows,
    top_tokens,
)

VOCAB, CENTROIDS, TOP_K, DIM = 4096, 64, 4, 32


def _model(dtype: torch.dtype, suppress: list[int] | None, seed: int = 0) -> Any:
    from vllm.model_executor.models.gemma4_mtp import Gemma4MTPMaskedEmbedder

    g = torch.Generator().manual_seed(seed)
    me = Gemma4MTPMaskedEmbedder(DIM, VOCAB, CENTROIDS, TOP_K)
    with torch.no_grad():
        me.centroids.weight.copy_(torch.randn(CENTROIDS, DIM, generator=g))
        me.token_ordering.copy_(torch.randperm(VOCAB, generator=g))
    me = me.to(dtype)
    weight = torch.randn(VOCAB + 7, DIM, generator=g).to(dtype)  # padded rows, as vLLM pads
    suppress_idx = torch.tensor(suppress, dtype=torch.long) if suppress else None
    return SimpleNamespace(
        masked_embedding=me,
        _suppress_idx=suppress_idx,
        _get_full_lm_head_weight=lambda: weight[:VOCAB],
    )


def _v2_pick(model: Any, h: torch.Tensor) -> torch.Tensor:
    from vllm.model_executor.models.gemma4_mtp import Gemma4MTP

    return Gemma4MTP.compute_logits(model, h).argmax(dim=-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("suppress", [None, "top"])
def test_sparse_head_is_v2_default_pick(dtype: torch.dtype, suppress: str | None) -> None:
    h = torch.randn(37, DIM, generator=torch.Generator().manual_seed(1)).to(dtype)
    banned = None
    if suppress == "top":  # ban the token V2 would pick for a few rows: forces a change
        banned = _v2_pick(_model(dtype, None), h)[:5].tolist()
    model = _model(dtype, banned)
    expected = _v2_pick(model, h)
    got = top_tokens(model, h, "sparse")
    assert torch.equal(got, expected)
    if banned:
        assert not set(got.tolist()) & set(banned)


def test_sparse_head_breaks_exact_ties_like_a_full_vocabulary_argmax() -> None:
    model = _model(torch.float32, None)
    me = model.masked_embedding
    h = torch.randn(3, DIM, generator=torch.Generator().manual_seed(2))
    cand = candidate_tokens(me, h)
    weight = model._get_full_lm_head_weight()
    # Two candidates of row 0 share the best embedding row; the one listed first has
    # the larger token id, so a first-in-candidate-order argmax would pick the wrong one.
    row = cand[0].tolist()
    i, j = next((i, j) for i in range(len(row)) for j in range(i + 1, len(row)) if row[i] > row[j])
    a, b = row[i], row[j]
    with torch.no_grad():
        weight[a] = weight[b] = h[0] * 10
    expected = _v2_pick(model, h)
    assert expected[0].item() == b
    assert torch.equal(top_tokens(model, h, "sparse"), expected)


def test_dense_head_scores_the_same_dot_products() -> None:
    """fp32: identical picks. bf16: the pick's V2 logit is the V2 maximum up to the
    rounding of a different summation order (one bf16 step)."""
    h32 = torch.randn(64, DIM, generator=torch.Generator().manual_seed(3))
    model = _model(torch.float32, None)
    assert torch.equal(top_tokens(model, h32, "dense"), _v2_pick(model, h32))

    from vllm.model_executor.models.gemma4_mtp import Gemma4MTP

    model16, h16 = _model(torch.bfloat16, None), h32.to(torch.bfloat16)
    logits = Gemma4MTP.compute_logits(model16, h16).float()
    picked = logits.gather(1, top_tokens(model16, h16, "dense")[:, None]).squeeze(1)
    best = logits.max(dim=-1).values
    assert torch.all(best - picked <= best.abs() * 2**-7 + 1e-6)


@pytest.mark.parametrize("head", ["sparse", "dense"])
def test_non_finite_rows_still_get_a_real_token_id(head: str) -> None:
    """Padded CUDA-graph rows hold stale hidden states (NaN is possible); the next
    draft step embeds whatever token they get, so it must be a valid id (the H200
    run hit a device-side assert in the embedding lookup before this was handled).
    Finite rows keep V2's pick."""
    model = _model(torch.float32, [5])
    h = torch.randn(6, DIM, generator=torch.Generator().manual_seed(4))
    h[2] = float("nan")
    h[4, 3] = float("nan")
    got = top_tokens(model, h, head)
    assert bool(((got >= 0) & (got < VOCAB)).all()), got
    finite = torch.tensor([0, 1, 3, 5])
    assert torch.equal(got[finite], _v2_pick(model, h)[finite])


def test_auto_head_is_fused_where_it_runs_else_dense_for_large_buckets_only() -> None:
    for rows in (1, 31, 32, 128, 512):
        assert head_for_rows("auto", rows, fused_ok=True) == "fused"
    assert head_for_rows("auto", 1) == "upstream"
    assert head_for_rows("auto", AUTO_DENSE_MIN_ROWS - 1) == "upstream"
    assert head_for_rows("auto", AUTO_DENSE_MIN_ROWS) == "dense"
    assert head_for_rows("auto", 512) == "dense"
    for head in ("upstream", "sparse", "dense", "fused"):
        for ok in (False, True):
            assert head_for_rows(head, 1, ok) == head_for_rows(head, 512, ok) == head


@pytest.mark.parametrize(
    ("option", "fused_ok", "rows", "want"),
    [
        ("auto", True, 1, "fused"),
        ("auto", True, 64, "fused"),
        ("fused", True, 64, "fused"),
        ("auto", False, 1, "upstream"),  # no Triton: upstream's head for small buckets
        ("auto", False, AUTO_DENSE_MIN_ROWS, "dense"),
        ("upstream", True, 64, "upstream"),
        ("sparse", True, 8, "sparse"),
    ],
)
def test_v2_sample_draft_scores_with_the_chosen_head(
    option: str, fused_ok: bool, rows: int, want: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``FrozenKVMTPSpeculator.sample_draft`` hands a greedy round to the head the option
    names (``auto`` resolved per bucket size), and sends "upstream" and any round that
    needs draft logits to vLLM's own ``sample_draft``."""
    import vllm_frozen_kv_mtp.drafters.seed_round as round_module
    from tests.utils.v2_speculator import sampling_speculator, upstream_class
    from vllm_frozen_kv_mtp.drafters.speculator import FrozenKVMTPSpeculator as cls

    seen: list[str] = []
    monkeypatch.setattr(round_module, "fused_head_supported", lambda n: fused_ok)
    monkeypatch.setattr(
        round_module, "top_tokens", lambda model, h, head: seen.append(head) or h[:, 0]
    )
    monkeypatch.setattr(
        upstream_class(cls),
        "sample_draft",
        lambda self, h, *a, **k: seen.append("upstream") or h[:, 0].long(),
    )
    monkeypatch.setattr(round_module, "_LOGGED_HEADS", set())
    logged: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: logged.append(record.getMessage())  # type: ignore[method-assign]
    round_module.logger.addHandler(handler)
    level = round_module.logger.level
    round_module.logger.setLevel(logging.INFO)
    spec = sampling_speculator(_model(torch.float32, None), centroid_head=option)
    h = torch.zeros(rows, DIM)
    args = (h, None, torch.arange(rows), None, None, None)
    try:
        spec.sample_draft(*args, None)
        spec.sample_draft(*args, torch.zeros(rows, VOCAB))  # draft logits wanted: vLLM's path
    finally:
        round_module.logger.removeHandler(handler)
        round_module.logger.setLevel(level)
    assert seen == [want, "upstream"]
    # Users see once which head their option resolved to.
    assert logged == [
        f"frozen_kv_mtp: centroid_head={option!r} scores greedy drafts with the {want!r} head"
    ]
