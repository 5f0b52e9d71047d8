"""Tuning of the goodput policy: one frozen dataclass every part of it reads.

Kept apart from the policy (``policy.py``) and the cost model (``step_cost.py``) so that
both can read it without importing each other. Pure data (no vLLM, no torch).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PolicySettings:
    """Tuning of :class:`GoodputPolicy`; the defaults are what ships."""

    #: drafts per round are chosen in 0..k_max
    k_max: int
    #: per-step forgetting of acceptance counts: about 1/(1-decay) steps of memory
    acceptance_decay: float = 0.98
    #: ... but never faster than forgetting over this many verified rounds: at one
    #: request a step, 50 steps are 50 rounds, too few to tell a deep position's 0.4
    #: from its 0.5
    acceptance_memory_rounds: float = 256.0
    #: while k = 0, forgetting stops at this many drafts of evidence per position: the
    #: last measured acceptance stands (probes refresh it) instead of sliding back to
    #: the optimistic prior and pulling k up with no new evidence; the first position's
    #: prior weighs nothing by then (below: a deeper position, reached in fewer rounds
    #: than drafted, still leans on the one before it)
    min_evidence: float = 64.0
    #: prior acceptance of position i before any draft was verified: prior**i
    prior_acceptance: float = 0.6
    #: weight, in drafts, of that prior (and of the lean of a position on the one
    #: before it), fading to nothing as the position's rounds grow to min_evidence
    prior_weight: float = 2.0
    #: a pair of k's relative cost is the median of this many latest comparisons (and a
    #: key's reported step time the median of as many latest steps)
    cost_window: int = 9
    #: steps on each side of a change of k that a comparison takes (medians)
    edge_samples: int = 5
    #: steps between the two sides beyond which a comparison is not made: the host may
    #: have changed meanwhile (a change of k leaves one or two unclean steps)
    edge_gap_steps: int = 4
    #: steps compare only while the batch size stays within this fraction (or one
    #: request): the step time of a draining batch falls with it, whatever k does
    edge_batch_tolerance: float = 0.05
    #: clean steps dropped after k changes: the step loop overlaps a step's host work
    #: with the next one's, so the first step at a new k still carries some of the old
    settle_samples: int = 1
    #: relative step cost of one more draft before a cell's costs are compared
    prior_slope: float = 0.15
    #: how far (log) a step of one more draft may stray from the prior curve's before
    #: comparisons must show it: against a comparison's noise variance this sets
    #: whether the prior or the comparisons lead the fit
    slope_spread: float = 0.1
    #: the same for the step from k = 0 to 1, which adds the draft round's fixed cost
    #: (launches, host work) and differs most between hosts
    jump_spread: float = 0.15
    #: the same for the change from one step's increment to the next: held firmer, so
    #: that a k never compared continues the slope measured below it
    bend_spread: float = 0.03
    #: switch only when the best k beats the current one by this fraction
    hysteresis: float = 0.02
    #: steps to hold a new k before it may change again
    min_dwell_steps: int = 4
    #: at k = 0, schedule one round of drafts every this many steps
    probe_interval: int = 32
    #: every this many steps, hold a k near the best for a few steps if its cost was
    #: never measured or is stale (0 turns exploration off)
    explore_interval: int = 128
    #: a k is held only once this many fresh comparisons place it (two per try of a
    #: few steps); with fewer it is tried once more first
    confirm_comparisons: int = 4
    #: steps an exploration holds its k: the first is not clean (it verifies the old
    #: k's drafts) and settle_samples more are dropped; the rest are compared with the
    #: held k's steps on both sides
    explore_steps: int = 5
    #: how far from the best k exploration looks; the k whose cost is oldest goes first
    explore_span: int = 2
    #: per cell, tries of a never-compared neighbour made before the next
    #: exploration is due (a cell whose batch never holds steady, and so never
    #: compares, stops trying after these)
    early_explore_tries: int = 8
    #: a comparison older than this many steps is stale, and left out of its pair once the
    #: pair is compared again: the cost curve moves with the traffic (tokens committed
    #: per step cost host time too), and early steps can be off (a host warming up)
    stale_after_steps: int = 256

    def __post_init__(self) -> None:
        if self.k_max < 1:
            raise ValueError("k_max must be >= 1")
        if self.min_evidence <= 0:
            raise ValueError("min_evidence must be > 0")
