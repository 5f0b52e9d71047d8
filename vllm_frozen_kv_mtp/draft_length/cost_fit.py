"""One cell's step-cost curve from its comparisons: a least-squares fit held to a prior
curve in proportion to the timing noise, then to the physical bounds of one more draft.

Unknowns: ``y[k] = log cost(k)`` for k = 0..K. The fit minimises

* over the compared pairs (i, j): ``w * (y[j] - y[i] - d)**2``, with ``d`` the pair's
  log cost ratio and ``w`` its comparisons over the variance of one comparison (the
  host's timing noise: a quiet GPU host's comparisons agree to a percent, a CPU shared
  with busy processes reads the same pair anywhere from 0.5x to 2x);
* over each step from k to k + 1: ``(dy[k] - dp[k])**2 / spread**2``, the increment of
  the prior curve ``p`` (the draft round's fixed cost, from k = 0 to 1, held loosely),
  and the bend ``(dy[k+1] - dy[k]) - (dp[k+1] - dp[k])`` likewise; more firmly where a k
  never compared takes part, so that it continues the slope measured next to it
  (between compared k the comparisons set the shape).

Where comparisons are precise their weight is hundreds of times the prior's and the
curve is what they say, quirks included; where the host drowns them the curve stays
near the prior, which a noisy comparison cannot drag far. Then the curve is projected
onto ``0 <= y[k+1] - y[k] <= log((k + 2) / (k + 1))``: one more draft never makes a step
cheaper, and never costs more than the share of the step that a perfectly accepted
draft pays for (cost(k) / (k + 1), the cost per position verified, does not grow with
k), so a reading past that bound cannot make the policy drop below where every draft
is accepted.

Pure logic (no vLLM, no torch).
"""

from __future__ import annotations

import math

#: (i, j) -> (log cost_j / cost_i, weight)
Pairs = dict[tuple[int, int], tuple[float, float]]


def prior_curve(k_max: int, slope: float) -> list[float]:
    """``log(1 + slope * k)``: what a step of k drafts costs before any is compared."""
    return [math.log1p(slope * k) for k in range(k_max + 1)]


def break_even(i: int, j: int) -> float:
    """log((1 + j) / (1 + i)): the cost ratio at which j drafts, all accepted, commit
    tokens at i's rate."""
    return math.log((1 + j) / (1 + i))


def fit(
    pairs: Pairs,
    prior: list[float],
    spreads: tuple[float, float, float],
    fixed: dict[int, float] | None = None,
) -> list[float]:
    """Log costs for k = 0..len(prior)-1 (before the bounds; see the module docstring).
    ``spreads``: how far (log) a step's increment, the step from k = 0 and a bend may
    stray from the prior's; ``fixed``: nodes held at these values (the others are
    fitted around them)."""
    n = len(prior)
    a = [[0.0] * n for _ in range(n)]
    r = [0.0] * n

    def term(coef: dict[int, float], target: float, w: float) -> None:
        for i, ci in coef.items():
            r[i] += w * ci * target
            for j, cj in coef.items():
                a[i][j] += w * ci * cj

    for (i, j), (d, w) in pairs.items():
        term({j: 1.0, i: -1.0}, d, w)
    lam, lam0, lam2 = (x**-2 for x in spreads)
    dp = [prior[k + 1] - prior[k] for k in range(n - 1)]
    for k in range(n - 1):
        term({k + 1: 1.0, k: -1.0}, dp[k], lam0 if k == 0 else lam)
    compared = {k for p in pairs for k in p}
    for k in range(1, n - 2):  # the bend, from k = 1 on (k = 0 adds the round's fixed cost)
        w = lam if {k, k + 1, k + 2} <= compared else lam2
        term({k + 2: 1.0, k + 1: -2.0, k: 1.0}, dp[k + 1] - dp[k], w)
    for k in range(n):  # a faint pull to the prior fixes the level (only ratios matter)
        term({k: 1.0}, prior[k], 1e-6)
    for k, v in (fixed or {}).items():
        term({k: 1.0}, v, 1e12)
    return _solve(a, r)


def bound(y: list[float], weights: list[float]) -> list[float]:
    """``y`` moved (least squares, ``weights`` per k) onto non-decreasing steps of at
    most ``log((k + 2) / (k + 1))``: alternate projections on each of the two
    monotone constraints until both hold."""
    x = list(y)
    logs = [math.log(1 + k) for k in range(len(x))]
    for _ in range(20):
        x = _isotonic(x, weights)
        u = _isotonic([logs[k] - v for k, v in enumerate(x)], weights)  # non-increasing
        x = [logs[k] - v for k, v in enumerate(u)]
        if all(-1e-9 <= x[k + 1] - x[k] <= logs[k + 1] - logs[k] + 1e-9 for k in range(len(x) - 1)):
            break
    return x


def _isotonic(y: list[float], w: list[float]) -> list[float]:
    """Weighted non-decreasing least-squares fit (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [mean, weight, length]
    for v, wv in zip(y, w, strict=True):
        blocks.append([v, wv, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, w2, n2 = blocks.pop()
            m1, w1, n1 = blocks.pop()
            ww = w1 + w2
            blocks.append([(m1 * w1 + m2 * w2) / ww, ww, n1 + n2])
    out: list[float] = []
    for m, _, length in blocks:
        out.extend([m] * int(length))
    return out


def _solve(a: list[list[float]], r: list[float]) -> list[float]:
    """``a x = r`` for a small symmetric positive definite ``a`` (Gaussian elimination)."""
    n = len(r)
    m = [row[:] + [r[i]] for i, row in enumerate(a)]
    for c in range(n):
        p = max(range(c, n), key=lambda i: abs(m[i][c]))
        m[c], m[p] = m[p], m[c]
        piv = m[c][c]
        for i in range(c + 1, n):
            f = m[i][c] / piv
            if f:
                row, top = m[i], m[c]
                for j in range(c, n + 1):
                    row[j] -= f * top[j]
    x = [0.0] * n
    for i in range(n - 1, -1, -1):
        x[i] = (m[i][n] - sum(m[i][j] * x[j] for j in range(i + 1, n))) / m[i][i]
    return x
