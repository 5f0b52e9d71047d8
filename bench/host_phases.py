"""Where the host's time goes in an in-process engine's step loop.

With async scheduling the host prepares step N+1 while the device runs step N, so a
step costs the larger of the two. At high concurrency the host can be the larger: a
step then takes longer than its kernels (``trace``'s ``gpu_ms_per_step``), and no kernel
work shortens it. ``HostPhases`` times the loop's phases (scheduling, input preparation
and launches, the wait for the device's output, the scheduler's update, output
processing) so that a row says which one sets the pace; ``profile_run`` names the
Python functions inside them.
"""

from __future__ import annotations

import cProfile
import pstats
import time
from collections.abc import Callable
from typing import Any

#: (phase, object path from the engine, attribute): the step loop of vLLM's in-process
#: engine. ``llm_step`` holds all the others; what it has beyond their sum is the loop's
#: own glue. ``get_output`` is the wait for the device's sampled tokens plus their
#: conversion to lists (Model Runner V2's async output).
PHASES: tuple[tuple[str, str, str], ...] = (
    ("llm_step", "llm_engine", "step"),
    ("schedule", "scheduler", "schedule"),
    ("execute_model", "executor", "execute_model"),
    ("sample_tokens", "executor", "sample_tokens"),
    ("get_output", "async_output_future", "result"),
    ("update_from_output", "scheduler", "update_from_output"),
    ("post_step", "core", "post_step"),
    ("process_outputs", "output_processor", "process_outputs"),
)


class HostPhases:
    """Seconds spent in each wrapped callable, summed over calls."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def wrap(self, owner: Any, attr: str, phase: str) -> None:
        """Time ``owner.attr`` (an instance's method, or a class's function: every
        instance then counts) under ``phase``."""
        original: Callable[..., Any] = getattr(owner, attr)
        self.seconds.setdefault(phase, 0.0)

        def timed(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[phase] += time.perf_counter() - t

        setattr(owner, attr, timed)

    def snapshot(self) -> dict[str, float]:
        return dict(self.seconds)


def ms_per_step(before: dict[str, float], after: dict[str, float], steps: int) -> dict[str, float]:
    """Milliseconds per engine step in each phase between two snapshots, plus ``other``:
    the part of ``llm_step`` outside every other phase."""
    steps = max(steps, 1)
    out = {p: round(1000 * (after[p] - before.get(p, 0.0)) / steps, 3) for p in after}
    if "llm_step" in out:
        inner = sum(v for p, v in out.items() if p != "llm_step")
        out["other"] = round(out["llm_step"] - inner, 3)
    return out


def profile_run(run: Callable[[], Any], steps: Callable[[], int], top: int = 15) -> list[Any]:
    """Run ``run`` under cProfile; the ``top`` functions by own time, as
    [function, own ms per step, cumulative ms per step, calls per step]. cProfile slows
    Python several-fold, so read the shares, not the sums."""
    s0 = steps()
    prof = cProfile.Profile()
    prof.enable()
    try:
        run()
    finally:
        prof.disable()
    n = max(steps() - s0, 1)
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    ranked = sorted(stats.items(), key=lambda kv: kv[1][2], reverse=True)[:top]
    return [
        [
            f"{_short(path)}:{line}({name})",
            round(1000 * tt / n, 3),
            round(1000 * ct / n, 3),
            round(calls / n, 1),
        ]
        for (path, line, name), (_, calls, tt, ct, _) in ranked
    ]


def _short(path: str) -> str:
    """A source path from its package root (``vllm/...``), or as it is."""
    for root in ("/vllm/", "/vllm_frozen_kv_mtp/", "/bench/", "/torch/"):
        i = path.rfind(root)
        if i >= 0:
            return path[i + 1 :]
    return path


def host_table(rows: list[dict[str, Any]]) -> str:
    """Markdown: each row's step time, its kernel time where traced, and its host ms per
    step by phase; empty where no row carries ``host_ms_per_step``."""
    rows = [r for r in rows if r.get("host_ms_per_step")]
    if not rows:
        return ""
    phases = [p for p, _, _ in PHASES if p != "llm_step"] + ["other"]
    out = [
        "| model | c | profile | method | k | step ms | kernels ms | " + " | ".join(phases) + " |",
        "|" + "---|" * (7 + len(phases)),
    ]
    for r in sorted(rows, key=lambda r: (r["model"], r["concurrency"], r["profile"], r["method"])):
        host = r["host_ms_per_step"]
        kernels = (r.get("trace") or {}).get("gpu_ms_per_step", "-")
        cells = [f"{host[p]:.2f}" if p in host else "-" for p in phases]
        out.append(
            f"| {r['model']} | {r['concurrency']} | {r['profile']} | {r['method']} | {r['k']} | "
            f"{r['step_ms']:.2f} | {kernels} | " + " | ".join(cells) + " |"
        )
    return "\n".join(out)
