"""The goodput policy behind num_speculative_tokens="auto" (pure logic, simulated engine).

A small simulator stands in for the engine: each step costs ``cost[k]`` seconds and
each request's drafts are accepted at unconditional per-position rates, exactly what
the scheduler feeds the policy. The policy must find the k that maximises committed
tokens per second, hold it, probe at k = 0, and follow the traffic when it changes.
"""

from __future__ import annotations

import itertools
import random

import pytest

from vllm_frozen_kv_mtp.draft_length.cells import cell_of
from vllm_frozen_kv_mtp.draft_length.policy import AcceptanceEstimate, GoodputPolicy
from vllm_frozen_kv_mtp.draft_length.settings import PolicySettings

CODE = [0.90, 0.80, 0.70, 0.60, 0.52, 0.45, 0.40]
PROSE = [0.45, 0.20, 0.09, 0.04, 0.02, 0.01, 0.0]


def accepted(rates: list[float], k: int, rng: random.Random) -> int:
    """Accepted drafts of one request under unconditional per-position rates."""
    n, prev = 0, 1.0
    for i in range(k):
        if prev <= 0 or rng.random() >= rates[i] / prev:
            break
        prev = rates[i]
        n += 1
    return n


def simulate(
    policy: GoodputPolicy,
    rates: list[float],
    cost: dict[int, float],
    steps: int,
    batch: int = 8,
    seed: int = 0,
    stall_rate: float = 0.0,
    noise: float = 0.0,
) -> list[int]:
    """``stall_rate``: the share of steps the host stalls, taking 1.3-2x their cost;
    ``noise``: the relative spread of every step's time."""
    rng = random.Random(seed)
    ks = []
    for _ in range(steps):
        k = policy.choose(batch)
        ks.append(k)
        stall = rng.uniform(1.3, 2.0) if rng.random() < stall_rate else 1.0
        jitter = max(0.5, rng.gauss(1.0, noise)) if noise else 1.0
        policy.observe_step(batch, k, cost[k] * stall * jitter)
        for _ in range(batch):
            if k:
                policy.observe_verify(k, accepted(rates, k, rng))
    return ks


def linear_cost(base: float, per_draft: float, k_max: int = 7) -> dict[int, float]:
    return {k: base + per_draft * k for k in range(k_max + 1)}


def goodput(rates: list[float], cost: dict[int, float], k: int) -> float:
    return (1 + sum(rates[:k])) / cost[k]


def best_k(rates: list[float], cost: dict[int, float]) -> int:
    return max(cost, key=lambda k: goodput(rates, cost, k))


def share_of_best(rates: list[float], cost: dict[int, float], ks: list[int]) -> float:
    """Committed tokens per second over the steps that chose ``ks``, as a share of the
    best fixed k's."""
    achieved = sum(1 + sum(rates[:k]) for k in ks) / sum(cost[k] for k in ks)
    return achieved / goodput(rates, cost, best_k(rates, cost))


@pytest.mark.parametrize(
    "rates, cost",
    [
        (CODE, linear_cost(5.0, 0.3)),  # cheap drafts, high acceptance: deep
        (PROSE, linear_cost(11.0, 2.5)),  # saturated batch, low acceptance: shallow
        ([0.0] * 7, linear_cost(5.0, 0.5)),  # nothing accepted: no drafts
        ([1.0] * 7, linear_cost(5.0, 1.0)),  # everything accepted: k_max
    ],
)
def test_settles_within_3_percent_of_the_best_k(rates: list[float], cost: dict[int, float]) -> None:
    policy = GoodputPolicy(PolicySettings(k_max=7))
    ks = simulate(policy, rates, cost, steps=1500)
    assert share_of_best(rates, cost, ks[-500:]) >= 0.97, policy.summary()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_host_stalls_do_not_move_the_choice(seed: int) -> None:
    """One step in eight stalls (garbage collection, a busy core): costs are medians of
    clean steps, so the policy still settles within 3% of the best k."""
    rates = [0.84, 0.60, 0.39, 0.27, 0.18, 0.12, 0.08]
    cost = linear_cost(7.0, 0.25)
    policy = GoodputPolicy(PolicySettings(k_max=7))
    ks = simulate(policy, rates, cost, steps=1500, seed=seed, stall_rate=0.125)
    assert share_of_best(rates, cost, ks[-500:]) >= 0.97, policy.summary()


def test_does_not_flap_between_near_equal_choices() -> None:
    # k = 2 and k = 3 within 1% of each other: hysteresis keeps one of them
    rates = [0.6, 0.3, 0.15, 0.0, 0.0, 0.0, 0.0]
    cost = {0: 5.0, 1: 6.0, 2: 7.0, 3: 7.8, 4: 9.0, 5: 10.0, 6: 11.0, 7: 12.0}
    policy = GoodputPolicy(PolicySettings(k_max=7))
    ks = simulate(policy, rates, cost, steps=2000)
    tail = ks[-1000:]
    changes = sum(1 for a, b in zip(tail, tail[1:], strict=False) if a != b)
    assert changes <= 40, (changes, policy.summary())


def test_probes_at_k0_and_comes_back_when_acceptance_returns() -> None:
    policy = GoodputPolicy(PolicySettings(k_max=5))
    cost = linear_cost(5.0, 0.5, k_max=5)
    ks = simulate(policy, [0.0] * 5, cost, steps=600)
    tail = ks[-300:]
    assert tail.count(0) >= 0.9 * len(tail)
    assert any(k > 0 for k in tail), "k = 0 must probe now and then"
    # the traffic changes: drafts are accepted again; probes see it
    ks = simulate(policy, [0.95, 0.9, 0.85, 0.8, 0.75], cost, steps=600, seed=1)
    assert ks[-200:].count(5) >= 0.9 * 200, policy.summary()


def test_a_long_k0_stretch_does_not_forget_that_nothing_was_accepted() -> None:
    """Drafts cost 2% of a step each and none is accepted: k = 0 wins. Through k = 0
    steps the acceptance must keep its last measurement rather than decay back to the
    optimistic prior, which would pull k up again and again with no new evidence."""
    policy = GoodputPolicy(PolicySettings(k_max=4))
    ks = simulate(policy, [0.0] * 4, linear_cost(10.0, 0.2, k_max=4), steps=600, batch=4)
    tail = ks[-300:]
    assert tail.count(0) >= 0.9 * len(tail), policy.summary()
    assert policy.acceptance.rates()[0] < 0.05, policy.summary()


def test_follows_a_change_of_traffic() -> None:
    policy = GoodputPolicy(PolicySettings(k_max=7))
    cost = linear_cost(8.0, 1.2)
    for rates, seed in ((CODE, 0), (PROSE, 2), (CODE, 3)):
        ks = simulate(policy, rates, cost, steps=800, seed=seed)
        assert share_of_best(rates, cost, ks[-200:]) >= 0.97, policy.summary()


CHAT = [0.84, 0.60, 0.39, 0.27, 0.18, 0.12, 0.08]
PROFILES = {"code": CODE, "chat": CHAT, "prose": PROSE}
#: E4B on the H200 (vLLM 0.33, TRITON_ATTN): the step time (ms) of k = 0..7 at 1, 8, 32 and
#: 128 requests, from the full-batch steps of every pinned k (k = 0: no speculation) at
#: each synthetic profile. Measured, so not smooth: at chat c=128, k = 3 is cheaper than 2.
E4B_STEP_MS = {
    ("code", 1): [5.23, 5.53, 5.80, 5.97, 6.22, 6.40, 6.66, 6.84],
    ("code", 8): [5.45, 5.82, 6.15, 6.41, 6.79, 7.08, 7.40, 7.58],
    ("code", 32): [6.17, 8.48, 7.16, 7.69, 8.73, 9.35, 10.16, 10.77],
    ("code", 128): [10.94, 14.85, 16.51, 17.20, 17.37, 18.31, 20.24, 22.09],
    ("chat", 1): [5.23, 5.53, 5.81, 5.96, 6.22, 6.41, 6.66, 6.80],
    ("chat", 8): [5.45, 5.85, 6.12, 6.51, 6.80, 7.13, 8.04, 7.65],
    ("chat", 32): [6.17, 6.91, 7.24, 7.69, 8.66, 9.38, 10.08, 10.61],
    ("chat", 128): [10.94, 13.40, 15.04, 14.30, 16.98, 17.84, 20.07, 22.07],
    ("prose", 1): [5.23, 5.53, 5.82, 5.97, 6.24, 6.42, 6.69, 6.84],
    ("prose", 8): [5.45, 5.87, 6.18, 6.48, 6.86, 7.15, 7.47, 7.66],
    ("prose", 32): [6.17, 6.79, 7.17, 7.73, 8.72, 9.45, 10.15, 10.70],
    ("prose", 128): [10.94, 15.34, 15.37, 16.10, 16.52, 17.72, 20.27, 22.35],
}
#: what the policy had measured in its first 150 steps at chat c=128: k = 3 18% too high
E4B_C128_EARLY_MS = {3: 16.89, 4: 18.21, 5: 18.03, 7: 21.46}


@pytest.mark.parametrize("profile, batch", sorted(E4B_STEP_MS))
def test_settles_near_the_best_k_on_measured_step_costs(profile: str, batch: int) -> None:
    """Each measured cost curve, with 3% step-time noise and one host stall in twenty:
    the policy's choices over the last 1000 of 2000 steps reach 0.97x the best k on
    average over three draws, and 0.96x in each (where the two best k are within 3%,
    a few percent of error in their costs can hold the second)."""
    rates = PROFILES[profile]
    cost = {k: ms / 1000 for k, ms in enumerate(E4B_STEP_MS[profile, batch])}
    shares = []
    for seed in range(3):
        policy = GoodputPolicy(PolicySettings(k_max=7))
        ks = simulate(
            policy, rates, cost, steps=2000, batch=batch, stall_rate=0.05, noise=0.03, seed=seed
        )
        shares.append(share_of_best(rates, cost, ks[-1000:]))
        assert shares[-1] >= 0.96, policy.summary()
    assert sum(shares) / len(shares) >= 0.97, shares


def test_a_cost_measured_too_high_early_is_measured_again() -> None:
    """A k whose cost was first measured too high is not chosen, so only exploration
    measures it again, and then only the recent samples may count: otherwise the policy
    holds a worse k for as long as the engine runs (it held k = 5 at 0.93x)."""
    policy = GoodputPolicy(PolicySettings(k_max=7))
    for k, ms in E4B_C128_EARLY_MS.items():
        for _ in range(9):
            policy.observe_step(128, k, ms / 1000)
    cost = {k: ms / 1000 for k, ms in enumerate(E4B_STEP_MS["chat", 128])}
    ks = simulate(policy, CHAT, cost, steps=1500, batch=128)
    assert best_k(CHAT, cost) == 3
    assert share_of_best(CHAT, cost, ks[-500:]) >= 0.97, policy.summary()


def test_acceptance_is_non_increasing_and_extrapolated() -> None:
    est = AcceptanceEstimate(PolicySettings(k_max=4, prior_weight=0.0))
    for _ in range(100):
        est.observe(2, 2)
        est.observe(2, 1)
    a = est.rates()
    assert a[0] == pytest.approx(1.0) and a[1] == pytest.approx(0.5)
    assert a[2] == pytest.approx(0.25) and a[3] == pytest.approx(0.125)  # ratio carried on
    assert all(x >= y for x, y in zip(a, a[1:], strict=False))


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError):
        PolicySettings(k_max=0)
    with pytest.raises(ValueError):
        PolicySettings(k_max=4, min_evidence=0.0)


#: E4B prose at c=256 on the H200, where the host sets the pace: pinned k = 0..3 measured
#: 10.1, 14.0, 19.1 and 22.0 ms a step (k = 1 is best), deeper k extrapolated
PROSE_C256_MS = [10.1, 14.0, 19.1, 22.0, 25.0, 28.0, 31.0, 34.0]


def closed_batch_runs(
    policy: GoodputPolicy, cost: dict[int, float], rates: list[float], runs: int, seed: int
) -> list[int]:
    """What a benchmark's closed batches look like to the policy: each run goes idle at
    its end, and the next one meets a host anywhere from 1x to 2x as slow (a shared
    machine); a run holds 256 requests for 60 steps, then drains to 128 in 15. One step
    in twenty stalls (1.3-2x). The first step after a change of k verifies the old k's
    drafts, so it is not timed, and the next one still carries half the old k's cost
    (the step loop overlaps one step's host work with the next)."""
    rng = random.Random(seed)
    ks: list[int] = []
    last, older = -1, -1
    for _ in range(runs):
        host = rng.uniform(1.0, 2.0)
        policy.observe_idle()
        for step in range(75):
            batch = 256 if step < 60 else 256 - (step - 59) * 128 // 15
            k = policy.choose(batch)
            ks.append(k)
            share = 0.3 + 0.7 * batch / 256  # the host's work grows with the batch
            stall = rng.uniform(1.3, 2.0) if rng.random() < 0.05 else 1.0
            if k == last:
                base = cost[k] if older in (k, -1) else (cost[k] + cost[older]) / 2
                policy.observe_step(batch, k, base * host * share * stall)
            older, last = last, k
            for _ in range(batch):
                if k:
                    policy.observe_verify(k, accepted(rates, k, rng))
    return ks


@pytest.mark.parametrize("seed", range(6))
def test_a_host_that_changes_speed_between_runs_does_not_move_the_choice(seed: int) -> None:
    """Host speed changing by up to 2x from one run to the next, and batches draining
    within their bucket, move a step's time more than one more draft does, so costs
    taken at different moments mislead. Each k is compared with the steps around it, at
    a steady batch, so the choice stays within 3% of the best."""
    cost = {k: ms / 1000 for k, ms in enumerate(PROSE_C256_MS)}
    assert best_k(PROSE, cost) == 1
    policy = GoodputPolicy(PolicySettings(k_max=7))
    ks = closed_batch_runs(policy, cost, PROSE, runs=40, seed=seed)
    assert share_of_best(PROSE, cost, ks[len(ks) // 2 :]) >= 0.97, policy.summary()


def test_a_probe_or_an_exploration_returns_to_the_held_k() -> None:
    policy = GoodputPolicy(PolicySettings(k_max=4, explore_interval=16, probe_interval=8))
    cost = linear_cost(10.0, 0.2, k_max=4)
    ks = simulate(policy, [0.0] * 4, cost, steps=400, batch=4)
    tail = ks[-200:]
    assert policy.held == 0
    assert tail.count(0) >= 0.8 * len(tail), policy.summary()
    runs = [len(list(g)) for k, g in itertools.groupby(tail) if k]
    assert max(runs) <= policy.settings.explore_steps, runs  # never stays away


def test_a_choice_for_a_smaller_batch_is_not_carried_into_the_full_one() -> None:
    """A closed batch's tail chooses for fewer requests (deeper k); when the next batch
    fills, the policy takes the full batch's best k at once, without hysteresis."""
    policy = GoodputPolicy(PolicySettings(k_max=7))
    costs = {8: linear_cost(5.0, 0.1), 256: {k: ms / 1000 for k, ms in enumerate(PROSE_C256_MS)}}
    rng = random.Random(0)
    for batch in [256] * 600 + [8] * 60 + [256] * 40:
        k = policy.choose(batch)
        policy.observe_step(batch, k, costs[batch][k])
        for _ in range(batch):
            if k:
                policy.observe_verify(k, accepted(PROSE, k, rng))
        if batch == 8:
            small = k
    assert small >= 2 and policy.current == 1, policy.summary()


def test_a_position_reached_in_few_rounds_leans_on_the_rate_before_it() -> None:
    """Every round accepted five drafts; two rounds drafted seven, and both had the sixth
    rejected. Two unlucky rounds halve the sixth position's rate; they do not read it
    as the prior's 0.6**6 (which held k = 5 where k = 7 paid, one request a step)."""
    est = AcceptanceEstimate(PolicySettings(k_max=7))
    est.observe(5, 5, count=100)
    est.observe(7, 5, count=2)
    a = est.rates()
    assert a[4] > 0.95
    assert 0.4 < a[5] < 0.6 and a[6] == pytest.approx(a[5] * a[5] / a[4], rel=1e-6)


@pytest.mark.parametrize("per_step, memory", [(1, 256.0), (128, 128 * 49.0)])
def test_acceptance_remembers_enough_rounds_at_any_batch(per_step: int, memory: float) -> None:
    """Forgetting runs per step (0.98: about 50 steps) but never over fewer than
    ``acceptance_memory_rounds`` rounds: one request a step keeps 256 rounds of
    evidence, not 50."""
    est = AcceptanceEstimate(PolicySettings(k_max=3))
    for _ in range(3000):
        est.observe(3, 1, count=per_step)
        est.decay()
    assert est.drafted[1] == pytest.approx(memory, rel=0.02)


def test_a_never_compared_neighbour_is_tried_without_waiting_for_exploration() -> None:
    policy = GoodputPolicy(PolicySettings(k_max=7))
    ks = simulate(policy, CODE, linear_cost(5.0, 0.1), steps=60, batch=8)
    assert len(set(ks)) >= 3, ks  # before the first exploration, at step 128
    assert policy.cost.comparisons(cell_of(8), 7) >= 2


def test_early_tries_stop_in_a_bucket_whose_batch_never_holds_steady() -> None:
    """A bucket whose steps never compare k (here: never a clean step, as when its
    batch keeps moving): the never-compared neighbours are tried
    ``early_explore_tries`` times, then only at explorations."""
    settings = PolicySettings(k_max=7, explore_interval=0)
    policy = GoodputPolicy(settings)
    rng = random.Random(0)
    ks = []
    for _ in range(600):
        k = policy.choose(100)
        ks.append(k)
        for _ in range(100):
            policy.observe_verify(k, accepted(CODE, k, rng))
    assert not policy.cost.edges
    assert (
        sum(1 for k in ks if k != policy.held)
        <= settings.early_explore_tries * settings.explore_steps
    )


def test_a_k_is_confirmed_by_a_second_try_from_the_held_k() -> None:
    """A k that one try found better is tried again from the held k before it is held,
    so the second try makes comparisons of its own: staying on after the first try
    only lengthens it (one noisy comparison at one request a step held a worse k)."""
    settings = PolicySettings(k_max=4, explore_interval=32, stale_after_steps=64)
    policy = GoodputPolicy(settings)
    for k, ms in ((2, 10.0), (4, 16.0), (2, 10.0)):  # k = 4 first measured 1.6x k = 2
        for _ in range(9):
            policy.cost.now += 1
            policy.observe_step(8, k, ms)
    policy.current = policy.held = 2
    cost = linear_cost(10.0, 0.5, k_max=4)  # the truth: k = 4 costs 1.1x
    ks = simulate(policy, CODE[:4], cost, steps=400, batch=8)
    assert policy.held == 4, policy.summary()
    runs = [len(list(g)) for k, g in itertools.groupby(ks) if k == 4]
    first_hold = next(i for i, n in enumerate(runs) if n > settings.explore_steps)
    assert first_hold >= 1, runs  # tried, back at the held k, then tried again and held


def bursty_host(rng: random.Random, steps: int, mean_run: float) -> list[float]:
    """Per-step slowdown of a CPU shared with busy processes: runs of steps (``mean_run``
    long on average) at one level, 1x for 40% of them, 2-4x for half, 10-50x for the
    rest, with 10% jitter within a run."""
    out: list[float] = []
    while len(out) < steps:
        u = rng.random()
        level = 1.0 if u < 0.4 else rng.uniform(2, 4) if u < 0.9 else rng.uniform(10, 50)
        n = max(1, int(rng.expovariate(1 / mean_run)))
        out += [level * max(0.5, rng.gauss(1, 0.1)) for _ in range(n)]
    return out[:steps]


#: the tiny CPU pair's step (ms) at k = 0..4: the draft round adds 60%, each draft 19%
CPU_STEP_MS = {0: 5.0, 1: 8.0, 2: 9.5, 3: 11.0, 4: 12.5}


@pytest.mark.parametrize("mean_run", [5, 15, 40])
@pytest.mark.parametrize("rates, target", [([1.0] * 4, 4), ([0.0] * 4, 0)], ids=["all", "none"])
def test_a_bursty_host_does_not_move_the_choice(
    rates: list[float], target: int, mean_run: float
) -> None:
    """Bursts of 2-50x lasting a few to tens of steps: a comparison that straddles one
    reads anything (the policy this replaced held k = 0 on a pair that accepts every
    draft for up to 99% of these steps, and k <= 2 on average for a third). Readings are
    clipped to physical bounds and weigh against the prior by the measured noise, so
    every draft accepted holds k_max, none accepted holds k = 0 (probes and
    explorations aside), after 200 steps of learning, for every seed."""
    for seed in range(6):
        rng = random.Random(seed)
        policy = GoodputPolicy(PolicySettings(k_max=4))
        slow = bursty_host(rng, 1000, mean_run)
        ks = []
        for step in range(1000):
            k = policy.choose(4)
            ks.append(k)
            policy.observe_step(4, k, CPU_STEP_MS[k] / 1000 * slow[step])
            for _ in range(4):
                if k:
                    policy.observe_verify(k, accepted(rates, k, rng))
        tail = ks[200:]
        assert tail.count(target) >= 0.93 * len(tail), (seed, policy.summary())


def test_a_shallower_k_that_commits_as_much_is_taken_without_the_margin() -> None:
    """Nothing accepted and drafts costing 1% of a step each, less than the hysteresis:
    k = 1 commits as much as k = 0 for more, whatever its cost reads (costs are
    monotone), so the policy drops to k = 0 rather than holding k = 1 in the margin."""
    policy = GoodputPolicy(PolicySettings(k_max=4))
    cost = linear_cost(10.0, 0.1, k_max=4)
    for _ in range(9):  # k = 0 and 1 compared, both ways, and 1 held
        for k in (1, 0, 1):
            for _ in range(6):
                policy.cost.now += 1
                policy.observe_step(4, k, cost[k])
    policy.current = policy.held = 1
    ks = simulate(policy, [0.0] * 4, cost, steps=600, batch=4)
    assert ks[-300:].count(0) >= 0.9 * 300, policy.summary()


def test_rejected_drafts_outweigh_the_prior_when_k1_reads_nearly_free() -> None:
    """Every draft rejected, k = 0 held through the tail of a closed batch (one request),
    and a busy host's cost fit reading k = 1 at 1.01x k = 0 for the next full batch of
    four. The prior of the first position's acceptance must not outweigh hundreds of
    rejected drafts: at full weight it read a_1 = 1.2 / 66 at the evidence floor, so
    k = 1 won the new batch by 0.8% and was then held for some 150 steps (a_1 stayed
    above the 0.5% under which k = 0 needs no margin), every one of its drafts rejected."""
    policy = GoodputPolicy(PolicySettings(k_max=4))
    cost = {0: 10.0, 1: 10.1, 2: 12.0, 3: 13.5, 4: 15.0}
    for _ in range(9):  # k = 0 and 1 compared, both ways, at the full batch
        for k in (1, 0, 1):
            for _ in range(6):
                policy.cost.now += 1
                policy.observe_step(4, k, cost[k])
    assert policy.cost.curve(cell_of(4))[1] == pytest.approx(1.01, abs=1e-3)
    policy.acceptance.observe(4, 0, count=256)  # the earlier batches: nothing accepted
    for _ in range(200):  # then a long stretch at k = 0: the evidence sits at its floor
        policy.acceptance.decay(drafting=False)
    policy.current = policy.held = 0
    assert policy.choose(1) == 0  # the closed batch's tail holds k = 0 for one request
    ks = simulate(policy, [0.0] * 4, cost, steps=360, batch=4)
    assert ks.count(0) >= 0.9 * len(ks), policy.summary()
    runs = [len(list(g)) for k, g in itertools.groupby(ks) if k]
    assert max(runs) <= policy.settings.explore_steps, runs  # probes and explorations only


#: E4B at 32k-token prompts on an H100, 8 requests: step ms of k = 0..7 (k = 1..7 pinned
#: and measured; k = 0 about that). From k = 3 to 4 the step grows 17%, elsewhere 3-7%:
#: past 32 tokens verified a step pays 1.5 ms more (a kernel tile or graph-size threshold)
LONG_8_MS = [10.5, 11.71, 12.68, 13.57, 15.86, 16.71, 17.10, 17.84]
#: the acceptance per position the policy estimated there (chat)
LONG_CHAT = [0.856, 0.628, 0.413, 0.278, 0.186, 0.145, 0.113]


def long_context_ms(batch: int, k: int) -> float:
    """The step of ``batch`` <= 8 requests: each request fewer reads its 32k tokens of KV
    no more (0.23 ms, and 0.024 ms per token verified), and the 1.5 ms threshold moves
    with the tokens verified (at 6 requests it falls between k = 4 and 5)."""
    ms = LONG_8_MS[k] - (8 - batch) * (0.23 + 0.024 * (k + 1))
    return ms - 1.5 * ((8 * (k + 1) > 32) - (batch * (k + 1) > 32))


def long_context_runs(policy: GoodputPolicy, runs: int, seed: int) -> list[int]:
    """What the benchmark's closed batches look like to the policy: 8 requests of 128
    tokens each join one a step (a prefill in the step: not timed), decode together,
    and finish one by one as their accepted drafts reach 128 tokens; 0.5% step-time
    noise. Returns the k of every full-batch step."""
    rng = random.Random(seed)
    full: list[int] = []
    for _ in range(runs):
        policy.observe_idle()
        done, started, last = [0] * 8, 0, -1
        while True:
            active = [i for i in range(started) if done[i] < 128]
            batch = len(active) + (started < 8)
            if not batch:
                break
            k = policy.choose(batch)
            if started == 8 and k == last:
                ms = long_context_ms(batch, k) * max(0.5, rng.gauss(1.0, 0.005))
                policy.observe_step(batch, k, ms / 1000)
            if batch == 8 and started == 8:
                full.append(k)
            for i in active:
                n = accepted(LONG_CHAT, last, rng) if last > 0 else 0
                if last > 0:
                    policy.observe_verify(last, n)
                done[i] += 1 + n
            started, last = min(8, started + 1), k
    return full


@pytest.mark.parametrize("seed", range(20))
def test_a_step_in_the_cost_curve_is_found_in_closed_batches(seed: int) -> None:
    """Six closed batches to learn on (300 steps, as the benchmark warms up), then the
    full-batch steps of three more reach 0.97x the best k (k = 3). A smooth prior placed
    k never compared with the held one as if the curve had no step (held at 6 with only
    4..7 compared, k = 3 looked 5% cheaper than 4 and was never tried), and a batch
    drained by two requests read k = 4 as cheap as 3: 10 draws in 100 held k = 4..7,
    at 0.94-0.96x."""
    cost = {k: long_context_ms(8, k) for k in range(8)}
    assert best_k(LONG_CHAT, cost) == 3
    policy = GoodputPolicy(PolicySettings(k_max=7))
    long_context_runs(policy, runs=6, seed=seed)
    ks = long_context_runs(policy, runs=3, seed=seed + 100)
    assert share_of_best(LONG_CHAT, cost, ks) >= 0.97, policy.summary()
