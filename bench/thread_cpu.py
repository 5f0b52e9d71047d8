"""CPU time of each thread of this process, and its wait for a core, over a timed run.

A host-bound step (high concurrency) is Python on one thread. When the same work takes
longer in one run than in another, these say why: the main thread got less CPU time
than its wall time (it waited: for a core, ``runq``, or for the GIL held by another
thread of the process, which then shows CPU time of its own), or it got as much CPU
time as its wall time and the work itself ran slower (a slower core or colder caches).

Linux only: from ``/proc/self/task/*/schedstat`` (nanoseconds: on a core, waiting for
one) and ``comm``; elsewhere, or where the kernel lacks schedstat, nothing is reported.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from pathlib import Path

#: per thread id: (name, ns on a core, ns runnable but waiting for a core)
Snapshot = dict[int, tuple[str, int, int]]

TASKS = Path("/proc/self/task")


def snapshot() -> Snapshot:
    out: Snapshot = {}
    try:
        tids = os.listdir(TASKS)
    except OSError:
        return out
    for tid in tids:
        try:
            on_cpu, runq, _ = (TASKS / tid / "schedstat").read_text().split()
            name = (TASKS / tid / "comm").read_text().strip()
        except (OSError, ValueError):
            continue  # the thread ended, or no schedstat
        out[int(tid)] = (name, int(on_cpu), int(runq))
    return out


def delta(before: Snapshot, main_tid: int | None = None) -> Counter[str]:
    """Nanoseconds since ``before``: ``main.cpu`` and ``main.runq`` for the main thread,
        and every other thread's CPU summed by name. A thread that ended in between is not
    counted (the engine's threads live as long as it does). Counters of runs add up."""
    out: Counter[str] = Counter()
    after = snapshot()
    if not after or not before:
        return out
    main_tid = threading.main_thread().native_id if main_tid is None else main_tid
    for tid, (name, on_cpu, runq) in after.items():
        _, cpu0, runq0 = before.get(tid, (name, 0, 0))
        if tid == main_tid:
            out["main.cpu"] += on_cpu - cpu0
            out["main.runq"] += runq - runq0
        else:
            out[name] += on_cpu - cpu0
    return out


def ms_per_step(total: Counter[str], steps: int) -> dict[str, object]:
    """A row's ``thread_cpu_ms_per_step``: the main thread's CPU and run-queue wait, and
    the other threads' CPU by name, busiest first (under 0.01 ms left out); {} without
    data."""
    if not total:
        return {}
    per = max(steps, 1) * 1e6
    others = sorted(
        ((k, v) for k, v in total.items() if not k.startswith("main.")), key=lambda kv: -kv[1]
    )
    return {
        "main_cpu": round(total["main.cpu"] / per, 3),
        "main_runq": round(total["main.runq"] / per, 3),
        "others": {k: round(v / per, 3) for k, v in others if v / per >= 0.01},
    }
