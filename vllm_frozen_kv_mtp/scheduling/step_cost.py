"""What one more draft costs: step time per k, learned from the steps around each change of k.

The goodput policy needs, per batch bucket, how the step time grows with k; only the
ratios between k matter. Absolute step times measured at different moments cannot
give them where the host sets the pace (high concurrency): a shared machine's speed
moves by up to 2x over seconds, and a closed batch draining within its bucket moves
the step time as much, more than one more draft does. So each change of k is a paired
comparison: the median of the last steps before it against the median of the first
steps after it, taken moments apart. Every such *edge* gives log(cost(k_new) /
cost(k_old)); a try of a k for a few steps gives two, one on each side, whose drifts
cancel. The relative log-cost of each k is the least-squares fit of the latest edges
of every pair, so a k compared only with a neighbour is still placed on the curve;
k never compared are extrapolated linearly.

Pure logic (no vLLM, no torch).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vllm_frozen_kv_mtp.scheduling.k_policy import PolicySettings

Key = tuple[int, int]  # (batch bucket, k)


def bucket(batch_size: int) -> int:
    """Batch-size bucket of the cost table: the next power of two."""
    return 1 << max(0, math.ceil(math.log2(max(1, batch_size))))


class StepCost:
    """Relative step cost of k per batch bucket, from the steps on both sides of every
    change of k; see the module docstring."""

    def __init__(self, settings: PolicySettings) -> None:
        self.s = settings
        #: per key: (policy step, seconds) of the latest samples (reported, and the
        #: idle-gap cut)
        self.recent: dict[Key, deque[tuple[int, float]]] = {}
        self.samples: Counter[Key] = Counter()
        #: per bucket, per pair (i < j): (policy step, log(cost_j / cost_i)) of its latest
        #: edges
        self.edges: dict[int, dict[tuple[int, int], deque[tuple[int, float]]]] = {}
        #: per (bucket, k): the policy step of its latest edge
        self.last_edge: dict[Key, int] = {}
        #: the run of samples at one key going on now, the one before it, and the policy
        #: step of each run's latest sample
        self._run_key: Key | None = None
        self._run: list[float] = []
        self._run_start = self._run_step = -1
        #: the batch size the current run started at, and the previous run's last
        self._run_batch = self._prev_batch = 0
        self._prev_key: Key | None = None
        self._prev_tail: list[float] = []
        self._prev_step = -1
        self._edge_due = False
        #: per bucket: k -> relative cost (the cheapest measured k is 1), refitted on a
        #: new edge
        self._relative: dict[int, dict[int, float]] = {}
        self.now = 0

    # ---- samples -----------------------------------------------------------------

    def observe(self, batch_size: int, k: int, seconds: float) -> None:
        """One clean step (every request verified k drafts and drafted k)."""
        key = (bucket(batch_size), k)
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
            self._run_key, self._run, self._run_start = key, [], self.now
            self._run_batch = batch_size
            self._edge_due = self._prev_key is not None and self._same_batch(
                batch_size, self._prev_batch
            )
        self._run.append(seconds)
        self._run_step = self.now
        if self._edge_due and len(self._run) == m:
            self._add_edge()

    def break_run(self) -> None:
        """The engine went idle: the steps after it do not compare with those before."""
        self._close_run()
        self._run_key, self._run, self._prev_key, self._edge_due = None, [], None, False

    def _close_run(self) -> None:
        """The run at one key ended: its first samples still make an edge with the run
        before (a try of a few steps has fewer than ``edge_samples``), and its last ones
        are the "before" side of the next edge."""
        if self._run_key is None:
            return
        if self._edge_due and self._run:
            self._add_edge()
        self._prev_key = self._run_key
        self._prev_tail = self._run[-self.s.edge_samples :]
        self._prev_step = self._run_step
        self._prev_batch = self._run_batch

    def _same_batch(self, a: int, b: int) -> bool:
        """Batch sizes close enough that their steps compare: within the tolerance, or
        two requests (a small batch's step barely moves with one request more or less,
        and a steady server's batch moves by a request or two)."""
        return abs(a - b) <= max(2.0, self.s.edge_batch_tolerance * max(a, b))

    def _add_edge(self) -> None:
        self._edge_due = False
        old, new = self._prev_key, self._run_key
        assert old is not None and new is not None
        if old[0] != new[0] or old[1] == new[1]:
            return  # another bucket: its steps do not compare
        if self._run_start - self._prev_step > self.s.edge_gap_steps:
            return  # too far apart: the host may have changed in between
        head = self._run[: self.s.edge_samples]
        d = math.log(statistics.median(head) / statistics.median(self._prev_tail))
        b, (i, j) = old[0], sorted((old[1], new[1]))
        sign = 1.0 if new[1] == j else -1.0
        pair = self.edges.setdefault(b, {}).setdefault((i, j), deque(maxlen=self.s.cost_window))
        pair.append((self.now, sign * d))
        self.last_edge[b, i] = self.last_edge[b, j] = self.now
        self._relative[b] = self._fit(b)

    # ---- the fit -------------------------------------------------------------------

    def _pair_value(self, values: deque[tuple[int, float]]) -> tuple[float, int]:
        """A pair's log ratio and its weight in the fit: the median of its edges and
        their count, the stale ones left out once a fresh one is in (the cost curve
        moves with the traffic, so old edges neither set nor weigh a pair)."""
        latest = values[-1][0]
        fresh = [d for step, d in values if step >= latest - self.s.stale_after_steps]
        return statistics.median(fresh), len(fresh)

    def _fit(self, b: int) -> dict[int, float]:
        """Relative costs of the k connected to the latest edge's k, by least squares
        over the pairs (Gauss-Seidel: a handful of nodes). The pairs compared lately
        place the k they reach; a pair not compared lately only places a k that no
        fresh pair reaches. Exploration keeps pairs around the best k fresh but may
        never compare a stale pair's two k again, and one early misreading would
        otherwise stand for as long as the engine runs."""
        edges = self.edges.get(b, {})
        pairs = {p: self._pair_value(v) for p, v in edges.items()}
        fresh = {
            p: pairs[p] for p, v in edges.items() if self.now - v[-1][0] <= self.s.stale_after_steps
        }
        key = self._run_key
        start = key[1] if key is not None and key[0] == b else next(iter(pairs))[0]
        logc = {start: 0.0}
        placed = _solve(fresh, logc, _reach(start, fresh), fixed={start})
        logc = _solve(pairs, placed, _reach(start, pairs), fixed=set(placed))
        low = min(logc.values())
        return {k: math.exp(v - low) for k, v in sorted(logc.items())}

    # ---- what the policy reads -----------------------------------------------------

    @property
    def seconds(self) -> dict[Key, float]:
        """(bucket, k) -> the median of its latest step times: what was seen, for the
        log (the choice rests on the relative costs)."""
        return {key: statistics.median(t for _, t in w) for key, w in self.recent.items()}

    @property
    def relative_by_bucket(self) -> dict[int, dict[int, float]]:
        """bucket -> (k -> step cost relative to the cheapest compared k), for the log."""
        return dict(self._relative)

    def relative(self, batch_size: int) -> dict[int, float]:
        """k -> step cost relative to the cheapest compared k, at this batch's bucket."""
        return self._relative.get(bucket(batch_size), {})

    def known(self, batch_size: int) -> dict[int, float]:
        """Relative costs of the compared k; with no comparison yet, the k the bucket
        has run at (cost 1: the curve then takes the prior slope)."""
        b = bucket(batch_size)
        rel = self._relative.get(b)
        if rel:
            return rel
        ran = [k for (bb, k) in self.samples if bb == b]
        return {ran[-1]: 1.0} if ran else {}

    def comparisons(self, batch_size: int, k: int) -> int:
        """How many fresh edges place k on its bucket's curve."""
        b = bucket(batch_size)
        n = 0
        for (i, j), values in self.edges.get(b, {}).items():
            if k in (i, j):
                n += sum(1 for step, _ in values if step >= self.now - self.s.stale_after_steps)
        return n

    def needs_sample(self, batch_size: int, k: int) -> bool:
        """Never compared with another k, or compared long ago."""
        last = self.last_measured(batch_size, k)
        return last < 0 or self.now - last > self.s.stale_after_steps

    def last_measured(self, batch_size: int, k: int) -> int:
        """The policy step of the key's latest edge; -1 if it has none (so it sorts
        before every measured key, oldest first)."""
        return self.last_edge.get((bucket(batch_size), k), -1)

    def curve(self, batch_size: int) -> list[float] | None:
        """Relative cost per step for k = 0..k_max at the bucket of ``batch_size``; None
        if nothing of the bucket is measured yet (then every k costs the same to the
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


Pairs = dict[tuple[int, int], tuple[float, int]]


def _reach(start: int, pairs: Pairs) -> set[int]:
    """The k linked to ``start`` through ``pairs``."""
    nodes, todo = {start}, [start]
    while todo:
        n = todo.pop()
        for i, j in pairs:
            for a, c in ((i, j), (j, i)):
                if a == n and c not in nodes:
                    nodes.add(c)
                    todo.append(c)
    return nodes


def _solve(
    pairs: Pairs, logc: dict[int, float], nodes: set[int], fixed: set[int]
) -> dict[int, float]:
    """Least-squares log costs of ``nodes`` from the pairs' weighted log ratios, the
    ``fixed`` ones held where ``logc`` has them (Gauss-Seidel)."""
    out = dict.fromkeys(nodes, 0.0) | {n: logc[n] for n in fixed}
    for _ in range(50):
        for n in nodes - fixed:
            num = den = 0.0
            for (i, j), (d, w) in pairs.items():
                if i == n and j in nodes:
                    num, den = num + w * (out[j] - d), den + w
                elif j == n and i in nodes:
                    num, den = num + w * (out[i] + d), den + w
            if den:
                out[n] = num / den
    return out
