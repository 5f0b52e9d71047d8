"""How many drafts this step: the goodput policy of ``num_speculative_tokens="auto"``.

Pure logic (no vLLM, no torch), driven by the scheduler in
:mod:`vllm_frozen_kv_mtp.draft_length.scheduler`. Each step it picks the k in
``0..k_max`` that maximises expected committed tokens per second for this batch:

    goodput(b, k) = (1 + a_1 + ... + a_k) / cost(b, k)

* ``a_i`` is the unconditional acceptance of draft position i (the probability that
  a round's i-th draft is accepted), learned online from the engine's own
  per-request verify results as a product of conditional rates (a position seen in
  few rounds leans on the rate of the one before it), exponentially forgotten so it
  follows the traffic, though never over fewer than a few hundred rounds (while
  k = 0, only down to a floor of evidence: no drafts, nothing new to learn).
* ``cost(b, k)`` is the wall time of one engine step with batch ``b`` and ``k``
  drafts, relative to the other k: learned per cell (batch-size bucket and the
  context the requests hold, :mod:`vllm_frozen_kv_mtp.draft_length.cells`) from the
  steps on both sides of each change of k
  (:mod:`vllm_frozen_kv_mtp.draft_length.step_cost`), so that a host whose speed moves
  over seconds compares k in the same moment. Medians keep one host stall (garbage
  collection, a busy core) from moving it, one comparison reads between 1x and the
  break-even ratio of its two k, and only recent comparisons count once a fresh one is
  in; a pair of k not compared lately only places a k that no fresh pair reaches. The
  comparisons are fitted to one curve held to a prior (the curve of the nearest
  context bucket, else a prior slope) as firmly as the host's measured timing noise
  warrants, non-decreasing in k and with no draft dearer than a perfectly accepted
  one pays for (:mod:`vllm_frozen_kv_mtp.draft_length.cost_fit`): on a busy host the
  noise cannot drag k far from where acceptance puts it.

A frozen-KV drafter owns no KV, so changing k, or skipping drafting (k = 0),
costs nothing to catch up: the policy is free to move every step. It still holds
a choice for a few steps (hysteresis) so that step timings are clean and k does
not flap, and while k = 0 it probes now and then so acceptance stays estimated. Now
and then it tries a k near the best for a few steps and returns to the k it holds, to
compare that k's cost again: a k once costed too high is otherwise never chosen, so
never corrected. A neighbour of the best k never compared in its cell is
tried as soon as the held k has steps enough to compare with (a closed batch's full
stretch lasts a few dozen steps), and so, at any distance, is a k that no chain of
comparisons links to the held k: the smooth prior would place it across a step in the
real curve as if there were none. A k about to be held on the strength of one try is
tried once more, from the held k. Of k within a quarter of the hysteresis of the best,
the shallowest is taken, and a shallower k that commits as many tokens as the held one
needs no margin to be taken: costs are monotone in k, so no error in them can make it
the worse choice, and the margin would otherwise hold a k whose drafts are all
rejected for as long as each costs less than the margin.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from vllm_frozen_kv_mtp.draft_length.cells import Cell, cell_of, context_bucket
from vllm_frozen_kv_mtp.draft_length.settings import PolicySettings
from vllm_frozen_kv_mtp.draft_length.step_cost import StepCost


class AcceptanceEstimate:
    """Per-position unconditional acceptance, with exponential forgetting.

    Counted as conditional rates: of the rounds that reached position i (drafted it,
    and had every earlier draft accepted), the share that accepted it. A position seen
    in few rounds leans on the rate of the position before it, not on a fixed prior:
    a rate shrunk towards ``prior**i`` reads a deep draft of code as nearly worthless
    after a few unlucky rounds at one request a step, and the policy then holds a
    shallower k than the traffic pays for."""

    def __init__(self, settings: PolicySettings) -> None:
        self.s = settings
        k = settings.k_max
        self.drafted = [0.0] * (k + 1)  # index i: rounds that drafted position i
        self.reached = [0.0] * (k + 1)  # ... and had drafts 1..i-1 accepted
        self.accepted = [0.0] * (k + 1)  # ... and had draft i accepted too
        self._rounds = 0  # rounds verified since the last step of forgetting

    def observe(self, num_drafts: int, num_accepted: int, count: int = 1) -> None:
        """``count`` requests' verify result: ``num_accepted`` of ``num_drafts`` drafts."""
        n = min(num_drafts, self.s.k_max)
        self._rounds += count
        for i in range(1, n + 1):
            self.drafted[i] += count
            if i <= num_accepted + 1:
                self.reached[i] += count
            if i <= num_accepted:
                self.accepted[i] += count

    def decay(self, drafting: bool = True) -> None:
        """One step of forgetting. While drafting, every position forgets, so that
        positions deeper than the current k fall back to extrapolation and can win k
        back; while not (``drafting=False``), down to the evidence floor only."""
        d = self.s.acceptance_decay
        rounds, self._rounds = self._rounds, 0
        if drafting:
            if rounds:
                d = max(d, 1.0 - rounds / self.s.acceptance_memory_rounds)
            self.drafted = [x * d for x in self.drafted]
            self.reached = [x * d for x in self.reached]
            self.accepted = [x * d for x in self.accepted]
            return
        floor = self.s.min_evidence
        for i, x in enumerate(self.drafted):
            scale = d if x * d >= floor else min(1.0, floor / x) if x > 0 else 1.0
            self.drafted[i] = x * scale
            self.reached[i] *= scale
            self.accepted[i] *= scale

    def rates(self) -> list[float]:
        """``[a_1, ..., a_kmax]``, non-increasing in i (a later draft is only accepted
        if every earlier one was): the product of the conditional rates, each shrunk
        towards the one before it (``prior_acceptance`` for the first) by
        ``prior_weight`` rounds, a weight that fades to nothing as the rounds that
        reached the position grow to ``min_evidence``; a position not reached lately
        carries that rate on."""
        s = self.s
        out: list[float] = []
        a, rate = 1.0, s.prior_acceptance
        for i in range(1, s.k_max + 1):
            reached = self.reached[i]
            # The prior stands in for evidence, not beside it: at full weight it kept a_1
            # at 1.2 / 66 with every draft rejected (while k = 0 the evidence floor holds
            # 64 rounds), above the 0.5% under which k = 0 commits as much as k = 1, and
            # a cost fit read flat on a busy host then held k = 1 for 150 steps.
            w = s.prior_weight * max(0.0, 1.0 - reached / s.min_evidence)
            seen = reached + w
            if seen > 0:
                rate = min(1.0, (self.accepted[i] + w * rate) / seen)
            a *= rate
            out.append(a)
        return out

    def observed_positions(self) -> int:
        return sum(1 for x in self.drafted[1:] if x >= 1.0)


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
    #: the k the goodput comparison chose last (a probe or an exploration returns to it)
    held: int = field(init=False)
    _held_cell: Cell | None = None
    #: per k: the policy step it was last tried again before being held
    _confirmed: dict[int, int] = field(default_factory=dict)
    #: steps since k last changed
    _dwell: int = 0
    _explore_left: int = 0
    #: per cell: early tries of never-compared neighbours so far
    _early_tries: Counter[Cell] = field(default_factory=Counter)
    _explore_k: int = 0
    _probing: bool = False
    #: k of the latest step sample, and how many in a row had it (to drop settling ones)
    _sample_k: int = -1
    _sample_run: int = 0
    #: computed tokens per request of the latest step (the scheduler sets it): the
    #: context bucket of the next decision
    context: int = 0

    def __post_init__(self) -> None:
        self.acceptance = AcceptanceEstimate(self.settings)
        self.cost = StepCost(self.settings)
        self.current = self.settings.k_max  # optimistic start: drafts are measured at once
        self.held = self.current

    # ---- what the scheduler feeds in ----------------------------------------

    def observe_verify(self, num_drafts: int, num_accepted: int, count: int = 1) -> None:
        self.acceptance.observe(num_drafts, num_accepted, count)

    def observe_step(self, batch_size: int, k: int, seconds: float, context: int = 0) -> None:
        """A clean step's wall time (every request verified k drafts and drafted k),
        its requests holding ``context`` computed tokens each (the mean)."""
        self._sample_run = self._sample_run + 1 if k == self._sample_k else 1
        self._sample_k = k
        if self._sample_run > self.settings.settle_samples:
            self.cost.observe(batch_size, k, seconds, context)

    def observe_idle(self) -> None:
        """The engine ran out of requests: the next steps start a new comparison."""
        self.cost.break_run()
        self._sample_k = -1

    # ---- the decision ---------------------------------------------------------

    def tokens(self) -> list[float]:
        """Expected tokens a request commits per step for k = 0..k_max."""
        out, tokens = [1.0], 1.0
        for a in self.acceptance.rates():
            tokens += a
            out.append(tokens)
        return out

    def goodputs(self, c: Cell, tokens: list[float] | None = None) -> list[float]:
        """Expected committed tokens per unit of step cost for k = 0..k_max in this cell;
        one pass over the acceptance and cost tables, so a step's decision stays cheap
        on the host."""
        curve = self.cost.curve(c)
        return [t / x for t, x in zip(tokens or self.tokens(), curve, strict=True)]

    def choose(self, batch_size: int) -> int:
        """k for a step that schedules ``batch_size`` requests (called once per step)."""
        self.steps += 1
        self.cost.now = self.steps
        self.acceptance.decay(drafting=self.current > 0)
        c = cell_of(batch_size, self.context)
        k, chosen = self._decide(c)
        if chosen:
            self.held, self._held_cell = k, c
        if k != self.current:
            self.switches += 1
            self._dwell = 0
        self._dwell += 1
        self.current = k
        self.chosen[k] += 1
        return k

    def _decide(self, c: Cell) -> tuple[int, bool]:
        """This step's k, and whether the goodput comparison chose it (False: a probe or
        an exploration, after which the policy returns to the k it holds)."""
        s = self.settings
        if self._explore_left > 0:
            self._explore_left -= 1
            return self._explore_k, False
        if self._probing:  # one round of drafts was enough to see acceptance again
            self._probing = False
            return 0, True
        exploring = bool(s.explore_interval) and self.steps % s.explore_interval == 0
        if self.current == 0 and self.steps % s.probe_interval == 0 and not exploring:
            self._probing = True
            return max(1, min(s.k_max, self._probe_k())), False
        # hysteresis and dwell only for a choice made for this cell: the tail of a
        # batch, or a prefill ramp, chooses for smaller batches and must not carry its
        # k into the full batch
        same_cell = self._held_cell in (None, c)  # None: the first steps
        if self._dwell < s.min_dwell_steps and same_cell:
            return self.current, self.current == self.held
        tokens = self.tokens()
        scores = self.goodputs(c, tokens)
        # the shallowest k within a quarter of the hysteresis of the top score: a deeper k
        # that gains less is not worth its drafts, and where costs read flat (a burst that
        # made a deep k look cheap) the shallow side is the safe one
        tie = 1 - s.hysteresis / 4
        top = max(scores) * tie
        best = next(k for k, g in enumerate(scores) if g >= top)
        # a neighbour of the best never compared in this cell is tried as soon as
        # the held k has steps enough for the "before" side of a comparison, not at
        # the next exploration: a full batch of a closed run lasts a few dozen steps
        early = (
            same_cell
            and self._dwell >= s.edge_samples + s.settle_samples + 1
            and self._early_tries[c] < s.early_explore_tries
        )
        if exploring or early:
            neighbour = self._neighbour_to_measure(c, best, never_only=not exploring)
            if neighbour is not None:
                if not exploring:
                    self._early_tries[c] += 1
                self._explore_k, self._explore_left = neighbour, s.explore_steps - 1
                return neighbour, False
        margin = 1 + s.hysteresis if same_cell else 1.0
        if best < self.held and tokens[best] >= tie * tokens[self.held]:
            # a shallower k that commits as many tokens costs no more (costs are
            # monotone in k): no noise in the costs can make it the worse choice, and
            # the margin would hold a k whose drafts are all rejected as long as each
            # costs less than the margin
            margin = tie
        if best != self.held and scores[best] > margin * scores[self.held]:
            if self._needs_confirming(c, best):
                # one try of a few steps may have met a stall or a noisy moment: try it
                # once more first, from the held k, so that the second try makes its own
                # comparisons (staying on would only lengthen the first); the held k
                # stays one chosen for its own cell meanwhile (no margin holds it here)
                if self.current != self.held:
                    return self.held, False
                self._confirmed[best] = self.steps
                self._explore_k, self._explore_left = best, s.explore_steps - 1
                return best, False
            return best, True
        return self.held, True

    def _needs_confirming(self, c: Cell, k: int) -> bool:
        """A k about to be held whose cost rests on one try (two comparisons), not
        confirmed lately."""
        s = self.settings
        if self.cost.comparisons(c, k) >= s.confirm_comparisons:
            return False
        return self.steps - self._confirmed.get(k, -s.explore_interval) >= s.explore_interval

    def _probe_k(self) -> int:
        """At k = 0: draft deep enough to see the positions that could pay off."""
        return max(2, self.acceptance.observed_positions())

    def _neighbour_to_measure(self, c: Cell, best: int, never_only: bool = False) -> int | None:
        """The k within ``explore_span`` of the best whose cost is the oldest (never
        measured first, then the nearest): every stale one gets its turn. Beyond the
        span, a k that no chain of comparisons links to the held k, nearest first: its
        cost against the held k is the prior's guess, which hides a step in the curve
        (held at k = 6 with 4..7 compared, k = 3 continued their slope and so never
        looked worth a try, where the curve stepped up 17% from 3 to 4).
        ``never_only``: only a k never compared in this cell, or not linked."""
        s = self.settings
        linked = self.cost.linked(c, self.held)
        near = [
            k
            for d in range(1, s.k_max + 1)
            for k in (best + d, best - d)
            if 0 <= k <= s.k_max
            and k != self.held  # a try of the held k compares nothing
            and (
                k not in linked
                or d <= s.explore_span
                and self.cost.needs_sample(c, k)
                and not (never_only and self.cost.last_measured(c, k) >= 0)
            )
        ]
        if not near:
            return None
        return min(near, key=lambda k: self.cost.last_measured(c, k))

    def summary(self) -> dict[str, object]:
        """What the engine log reports: k chosen per step, acceptance, switches, the step
        times seen (ms per batch bucket, context bucket and k), the relative costs the
        choice rests on (the same cells: k -> cost, the cheapest compared k 1), and the
        timing noise of one comparison (log), which sets how far those costs may leave
        the prior curve."""
        step_ms: dict[int, dict[int, dict[int, float]]] = {}
        for ((b, ctx), k), seconds in sorted(self.cost.seconds.items()):
            step_ms.setdefault(b, {}).setdefault(ctx, {})[k] = round(1000 * seconds, 2)
        relative: dict[int, dict[int, dict[int, float]]] = {}
        for (b, ctx), rel in sorted(self.cost.relative_by_cell.items()):
            relative.setdefault(b, {})[ctx] = {k: round(c, 3) for k, c in rel.items()}
        return {
            "steps": self.steps,
            "k_counts": dict(sorted(self.chosen.items())),
            "current_k": self.current,
            "switches": self.switches,
            "acceptance_per_position": [round(a, 3) for a in self.acceptance.rates()],
            "context_bucket": context_bucket(self.context),
            "step_ms": step_ms,
            "relative_cost": relative,
            "timing_noise": round(self.cost.noise(), 3),
        }
