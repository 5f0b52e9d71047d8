"""Relative step cost of k from the steps on both sides of each change of k (pure logic)."""

from __future__ import annotations

import math
import random

import pytest

from vllm_frozen_kv_mtp.draft_length import cost_fit, step_cost
from vllm_frozen_kv_mtp.draft_length.cells import bucket, cell_of
from vllm_frozen_kv_mtp.draft_length.settings import PolicySettings
from vllm_frozen_kv_mtp.draft_length.step_cost import StepCost

C8 = cell_of(8)

#: a quiet host's comparisons outweigh the prior curve hundreds of times: the fit is
#: what they say to a few parts in ten thousand
FIT = 1e-3


def _run(cost: StepCost, k: int, seconds: list[float], batch: int = 8, context: int = 0) -> None:
    """Clean steps at k, one policy step apart."""
    for t in seconds:
        cost.now += 1
        cost.observe(batch, k, t, context)


def _curve(cost: StepCost, batch: int = 8) -> list[float]:
    return cost.curve(cell_of(batch))


def test_a_change_of_k_compares_the_steps_on_both_sides() -> None:
    cost = StepCost(PolicySettings(k_max=3))
    _run(cost, 1, [0.010] * 5)
    _run(cost, 3, [0.015] * 3)
    assert not cost.edges  # a try shorter than edge_samples compares when it ends
    _run(cost, 1, [0.010])
    assert cost.relative(C8) == {1: 1.0, 3: pytest.approx(1.5, rel=FIT)}
    _run(cost, 1, [0.010] * 4)  # back at 1 for edge_samples steps: the second comparison
    assert cost.comparisons(C8, 3) == cost.comparisons(C8, 1) == 2


def test_a_host_twice_as_slow_later_does_not_move_the_relative_cost() -> None:
    """The same k pair compared on a fast host and on a host twice as slow: absolute
    step times would say k = 3 costs 3x k = 1; compared moment by moment it is 1.5x."""
    cost = StepCost(PolicySettings(k_max=3))
    _run(cost, 1, [0.010] * 5)
    _run(cost, 3, [0.015] * 3)
    _run(cost, 1, [0.020] * 5)  # the host slowed down meanwhile: this edge drifts
    _run(cost, 3, [0.030] * 3)
    _run(cost, 1, [0.020] * 5)
    assert cost.relative(C8)[3] == pytest.approx(1.5, rel=FIT)


def test_a_try_between_two_held_stretches_cancels_a_steady_drift() -> None:
    """Step times falling 2% a step (a batch draining within its bucket): the edge into
    the tried k reads it too cheap, the edge out of it too dear, and their median
    (two values: their mean, in logs) is within a percent of the truth."""
    cost = StepCost(PolicySettings(k_max=3))
    step = 0

    def at(k: int, n: int) -> list[float]:
        nonlocal step
        out = [(0.015 if k == 3 else 0.010) * 0.98**i for i in range(step, step + n)]
        step += n + 2  # the unclean step after a change, and the one dropped to settle
        return out

    _run(cost, 1, at(1, 5))
    _run(cost, 3, at(3, 3))
    _run(cost, 1, at(1, 5))
    assert cost.relative(C8)[3] == pytest.approx(1.5, rel=0.01)


def test_a_stall_does_not_move_a_comparison() -> None:
    cost = StepCost(PolicySettings(k_max=3))
    _run(cost, 2, [0.010, 0.010, 0.019, 0.010, 0.010])  # a stall, under the idle-gap cut
    _run(cost, 3, [0.012, 0.012, 0.012])
    _run(cost, 3, [10.0])  # an idle gap, not a step: left out altogether
    assert cost.samples[C8, 3] == 3
    _run(cost, 2, [0.010])
    assert cost.relative(C8)[3] == pytest.approx(1.2, rel=FIT)


def test_no_comparison_across_an_idle_engine_another_bucket_or_a_gap() -> None:
    cost = StepCost(PolicySettings(k_max=3))
    _run(cost, 1, [0.010] * 5)
    cost.break_run()  # the engine ran out of requests
    _run(cost, 3, [0.030] * 3)
    _run(cost, 2, [0.020] * 3, batch=100)  # another bucket
    cost.now += 50  # prefill steps, or a tail in other buckets
    _run(cost, 1, [0.010] * 3, batch=100)
    assert not cost.edges
    assert cost.relative(C8) == {}
    prior = cost_fit.prior_curve(3, PolicySettings(k_max=3).prior_slope)
    assert cost.curve(C8) == pytest.approx([math.exp(v) for v in prior])


def test_k_compared_only_with_a_neighbour_are_placed_on_one_curve() -> None:
    cost = StepCost(PolicySettings(k_max=5))
    _run(cost, 1, [0.010] * 5)
    _run(cost, 3, [0.013] * 5)
    _run(cost, 5, [0.0169] * 5)  # 5 is only ever compared with 3
    rel = cost.relative(C8)
    assert rel[3] == pytest.approx(1.3, rel=FIT) and rel[5] == pytest.approx(1.69, rel=FIT)


def test_the_fit_weighs_every_pair() -> None:
    """Three k, three pairs that disagree a little: least squares splits the difference."""
    cost = StepCost(PolicySettings(k_max=3))
    _run(cost, 1, [0.010] * 5)
    _run(cost, 2, [0.011] * 5)
    _run(cost, 3, [0.012] * 5)
    _run(cost, 1, [0.010] * 5)  # 3 -> 1 reads 1.2: consistent with the chain
    rel = cost.relative(C8)
    assert rel[2] == pytest.approx(1.1, rel=1e-3) and rel[3] == pytest.approx(1.2, rel=1e-3)
    assert math.isclose(min(rel.values()), 1.0)


def test_stale_comparisons_leave_a_pair_once_it_is_compared_again() -> None:
    settings = PolicySettings(k_max=3, stale_after_steps=100)
    cost = StepCost(settings)
    for _ in range(3):
        _run(cost, 1, [0.010] * 5)
        _run(cost, 2, [0.014] * 5)
    assert cost.relative(C8)[2] == pytest.approx(1.4, rel=FIT)
    assert not cost.needs_sample(C8, 2)
    cost.now += 500
    assert cost.needs_sample(C8, 2) and cost.needs_sample(C8, 3)  # stale; never compared
    _run(cost, 1, [0.010] * 5)
    _run(cost, 2, [0.012] * 5)  # one fresh comparison outweighs the stale ones
    assert cost.relative(C8)[2] == pytest.approx(1.2, rel=FIT)


def test_stale_comparisons_do_not_weigh_a_pair_in_the_fit() -> None:
    """A pair compared often long ago and once lately weighs as much as a pair compared
    once lately: the fit splits a disagreement by fresh comparisons only."""
    cost = StepCost(PolicySettings(k_max=3, stale_after_steps=100))
    for _ in range(3):
        _run(cost, 1, [0.010] * 5)
        _run(cost, 2, [0.014] * 5)  # five stale edges of (1, 2)
    cost.now += 500
    _run(cost, 1, [0.010] * 5)
    _run(cost, 2, [0.011] * 5)  # (1, 2) reads 1.1
    _run(cost, 3, [0.0121] * 5)  # (2, 3) reads 1.1
    _run(cost, 1, [0.011] * 5)  # (1, 3) reads 1.1, not 1.21
    # equal weights: log c2 = 2/3 log 1.1 (the stale edges would pull it to 1.4)
    assert cost.relative(C8)[2] == pytest.approx(1.1 ** (2 / 3), rel=FIT)
    assert cost.relative(C8)[3] == pytest.approx(1.1 ** (4 / 3), rel=FIT)


def test_the_curve_extrapolates_from_compared_k() -> None:
    """Before any comparison the curve is the prior slope; k never compared continue
    the measured slope (the fit holds the bend, not the level, to the prior's)."""
    cost = StepCost(PolicySettings(k_max=7))
    assert _curve(cost) == pytest.approx([1 + 0.15 * k for k in range(8)])
    _run(cost, 1, [0.010] * 3)
    _run(cost, 3, [0.014] * 5)  # 1.2x a draft from 1 to 3, where the prior has 1.13x
    rel = cost.relative(C8)
    assert rel[3] == pytest.approx(1.4, rel=FIT)
    curve = _curve(cost)
    assert curve[5] / curve[3] == pytest.approx(1.8 / 1.4, rel=0.02)  # their line on
    assert bucket(5) == bucket(8) == 8 and bucket(9) == 16 and bucket(1) == 1


def test_a_draining_batch_makes_no_comparison() -> None:
    """Requests finishing one by one shrink the step with the batch, whatever k does:
    steps compare only while the batch holds within edge_batch_tolerance."""
    cost = StepCost(PolicySettings(k_max=3))
    _run(cost, 1, [0.010] * 5, batch=128)
    for batch in (120, 108, 96):  # k changed while the batch drained
        _run(cost, 3, [0.012], batch=batch)
    _run(cost, 1, [0.008] * 5, batch=90)
    assert not cost.edges
    _run(cost, 3, [0.012] * 5, batch=88)  # steady again (within 5%): compared
    assert cost.relative(cell_of(90))[3] == pytest.approx(1.5, rel=FIT)


def test_a_small_batch_compares_across_one_request_not_two() -> None:
    """A steady server's batch moves by a request; a closed batch draining by two of
    eight moves a long-context step by as much as a draft does."""
    cost = StepCost(PolicySettings(k_max=3))
    _run(cost, 1, [0.010] * 5, batch=8)
    _run(cost, 3, [0.012] * 5, batch=7)  # one request fewer: still the same batch
    assert cost.relative(C8)[3] == pytest.approx(1.2, rel=FIT)
    _run(cost, 1, [0.009] * 5, batch=5)  # two fewer: no comparison
    assert cost.comparisons(C8, 1) == 1


def test_a_pair_not_compared_lately_is_outvoted_by_fresh_pairs() -> None:
    """k = 4 once read 1.6x k = 2; since then 2 -> 3 -> 4 read 1.05x a step each.
    Exploration compares neighbours of the best, so (2, 4) may never be compared again:
    the stale pair only places a k that no fresh pair reaches, so the fresh chain sets
    the curve."""
    cost = StepCost(PolicySettings(k_max=4, stale_after_steps=50))
    _run(cost, 2, [0.010] * 5)
    _run(cost, 4, [0.016] * 5)
    cost.now += 100
    _run(cost, 2, [0.010] * 5)
    _run(cost, 3, [0.0105] * 5)
    _run(cost, 4, [0.011025] * 5)
    _run(cost, 3, [0.0105] * 5)
    assert cost.relative(C8)[4] == pytest.approx(1.1025, rel=0.03)


def test_one_edge_reads_between_1x_and_break_even() -> None:
    """A burst on one side reads 10x, or the deeper k cheaper: one more draft never
    makes a step cheaper, and past break-even ((1 + j) / (1 + i)) no reading could
    change a choice, so one edge moves its pair no further."""
    cost = StepCost(PolicySettings(k_max=3))
    _run(cost, 1, [0.010] * 5)
    _run(cost, 2, [0.100] * 5)  # a burst: 10x
    _run(cost, 3, [0.010] * 5)  # the burst ended: 3 reads ten times cheaper than 2
    ((_, up),) = cost.edges[C8][1, 2]
    ((_, down),) = cost.edges[C8][2, 3]
    assert up == pytest.approx(math.log(3 / 2)) and down == 0.0


def test_the_curve_is_non_decreasing_and_no_draft_costs_past_break_even() -> None:
    cost = StepCost(PolicySettings(k_max=4))
    _run(cost, 2, [0.010] * 5)
    _run(cost, 4, [0.0101] * 5)  # 4 barely dearer than 2 ...
    _run(cost, 3, [0.0130] * 5)  # ... and 3 much dearer than 4
    curve = _curve(cost)
    steps = [b / a for a, b in zip(curve, curve[1:], strict=False)]
    assert all(1 - 1e-9 <= r <= (k + 2) / (k + 1) + 1e-9 for k, r in enumerate(steps)), curve


def _noisy(rng: random.Random, n: int, base: float) -> list[float]:
    """Steps of a CPU shared with busy processes: runs of a few steps at 1x-4x."""
    out: list[float] = []
    while len(out) < n:
        out += [base * rng.choice([1.0, 1.5, 2.5, 4.0])] * rng.randint(2, 8)
    return out[:n]


def test_the_noise_of_a_comparison_is_measured_from_runs_at_one_k() -> None:
    quiet = StepCost(PolicySettings(k_max=3))
    _run(quiet, 2, [0.010] * 100)
    assert quiet.noise() == step_cost.NOISE_FLOOR
    busy = StepCost(PolicySettings(k_max=3))
    _run(busy, 2, _noisy(random.Random(0), 200, 0.010))
    assert busy.noise() > 0.3


def test_on_a_noisy_host_a_wild_pair_barely_moves_the_prior() -> None:
    """The same two comparisons, 4 read at break-even against 2 (1.67x where the truth
    and the prior say 1.3x): a quiet host's comparisons are believed; on a host whose
    runs at one k read anywhere from 1x to 4x, the curve stays near the prior."""
    curves = {}
    for host, before in (("quiet", [0.010] * 100), ("busy", _noisy(random.Random(1), 200, 0.01))):
        cost = StepCost(PolicySettings(k_max=4))
        _run(cost, 2, before)
        cost.break_run()
        _run(cost, 2, [0.010] * 5)
        _run(cost, 4, [0.020] * 5)
        _run(cost, 2, [0.010] * 5)
        curves[host] = _curve(cost)
    assert curves["quiet"][4] / curves["quiet"][2] == pytest.approx(5 / 3, rel=0.01)
    assert curves["busy"][4] / curves["busy"][2] < 1.3


def test_contexts_keep_their_own_cells_and_a_new_one_starts_from_its_neighbour() -> None:
    cost = StepCost(PolicySettings(k_max=4))
    _run(cost, 2, [0.010] * 5, context=1000)
    _run(cost, 4, [0.012] * 5, context=1000)
    _run(cost, 2, [0.020] * 5, context=20000)  # another cell: no comparison across
    long = cell_of(8, 20000)
    assert set(cost.edges) == {C8} and long == (8, 24576)
    assert cost.curve(long) == pytest.approx(cost.curve(C8))  # the neighbour's, until ...
    _run(cost, 4, [0.030] * 5, context=20000)  # ... it compares its own
    assert cost.relative(long)[4] == pytest.approx(1.5, rel=FIT)
    assert cost.relative(C8)[4] == pytest.approx(1.2, rel=FIT)


def test_a_k_held_for_long_keeps_only_the_samples_its_comparisons_use() -> None:
    cost = StepCost(PolicySettings(k_max=3))
    _run(cost, 1, [0.010] * 5000)
    assert len(cost._head) == 5 and len(cost._tail) == 10
