"""The bounded-draft-context study: its key masks, its acceptance arithmetic, and its
parallel masked draft forward against the reference drafter given only the kept keys."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from bench.bounded_context import (
    Bound,
    acceptance_length,
    bootstrap_ci,
    chain,
    draft_hits,
    draft_logits,
    far_copy_fraction,
    global_keys,
    kept_key_indices,
    parse_bounds,
    per_sequence_al,
    sliding_keys,
)
from devkit.fixtures.reference import draft_step, load_pair, target_state, window_kv
from devkit.fixtures.trained import trained_pair_paths


def test_bounded_keys_are_sink_plus_window() -> None:
    bound = Bound(sink=4, window=8)
    for p in (0, 3, 11, 12, 13, 40):
        kept = kept_key_indices(p, bound).tolist()
        want = sorted({t for t in range(p + 1) if t < 4 or t > p - 8})
        assert kept == want
        assert len(kept) == bound.keys_read(p)
    # short contexts read everything: the bound only bites past sink + window
    assert kept_key_indices(11, bound).tolist() == list(range(12))
    assert kept_key_indices(12, bound).tolist() == [0, 1, 2, 3] + list(range(5, 13))


def test_unbounded_is_causal_and_sliding_is_windowed() -> None:
    queries = torch.tensor([0, 5, 9])
    full = global_keys(queries, 10, None)
    assert torch.equal(full, torch.arange(10)[None] <= queries[:, None])
    sliding = sliding_keys(queries, 10, 3)
    assert sliding.sum(-1).tolist() == [1, 3, 3]
    assert sliding[2].nonzero()[:, 0].tolist() == [7, 8, 9]


def test_parse_bounds() -> None:
    assert parse_bounds("4:64, full,16:256") == [Bound(4, 64), None, Bound(16, 256)]
    with pytest.raises(ValueError, match="SINK:WINDOW"):
        parse_bounds("4-64,full")
    with pytest.raises(ValueError, match="must include 'full'"):
        parse_bounds("4:64")
    with pytest.raises(ValueError, match="window >= 1"):
        parse_bounds("4:0,full")


def test_chain_and_acceptance_length() -> None:
    hits = torch.tensor([[[True, False, True], [True, True, True], [False, True, True]]])
    acc = chain(hits)
    assert acc.tolist() == [[[True, False, False], [True, True, True], [False, False, False]]]
    rates = [float(acc[..., j].float().mean()) for j in range(3)]
    assert acceptance_length(rates, 2) == pytest.approx(1 + 2 / 3 + 1 / 3)
    # per sequence: mean over its rounds of (1 + accepted drafts)
    assert per_sequence_al(acc, 3).tolist() == pytest.approx([1 + (1 + 3 + 0) / 3])
    with pytest.raises(ValueError):
        acceptance_length(rates, 4)


def test_bootstrap_ci() -> None:
    assert bootstrap_ci(torch.full((10,), 0.25), samples=200) == pytest.approx((0.25, 0.25))
    diffs = torch.tensor([-1.0, 0.0, 1.0, 2.0, 3.0])
    lo, hi = bootstrap_ci(diffs, samples=500)
    assert lo < float(diffs.mean()) < hi


def test_far_copy_fraction() -> None:
    motif = list(range(100, 108))
    filler = list(range(200, 300))
    # the motif recurs 100+ tokens later: a far copy for near=50, a near one for near=500
    ids = torch.tensor([motif + filler + motif + [1] * 10])
    first = len(motif) + len(filler) - 1  # the query right before the repeat
    assert far_copy_fraction(ids, first, 1, near=50) > 0
    assert far_copy_fraction(ids, first, 1, near=500) == 0


@pytest.fixture(scope="module")
def trained() -> tuple[Any, Any]:
    return load_pair(*trained_pair_paths())


def test_masked_forward_equals_reference_on_kept_keys(trained: tuple[Any, Any]) -> None:
    """What the study measures is what a drafter handed only the sink + window keys drafts."""
    target, assistant = trained
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(4, 512, (2, 90), generator=g)
    bound, k = Bound(sink=4, window=16), 3
    queries = torch.tensor([10, 40, 63, 80])
    state = target_state(target, ids)
    window = target.config.sliding_window
    for b in (bound, None):
        logits = draft_logits(target, assistant, ids, queries, k, b)
        for i, p in enumerate(queries.tolist()):
            kv = window_kv(state.kv, p, window)
            keep = kept_key_indices(p, b)
            kk, vv = state.kv["full_attention"]
            kv["full_attention"] = (kk[:, :, keep], vv[:, :, keep])
            hidden = state.hidden[:, p]
            for j in range(1, k + 1):
                step, hidden = draft_step(assistant, target, ids[:, p + j], hidden, p, kv)
                torch.testing.assert_close(step, logits[j - 1][:, i], atol=2e-4, rtol=1e-4)


def test_bound_moves_drafts_only_past_sink_plus_window(trained: tuple[Any, Any]) -> None:
    target, assistant = trained
    ids = torch.randint(4, 512, (2, 70), generator=torch.Generator().manual_seed(5))
    tight = draft_logits(target, assistant, ids, torch.tensor([9, 60]), 2, Bound(2, 8))
    full = draft_logits(target, assistant, ids, torch.tensor([9, 60]), 2, None)
    for lt, lf in zip(tight, full, strict=True):
        torch.testing.assert_close(
            lt[:, 0], lf[:, 0]
        )  # p = 9: 10 keys = sink + window, nothing cut
        assert not torch.allclose(lt[:, 1], lf[:, 1])  # p = 60: 51 keys cut
    hits = draft_hits(target, assistant, ids, 60, 3, [Bound(2, 8), None])
    assert set(hits) == {"2+8", "full"} and hits["full"].shape == (2, 70 - 3 - 1 - 60, 3)
