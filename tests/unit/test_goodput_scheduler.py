"""What the "auto" scheduler feeds its policy: clean step timings and verify counts.

The mixin's hooks are called with vLLM's real ``SchedulerOutput`` shape (a stand-in
object with the fields the hooks read); the engine-level behaviour is covered by
tests/e2e/test_draft_length.py.
"""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest

from vllm_frozen_kv_mtp.draft_length.cells import cell_of
from vllm_frozen_kv_mtp.draft_length.policy import GoodputPolicy
from vllm_frozen_kv_mtp.draft_length.scheduler import _GoodputK, _PolicyLookup
from vllm_frozen_kv_mtp.draft_length.settings import PolicySettings


def _output(batch: int, verified: int, k: int, prefill_tokens: int = 0, context: int = 100) -> Any:
    """A step of ``batch`` requests holding ``context`` computed tokens each, one of them
    new when ``prefill_tokens`` ride along."""
    ids = [f"r{i}" for i in range(batch)]
    new = [SimpleNamespace(num_computed_tokens=context)] if prefill_tokens else []
    return SimpleNamespace(
        num_scheduled_tokens={r: 1 + verified for r in ids},
        scheduled_spec_decode_tokens={r: [-1] * verified for r in ids} if verified else {},
        num_spec_tokens_to_schedule=k,
        total_num_scheduled_tokens=batch * (1 + verified) + prefill_tokens,
        scheduled_new_reqs=new,
        scheduled_cached_reqs=SimpleNamespace(num_computed_tokens=[context] * (batch - len(new))),
    )


def _scheduler(last: float | None) -> Any:
    # every clean step reaches the cost table (the policy drops none to settle)
    settings = PolicySettings(k_max=4, settle_samples=0)
    return SimpleNamespace(k_policy=GoodputPolicy(settings), _last_step_end=last)


def test_clean_steps_are_timed_and_others_are_not() -> None:
    s = _scheduler(last=10.0)
    _GoodputK._time_step(s, _output(8, verified=3, k=3), now=10.02)
    assert s.k_policy.cost.seconds == {(cell_of(8), 3): pytest.approx(0.02)}
    for so in (
        _output(8, verified=3, k=2),  # k switched: the step mixes two costs
        _output(8, verified=3, k=3, prefill_tokens=100),  # a prefill chunk rode along
        _output(0, verified=0, k=3),  # nothing scheduled
    ):
        s._last_step_end = 11.0
        _GoodputK._time_step(s, so, now=11.5)
    assert s.k_policy.cost.samples[(cell_of(8), 3)] == 1
    assert (cell_of(8), 2) not in s.k_policy.cost.seconds
    idle = _scheduler(last=None)  # the engine waited for work: no step to time
    _GoodputK._time_step(idle, _output(8, verified=3, k=3), now=99.0)
    assert not idle.k_policy.cost.seconds


def test_k0_steps_are_timed() -> None:
    s = _scheduler(last=1.0)
    _GoodputK._time_step(s, _output(4, verified=0, k=0), now=1.005)
    assert s.k_policy.cost.seconds == {(cell_of(4), 0): pytest.approx(0.005)}


def test_verify_counts_exclude_grammar_invalid_drafts() -> None:
    class Parent:
        def make_spec_decoding_stats(self, *args: Any) -> str:
            return "vllm's stats"

    class Sched(_GoodputK, Parent):
        def __init__(self) -> None:  # skip vLLM's constructor: only the hook is tested
            self.k_policy = GoodputPolicy(PolicySettings(k_max=4, prior_weight=0.0))
            self._verified = Counter()

    s = Sched()
    out = s.make_spec_decoding_stats(None, 4, 2, {"a": 1}, "a")
    assert out == "vllm's stats"
    s.make_spec_decoding_stats(None, 4, 2, {"a": 1}, "b")  # "b" had no invalid drafts
    s.make_spec_decoding_stats(None, 4, 2, None, "c")
    assert s._verified == {(3, 2): 1, (4, 2): 2}
    assert s.k_policy.acceptance.drafted[1:] == [0.0] * 4  # folded once per step
    s._fold_verified()
    assert not s._verified
    assert s.k_policy.acceptance.drafted[1:] == [3.0, 3.0, 3.0, 2.0]
    assert s.k_policy.acceptance.accepted[1:] == [3.0, 3.0, 0.0, 0.0]


def test_lookup_asks_the_policy_once_per_step() -> None:
    policy = GoodputPolicy(PolicySettings(k_max=3))
    lookup = _PolicyLookup(policy)
    assert lookup[5] == 3 and policy.steps == 1  # optimistic start at the ceiling


def test_reset_k_policy_starts_fresh_or_takes_a_kept_policy() -> None:
    s = SimpleNamespace(num_spec_tokens=4)
    _GoodputK.reset_k_policy(s)  # type: ignore[arg-type]
    fresh = s.k_policy
    assert fresh.steps == 0 and s.dynamic_sd_lookup.policy is fresh
    fresh.observe_verify(4, 4, count=50)
    s.dynamic_sd_lookup[8]
    _GoodputK.reset_k_policy(s)  # type: ignore[arg-type]
    assert s.k_policy is not fresh and s.k_policy.steps == 0
    _GoodputK.reset_k_policy(s, fresh)  # type: ignore[arg-type]
    assert s.k_policy is fresh and s.dynamic_sd_lookup.policy is fresh
    assert fresh.steps == 1  # what it learnt is kept


def test_an_idle_engine_breaks_the_policy_s_comparisons() -> None:
    """When the last request finishes the engine waits; the steps after the wait must not
    be compared with those before it (the host may have changed meanwhile)."""

    class Parent:
        unfinished = 1

        def update_from_output(self, so: Any, out: Any) -> str:
            return "vllm's outputs"

        def get_num_unfinished_requests(self) -> int:
            return self.unfinished

    class Sched(_GoodputK, Parent):
        def __init__(self) -> None:  # skip vLLM's constructor: only the hook is tested
            self.k_policy = GoodputPolicy(PolicySettings(k_max=4, settle_samples=0))
            self._verified = Counter()
            self._last_step_end = None
            self._last_log = self._busy_since = float("inf")
            self._logged_steps = 0

    def steps(k: int, n: int) -> None:
        for _ in range(n):
            assert s.update_from_output(_output(8, verified=k, k=k), None) == "vllm's outputs"

    s = Sched()
    steps(2, 6)
    steps(3, 6)  # back to back: k=3 is compared with k=2
    assert s.k_policy.cost.comparisons(cell_of(8), 3) == 1
    s = Sched()
    steps(2, 6)
    s.unfinished = 0  # the last request finished: the engine waits
    steps(2, 1)
    assert s._last_step_end is None
    s.unfinished = 1
    steps(3, 6)
    assert s.k_policy.cost.comparisons(cell_of(8), 3) == 0


def test_the_k_line_is_logged_when_the_engine_runs_dry(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server's engine core is killed at shutdown before it can log: the first time the
    engine runs out of requests it logs what ran, later idles only once the interval is
    up (a trickle of short requests must not log a line each), and a long stretch of
    work logs once per interval and when it ends."""
    import vllm_frozen_kv_mtp.draft_length.scheduler as sched_mod

    clock = [100.0]
    monkeypatch.setattr(sched_mod.time, "monotonic", lambda: clock[0])

    class Parent:
        unfinished = 1

        def update_from_output(self, so: Any, out: Any) -> None:
            return None

        def get_num_unfinished_requests(self) -> int:
            return self.unfinished

    class Sched(_GoodputK, Parent):
        def __init__(self) -> None:  # skip vLLM's constructor: only the hook is tested
            self.k_policy = GoodputPolicy(PolicySettings(k_max=4))
            self._verified = Counter()
            self._last_step_end = None
            self._last_log = self._busy_since = clock[0]
            self._logged_steps = 0

    def burst(n: int, seconds: float) -> None:
        s.unfinished = 1
        for i in range(n):
            s.k_policy.choose(8)  # what vLLM's per-step lookup does
            clock[0] += seconds / n
            s.unfinished = int(i < n - 1)
            s.update_from_output(_output(8, verified=4, k=4), None)

    def lines() -> int:
        return sum("frozen_kv_mtp auto k: steps=" in r.getMessage() for r in caplog.records)

    s = Sched()
    with caplog.at_level("INFO", logger="vllm.frozen_kv_mtp"):
        burst(20, seconds=2.0)  # shorter than the interval: logged once it runs dry
        assert lines() == 1 and "steps=20" in caplog.records[-1].getMessage()
        burst(5, seconds=1.0)  # a second short burst soon after: no line of its own
        assert lines() == 1
        clock[0] += sched_mod.LOG_INTERVAL_S
        burst(5, seconds=1.0)  # the interval is up: its idle logs all 30 steps
        assert lines() == 2 and "steps=30" in caplog.records[-1].getMessage()
        clock[0] += 60
        # a long busy stretch: a line per interval of it, none for the first step after
        # the wait, and one when it ends
        burst(50, seconds=sched_mod.LOG_INTERVAL_S * 2.5)
        assert lines() == 5 and "steps=80" in caplog.records[-1].getMessage()


def test_the_context_of_each_step_sets_the_cell() -> None:
    """The mean computed tokens of a step's requests (cached and new) is the next
    decision's context, read on every step, and a clean step's time lands in its cell."""
    s = _scheduler(last=1.0)
    _GoodputK._time_step(s, _output(8, verified=3, k=3, context=2000), now=1.02)
    assert s.k_policy.context == 2000
    assert set(s.k_policy.cost.seconds) == {((8, 3072), 3)}
    s._last_step_end = None  # the first step after a wait: not timed, its context read
    _GoodputK._time_step(s, _output(4, verified=0, k=0, prefill_tokens=50, context=40), now=2.0)
    assert s.k_policy.context == 40 and len(s.k_policy.cost.seconds) == 1
    s.k_policy.choose(8)  # what vLLM's lookup does next: decided for the cell of 40 tokens
    assert s.k_policy._held_cell == cell_of(8, 40)
