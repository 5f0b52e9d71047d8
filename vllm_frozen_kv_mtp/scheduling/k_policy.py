"""How many drafts this step: the goodput policy of ``num_speculative_tokens="auto"``.

Pure logic (no vLLM, no torch), driven by the scheduler in
:mod:`vllm_frozen_kv_mtp.scheduling.scheduler`. Each step it picks the k in
``0..k_max`` that maximises expected committed tokens per second for this batch:

    goodput(b, k) = (1 + a_1 + ... + a_k) / cost(b, k)

* ``a_i`` is the unconditional acceptance of draft position i (the probability that
  a round's i-th draft is accepted), learned online from the engine's own
  per-request verify results, exponentially forgotten so it follows the traffic
  (while k = 0, only down to a floor of evidence: no drafts, nothing new to learn).
* ``cost(b, k)`` is the wall time of one engine step with batch ``b`` and ``k``
  drafts, learned online from step timings per batch-size bucket: the median of the
  latest few clean steps, so one host stall (garbage collection, a busy core) does not
  move it. Only recent steps count: a cost measured early (a host still warming up)
  must not outlive its re-measurement. Unmeasured k are extrapolated linearly from the
  measured ones (a prior slope until two are known).

A frozen-KV drafter owns no KV, so changing k, or skipping drafting (k = 0),
costs nothing to catch up: the policy is free to move every step. It still holds
a choice for a few steps (hysteresis) so that step timings are clean and k does
not flap, and while k = 0 it probes now and then so acceptance stays estimated. Now
and then it holds a k near the best for a few steps to measure its cost again: a k
whose cost was once measured too high is otherwise never chosen, so never corrected.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, deque
from dataclasses import dataclass, field


@dataclass(frozen=True)
class PolicySettings:
    """Tuning of :class:`GoodputPolicy`; the defaults are what ships."""

    #: drafts per round are chosen in 0..k_max
    k_max: int
    #: per-step forgetting of acceptance counts: about 1/(1-decay) steps of memory
    acceptance_decay: float = 0.98
    #: while k = 0, forgetting stops at this many drafts of evidence per position: the
    #: last measured acceptance stands (probes refresh it) instead of sliding back to
    #: the optimistic prior and pulling k up with no new evidence
    min_evidence: float = 32.0
    #: prior acceptance of position i before any draft was verified: prior**i
    prior_acceptance: float = 0.6
    #: weight, in drafts, of that prior
    prior_weight: float = 2.0
    #: a (bucket, k)'s step cost is the median of this many latest clean steps
    cost_window: int = 9
    #: relative step cost of one more draft until two k of a bucket are measured
    prior_slope: float = 0.15
    #: switch only when the best k beats the current one by this fraction
    hysteresis: float = 0.03
    #: steps to hold a new k before it may change again
    min_dwell_steps: int = 4
    #: at k = 0, schedule one round of drafts every this many steps
    probe_interval: int = 32
    #: every this many steps, hold a k near the best for a few steps if its cost was
    #: never measured or is stale (0 turns exploration off)
    explore_interval: int = 128
    #: how far from the best k exploration looks; the k whose cost is oldest goes first
    explore_span: int = 2
    #: a cost sample older than this many steps is stale, and left out of the cost once
    #: the key is measured again: the step cost moves with the traffic (tokens committed
    #: per step cost host time too), and early samples can be off (a host warming up)
    stale_after_steps: int = 256

    def __post_init__(self) -> None:
        if self.k_max < 1:
            raise ValueError("k_max must be >= 1")


def bucket(batch_size: int) -> int:
    """Batch-size bucket of the cost table: the next power of two."""
    return 1 << max(0, math.ceil(math.log2(max(1, batch_size))))


class AcceptanceEstimate:
    """Per-position unconditional acceptance, with exponential forgetting."""

    def __init__(self, settings: PolicySettings) -> None:
        self.s = settings
        k = settings.k_max
        self.drafted = [0.0] * (k + 1)  # index i: rounds that drafted position i
        self.accepted = [0.0] * (k + 1)

    def observe(self, num_drafts: int, num_accepted: int, count: int = 1) -> None:
        """``count`` requests' verify result: ``num_accepted`` of ``num_drafts`` drafts."""
        n = min(num_drafts, self.s.k_max)
        for i in range(1, n + 1):
            self.drafted[i] += count
            if i <= num_accepted:
                self.accepted[i] += count

    def decay(self, drafting: bool = True) -> None:
        """One step of forgetting. While drafting, every position forgets, so that
        positions deeper than the current k fall back to extrapolation and can win k
        back; while not (``drafting=False``), down to the evidence floor only."""
        d = self.s.acceptance_decay
        if drafting:
            self.drafted = [x * d for x in self.drafted]
            self.accepted = [x * d for x in self.accepted]
            return
        floor = self.s.min_evidence
        for i, x in enumerate(self.drafted):
            scale = d if x * d >= floor else min(1.0, floor / x) if x > 0 else 1.0
            self.drafted[i] = x * scale
            self.accepted[i] *= scale

    def rates(self) -> list[float]:
        """``[a_1, ..., a_kmax]``; a_i is non-increasing in i (a later draft is only
        accepted if every earlier one was)."""
        s = self.s
        out: list[float] = []
        prev = 1.0
        for i in range(1, s.k_max + 1):
            prior = s.prior_acceptance**i
            if self.drafted[i] >= 1.0 or i == 1:
                a = (self.accepted[i] + s.prior_weight * prior) / (self.drafted[i] + s.prior_weight)
            else:
                # Never drafted this deep lately: carry the last conditional rate on.
                ratio = out[-1] / out[-2] if len(out) >= 2 and out[-2] > 0 else s.prior_acceptance
                a = out[-1] * ratio
            a = min(a, prev)
            out.append(a)
            prev = a
        return out

    def observed_positions(self) -> int:
        return sum(1 for x in self.drafted[1:] if x >= 1.0)


class StepCost:
    """Step wall time per (batch bucket, k): the median of the latest clean steps,
    linearly extrapolated in k."""

    def __init__(self, settings: PolicySettings) -> None:
        self.s = settings
        #: per key: (policy step, seconds) of the latest samples
        self.recent: dict[tuple[int, int], deque[tuple[int, float]]] = {}
        self.samples: Counter[tuple[int, int]] = Counter()
        #: the policy step of each key's latest sample
        self.last_seen: dict[tuple[int, int], int] = {}
        #: per bucket: k -> median seconds (kept up to date by observe)
        self._known: dict[int, dict[int, float]] = {}
        self.now = 0

    def observe(self, batch_size: int, k: int, seconds: float) -> None:
        b = bucket(batch_size)
        key = (b, k)
        window = self.recent.get(key)
        if window is not None and seconds > 20 * self._known[b][k]:
            return  # an idle gap or a stall, not a step
        if window is None:
            window = self.recent[key] = deque(maxlen=self.s.cost_window)
        window.append((self.now, seconds))
        horizon = self.now - self.s.stale_after_steps
        fresh = [t for step, t in window if step >= horizon]
        self._known.setdefault(b, {})[k] = statistics.median(fresh)
        self.samples[key] += 1
        self.last_seen[key] = self.now

    @property
    def seconds(self) -> dict[tuple[int, int], float]:
        """(bucket, k) -> the current cost estimate of every measured key."""
        return {(b, k): t for b, ks in self._known.items() for k, t in ks.items()}

    def needs_sample(self, batch_size: int, k: int) -> bool:
        """Never measured well enough, or measured long ago."""
        last = self.last_measured(batch_size, k)
        return last < 0 or self.now - last > self.s.stale_after_steps

    def last_measured(self, batch_size: int, k: int) -> int:
        """The policy step of the key's latest sample; -1 while it has too few samples to
        count as measured (so it sorts before every measured key, oldest first)."""
        key = (bucket(batch_size), k)
        if self.samples[key] < 3:
            return -1
        return self.last_seen.get(key, 0)

    def known(self, batch_size: int) -> dict[int, float]:
        return self._known.get(bucket(batch_size), {})

    def curve(self, batch_size: int) -> list[float] | None:
        """Seconds per step for k = 0..k_max at the bucket of ``batch_size``; None if
        nothing of the bucket is measured yet (then every k costs the same to the
        policy's eyes)."""
        known = self.known(batch_size)
        if not known:
            return None
        ks = sorted(known)
        k_range = range(self.s.k_max + 1)
        if len(ks) == 1:
            k0 = ks[0]
            base = known[k0] / (1 + self.s.prior_slope * k0)
            line = [base * (1 + self.s.prior_slope * k) for k in k_range]
        else:
            # least-squares line through the measured points; never below half the cheapest
            n = len(ks)
            mk = sum(ks) / n
            mt = sum(known[x] for x in ks) / n
            var = sum((x - mk) ** 2 for x in ks)
            slope = max(sum((x - mk) * (known[x] - mt) for x in ks) / var, 0.0)
            floor = min(known.values()) * 0.5
            line = [max(mt + slope * (k - mk), floor) for k in k_range]
        return [known.get(k, line[k]) for k in k_range]


@dataclass
class GoodputPolicy:
    """Picks k per step; see the module docstring."""

    settings: PolicySettings
    acceptance: AcceptanceEstimate = field(init=False)
    cost: StepCost = field(init=False)
    current: int = field(init=False)
    steps: int = 0
    chosen: Counter[int] = field(default_factory=Counter)
    switches: int = 0
    _held: int = 0
    _explore_left: int = 0
    _explore_k: int = 0
    _probing: bool = False

    def __post_init__(self) -> None:
        self.acceptance = AcceptanceEstimate(self.settings)
        self.cost = StepCost(self.settings)
        self.current = self.settings.k_max  # optimistic start: drafts are measured at once

    # ---- what the scheduler feeds in ----------------------------------------

    def observe_verify(self, num_drafts: int, num_accepted: int, count: int = 1) -> None:
        self.acceptance.observe(num_drafts, num_accepted, count)

    def observe_step(self, batch_size: int, k: int, seconds: float) -> None:
        self.cost.observe(batch_size, k, seconds)

    # ---- the decision ---------------------------------------------------------

    def goodputs(self, batch_size: int) -> list[float]:
        """Expected committed tokens per second and request for k = 0..k_max at this
        batch (per step where no cost of the bucket is known yet); one pass over the
        acceptance and cost tables, so a step's decision stays cheap on the host."""
        rates = self.acceptance.rates()
        curve = self.cost.curve(batch_size)
        out, tokens = [], 1.0
        for k in range(self.settings.k_max + 1):
            if k:
                tokens += rates[k - 1]
            cost = curve[k] if curve is not None else 1.0 + self.settings.prior_slope * k
            out.append(tokens / cost)
        return out

    def choose(self, batch_size: int) -> int:
        """k for a step that schedules ``batch_size`` requests (called once per step)."""
        self.steps += 1
        self.cost.now = self.steps
        self.acceptance.decay(drafting=self.current > 0)
        k = self._decide(batch_size)
        if k != self.current:
            self.switches += 1
            self._held = 0
        self._held += 1
        self.current = k
        self.chosen[k] += 1
        return k

    def _decide(self, batch_size: int) -> int:
        s = self.settings
        if self._explore_left > 0:
            self._explore_left -= 1
            return self._explore_k
        if self._probing:  # one round of drafts was enough to see acceptance again
            self._probing = False
            return 0
        if self.current == 0 and self.steps % s.probe_interval == 0:
            self._probing = True
            return max(1, min(s.k_max, self._probe_k()))
        if self._held < s.min_dwell_steps:
            return self.current
        scores = self.goodputs(batch_size)
        best = max(range(len(scores)), key=lambda k: (scores[k], -k))
        if s.explore_interval and self.steps % s.explore_interval == 0 and best > 0:
            neighbour = self._neighbour_to_measure(batch_size, best)
            if neighbour is not None:
                # the first step after a switch is mixed (verifies the old k): hold the
                # neighbour long enough for clean samples
                self._explore_k, self._explore_left = neighbour, s.min_dwell_steps - 1
                return neighbour
        if best == self.current:
            return best
        if scores[best] > (1 + s.hysteresis) * scores[self.current]:
            return best
        return self.current

    def _probe_k(self) -> int:
        """At k = 0: draft deep enough to see the positions that could pay off."""
        return max(2, self.acceptance.observed_positions())

    def _neighbour_to_measure(self, batch_size: int, best: int) -> int | None:
        """The k within ``explore_span`` of the best whose cost is the oldest (never
        measured first, then the nearest): every stale one gets its turn."""
        span = self.settings.explore_span
        near = [
            k
            for d in range(1, span + 1)
            for k in (best + d, best - d)
            if 0 <= k <= self.settings.k_max and self.cost.needs_sample(batch_size, k)
        ]
        if not near:
            return None
        return min(near, key=lambda k: self.cost.last_measured(batch_size, k))

    def summary(self) -> dict[str, object]:
        """What the engine log reports: k chosen per step, acceptance, switches, and the
        step costs the choice rests on (ms per batch bucket and measured k)."""
        step_ms: dict[int, dict[int, float]] = {}
        for (b, k), seconds in sorted(self.cost.seconds.items()):
            step_ms.setdefault(b, {})[k] = round(1000 * seconds, 2)
        return {
            "steps": self.steps,
            "k_counts": dict(sorted(self.chosen.items())),
            "current_k": self.current,
            "switches": self.switches,
            "acceptance_per_position": [round(a, 3) for a in self.acceptance.rates()],
            "step_ms": step_ms,
        }
