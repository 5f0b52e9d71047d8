"""What one more draft costs: step time per k, learned from the steps around each change of k.

The goodput policy needs, per cell (batch bucket and context bucket,
:mod:`vllm_frozen_kv_mtp.draft_length.cells`), how the step time grows with k; only the
ratios between k matter. Absolute step times measured at different moments cannot
give them where the host sets the pace (high concurrency): a shared machine's speed
moves by up to 2x over seconds, and a closed batch draining within its bucket moves
the step time as much, more than one more draft does. So each change of k is a paired
comparison: the median of the last steps before it against the median of the first
steps after it, taken moments apart. Every such *edge* gives log(cost(k_new) /
cost(k_old)); a try of a k for a few steps gives two, one on each side, whose drifts
cancel. An edge reads the deeper k between 1x and the break-even ratio of its two k
(one wild reading moves nothing past what could change a choice), and a pair's value
is the median of its latest edges.

The curve is fitted to the pairs by least squares held to a prior curve
(:mod:`vllm_frozen_kv_mtp.draft_length.cost_fit`): the curve of the nearest context
bucket of the same batch bucket, or a prior slope. How much the pairs weigh against
it follows the host's timing noise, measured as it goes from what an edge reads where
k did not change (two adjacent windows of one run at one k): on a busy CPU such a
non-change reads anywhere from 0.5x to 2x, and the paired comparisons then barely
move the prior; on a quiet GPU host they agree to a percent and set the curve. The
fitted curve is then held to physical bounds: costs non-decreasing in k, and no draft
costing more than a perfectly accepted one pays for.

Pure logic (no vLLM, no torch).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, deque

from vllm_frozen_kv_mtp.draft_length import cost_fit
from vllm_frozen_kv_mtp.draft_length.cells import Cell, cell_of
from vllm_frozen_kv_mtp.draft_length.settings import PolicySettings

Key = tuple[Cell, int]  # (cell, k)

#: a comparison never reads better than this (log): the fit's weights stay finite
NOISE_FLOOR = 0.005


class StepCost:
    """Relative step cost of k per cell, from the steps on both sides of every change of
    k; see the module docstring."""

    def __init__(self, settings: PolicySettings) -> None:
        self.s = settings
        #: per key: (policy step, seconds) of the latest samples (reported, and the
        #: idle-gap cut)
        self.recent: dict[Key, deque[tuple[int, float]]] = {}
        self.samples: Counter[Key] = Counter()
        #: per cell, per pair (i < j): (policy step, log(cost_j / cost_i)) of its latest
        #: edges
        self.edges: dict[Cell, dict[tuple[int, int], deque[tuple[int, float]]]] = {}
        #: per (cell, k): the policy step of its latest edge
        self.last_edge: dict[Key, int] = {}
        #: the run of samples at one key going on now, the one before it, and the policy
        #: step of each run's latest sample
        self._run_key: Key | None = None
        #: the run's first ``edge_samples`` samples, its last 2 x as many, and its length
        #: (a k held for hours keeps only these)
        self._head: list[float] = []
        self._tail: deque[float] = deque(maxlen=2 * settings.edge_samples)
        self._run_len = 0
        self._run_start = self._run_step = -1
        #: the batch size the current run started at, and the previous run's last
        self._run_batch = self._prev_batch = 0
        self._prev_key: Key | None = None
        self._prev_tail: list[float] = []
        self._prev_step = -1
        self._edge_due = False
        #: |log ratio| of successive steps of a run, and of adjacent windows of
        #: ``edge_samples`` steps of a run: what a comparison reads where k did not change
        self._step_jitter: deque[float] = deque(maxlen=64)
        self._null_edges: deque[float] = deque(maxlen=32)
        self._noise = NOISE_FLOOR  # noise(), updated every few samples
        self._n_samples = 0
        #: per cell: fitted log costs of k = 0..k_max (the cheapest 0), the k its pairs
        #: compare, and the noise the fit assumed
        self._fits: dict[Cell, list[float]] = {}
        self._compared: dict[Cell, set[int]] = {}
        self._fit_noise: dict[Cell, float] = {}
        self.now = 0

    # ---- samples -----------------------------------------------------------------

    def observe(self, batch_size: int, k: int, seconds: float, context: int = 0) -> None:
        """One clean step (every request verified k drafts and drafted k) of
        ``batch_size`` requests holding ``context`` tokens each (the mean)."""
        key = (cell_of(batch_size, context), k)
        window = self.recent.get(key)
        if window and seconds > 20 * statistics.median(t for _, t in window):
            return  # an idle gap or a stall, not a step
        if window is None:
            window = self.recent[key] = deque(maxlen=self.s.cost_window)
        window.append((self.now, seconds))
        self.samples[key] += 1

        m = self.s.edge_samples
        if key == self._run_key and not self._same_batch(batch_size, self._run_batch):
            self.break_run()  # a draining batch: its step time moves with it, not with k
        if key != self._run_key:
            self._close_run()
            self._run_key, self._run_start = key, self.now
            self._head, self._run_len = [], 0
            self._tail.clear()
            self._run_batch = batch_size
            self._edge_due = self._prev_key is not None and self._same_batch(
                batch_size, self._prev_batch
            )
        tail = self._tail
        if tail and self.now == self._run_step + 1:
            self._step_jitter.append(abs(math.log(seconds / tail[-1])))
        tail.append(seconds)
        if len(self._head) < m:
            self._head.append(seconds)
        self._run_len += 1
        self._run_step = self.now
        if self._run_len >= 2 * m and self._run_len % m == 0:
            w = list(tail)
            before, after = statistics.median(w[:m]), statistics.median(w[m:])
            self._null_edges.append(abs(math.log(after / before)))
        self._n_samples += 1
        if self._n_samples % m == 0:
            self._noise = self._measure_noise()
        if self._edge_due and self._run_len == m:
            self._add_edge()

    def break_run(self) -> None:
        """The engine went idle: the steps after it do not compare with those before."""
        self._close_run()
        self._run_key, self._prev_key, self._edge_due = None, None, False
        self._head, self._run_len = [], 0
        self._tail.clear()

    def _close_run(self) -> None:
        """The run at one key ended: its first samples still make an edge with the run
        before (a try of a few steps has fewer than ``edge_samples``), and its last ones
        are the "before" side of the next edge."""
        if self._run_key is None:
            return
        if self._edge_due and self._run_len:
            self._add_edge()
        self._prev_key = self._run_key
        self._prev_tail = list(self._tail)[-self.s.edge_samples :]
        self._prev_step = self._run_step
        self._prev_batch = self._run_batch

    def _same_batch(self, a: int, b: int) -> bool:
        """Batch sizes close enough that their steps compare: within the tolerance, or
        one request (a steady server's batch moves by a request). Not two: where each
        request reads a long context, one request of eight moves the step by 2-4%, as
        much as a draft, and a closed batch's tail compared at 6 requests against 8
        read k = 4 as no dearer than k = 3 (truly 17% dearer)."""
        return abs(a - b) <= max(1.0, self.s.edge_batch_tolerance * max(a, b))

    def _add_edge(self) -> None:
        self._edge_due = False
        old, new = self._prev_key, self._run_key
        assert old is not None and new is not None
        if old[0] != new[0] or old[1] == new[1]:
            return  # another cell: its steps do not compare
        if self._run_start - self._prev_step > self.s.edge_gap_steps:
            return  # too far apart: the host may have changed in between
        d = math.log(statistics.median(self._head) / statistics.median(self._prev_tail))
        c, (i, j) = old[0], sorted((old[1], new[1]))
        if new[1] != j:
            d = -d
        # one edge reads the deeper k no cheaper than the shallower one and no dearer
        # than break-even: a burst on one side may read 10x either way, and a median of
        # few edges would take it (the median of clipped edges is the clipped median)
        d = max(0.0, min(cost_fit.break_even(i, j), d))
        pair = self.edges.setdefault(c, {}).setdefault((i, j), deque(maxlen=self.s.cost_window))
        pair.append((self.now, d))
        self.last_edge[c, i] = self.last_edge[c, j] = self.now
        self._refit(c)

    # ---- the fit -------------------------------------------------------------------

    def noise(self) -> float:
        """Spread (log) of one comparison where k did not change."""
        return self._noise

    def _measure_noise(self) -> float:
        """The larger of what adjacent windows of a run read (drift and bursts included)
        and what successive steps' jitter implies for a median of ``edge_samples`` on
        each side."""
        sigma = NOISE_FLOOR
        if len(self._step_jitter) >= 16:  # a stall among a few steps is not the host
            step = 1.4826 * statistics.median(self._step_jitter) / math.sqrt(2)
            sigma = max(sigma, step * math.sqrt(math.pi / self.s.edge_samples))
        nulls = sorted(self._null_edges)
        if len(nulls) >= 3:
            # the 90th percentile, as a normal spread would have it: a busy host's bursts
            # (one comparison in ten reading 5x) are the noise that matters, and a
            # median would not see them
            sigma = max(sigma, nulls[int(0.9 * (len(nulls) - 1))] / 1.645)
        return sigma

    def _pair_value(self, values: deque[tuple[int, float]]) -> tuple[float, int]:
        """A pair's log ratio and its count: the median of its edges and their count, the
        stale ones left out once a fresh one is in (the cost curve moves with the
        traffic, so old edges neither set nor weigh a pair)."""
        latest = values[-1][0]
        fresh = [d for step, d in values if step >= latest - self.s.stale_after_steps]
        return statistics.median(fresh), len(fresh)

    def _refit(self, c: Cell) -> None:
        """Fit the cell's curve. The pairs compared lately place the k they reach; a pair
        not compared lately only places a k that no fresh pair reaches. Exploration
        keeps pairs around the best k fresh but may never compare a stale pair's two k
        again, and one early misreading would otherwise stand for as long as the engine
        runs."""
        s, sigma = self.s, self._noise
        var = sigma * sigma
        edges = self.edges.get(c, {})
        values = {p: self._pair_value(v) for p, v in edges.items()}
        pairs = {p: (d, n / var) for p, (d, n) in values.items()}
        fresh = {
            p: pairs[p] for p, v in edges.items() if self.now - v[-1][0] <= s.stale_after_steps
        }
        prior = self._prior(c)
        spreads = (s.slope_spread, s.jump_spread, s.bend_spread)
        y = cost_fit.fit(fresh, prior, spreads)
        placed = {k for p in fresh for k in p}
        if len(fresh) < len(pairs):
            y = cost_fit.fit(pairs, prior, spreads, fixed={k: y[k] for k in placed})
        weights = [s.slope_spread**-2] * len(y)
        for (i, j), (_, w) in pairs.items():
            weights[i] += w
            weights[j] += w
        y = cost_fit.bound(y, weights)
        low = min(y)
        self._fits[c] = [v - low for v in y]
        self._compared[c] = {k for p in pairs for k in p}
        self._fit_noise[c] = sigma

    def _prior(self, c: Cell) -> list[float]:
        """The prior curve of a cell: the fit of the nearest context bucket of its batch
        bucket (a context that changes over the day starts from its neighbour's costs),
        else ``1 + prior_slope * k``."""
        near = [other for other in self._fits if other[0] == c[0] and other != c]
        if near:
            return self._fits[min(near, key=lambda o: abs(math.log(o[1] / c[1])))]
        return cost_fit.prior_curve(self.s.k_max, self.s.prior_slope)

    # ---- what the policy reads -----------------------------------------------------

    @property
    def seconds(self) -> dict[Key, float]:
        """(cell, k) -> the median of its latest step times: what was seen, for the log
        (the choice rests on the relative costs)."""
        return {key: statistics.median(t for _, t in w) for key, w in self.recent.items()}

    @property
    def relative_by_cell(self) -> dict[Cell, dict[int, float]]:
        """cell -> (k -> step cost relative to the cheapest compared k), for the log."""
        return {c: self.relative(c) for c in self._fits}

    def relative(self, c: Cell) -> dict[int, float]:
        """k -> step cost relative to the cheapest compared k, for the k compared in this
        cell (what its fit says of them)."""
        y = self._fits.get(c)
        if y is None:
            return {}
        ks = sorted(self._compared[c])
        low = min(y[k] for k in ks)
        return {k: math.exp(y[k] - low) for k in ks}

    def comparisons(self, c: Cell, k: int) -> int:
        """How many fresh edges place k on its cell's curve."""
        n = 0
        for (i, j), values in self.edges.get(c, {}).items():
            if k in (i, j):
                n += sum(1 for step, _ in values if step >= self.now - self.s.stale_after_steps)
        return n

    def linked(self, c: Cell, k: int) -> set[int]:
        """The k whose cost relative to ``k`` rests on a chain of comparisons (fresh or
        stale) in this cell, ``k`` included. The fit places any other k against it by
        the prior curve alone, which is smooth: a step in the real curve between two
        groups of k never compared with each other (a kernel tile or graph-size
        threshold) is spread over the k around it."""
        pairs = self.edges.get(c, {})
        seen, todo = {k}, [k]
        while todo:
            a = todo.pop()
            for i, j in pairs:
                for x, y in ((i, j), (j, i)):
                    if x == a and y not in seen:
                        seen.add(y)
                        todo.append(y)
        return seen

    def needs_sample(self, c: Cell, k: int) -> bool:
        """Never compared with another k, or compared long ago."""
        last = self.last_measured(c, k)
        return last < 0 or self.now - last > self.s.stale_after_steps

    def last_measured(self, c: Cell, k: int) -> int:
        """The policy step of the key's latest edge; -1 if it has none (so it sorts
        before every measured key, oldest first)."""
        return self.last_edge.get((c, k), -1)

    def curve(self, c: Cell) -> list[float]:
        """Relative cost per step for k = 0..k_max in this cell (the cheapest 1): its fit,
        refitted when the host's noise has moved by a quarter since; before its first
        comparison, its prior."""
        y = self._fits.get(c)
        if y is not None and abs(math.log(self._noise / self._fit_noise[c])) > 0.25:
            self._refit(c)
            y = self._fits[c]
        if y is None:
            y = self._prior(c)
        low = min(y)
        return [math.exp(v - low) for v in y]
