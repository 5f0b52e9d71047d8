"""The drafter's counters of a running server, read from outside it.

A ``vllm serve`` process keeps the drafter (and its :class:`~vllm_frozen_kv_mtp.drafters.stats.
DraftStats`: rounds per k, steps at k = 0, rounds without their CUDA graph) in its engine
core, and logs them once a minute as text (and at exit, which a killed engine core never
reaches). The GPU fuzz and the soak need them as numbers while the server runs, so the
server gets one more general plugin (a metadata-only distribution, see
:func:`probe_dist`): :func:`start` runs in every vLLM
process and, when ``FROZEN_KV_MTP_STATS_DIR`` is set, starts a daemon thread that appends
the process's live counters to ``<dir>/<pid>.jsonl`` every few seconds. It only reads;
no vLLM object is touched. :func:`read_stats` sums the newest line of each file.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

ENV_DIR = "FROZEN_KV_MTP_STATS_DIR"
ENV_INTERVAL = "FROZEN_KV_MTP_STATS_INTERVAL_S"
GROUP = "vllm.general_plugins"
ENTRY_POINT = "devkit.serving.fuzz.probe:start"
#: DraftStats fields summed across drafters (rounds_by_k is summed per k)
COUNTERS = ("rounds", "skipped_rounds", "graph_misses", "sampled_rounds", "seed_rows")

_started_pid: int | None = None


def probe_dist(directory: Path) -> Path:
    """Write a metadata-only distribution declaring :func:`start` as a general plugin;
    put ``directory`` on the server's ``PYTHONPATH``."""
    from devkit.dist_info import entry_point_dist

    return entry_point_dist(
        directory, "frozen-kv-mtp-stats-probe", GROUP, "frozen_kv_mtp_stats_probe", ENTRY_POINT
    )


def snapshot() -> list[dict[str, Any]]:
    """The live drafters' counters in this process (empty where none was built)."""
    from vllm_frozen_kv_mtp.drafters import stats as frozen_kv

    out = []
    # the same weak references the exit log walks: one per drafter built in this process
    for ref in list(frozen_kv._exit_stats):
        stats = ref()
        if stats is None:
            continue
        for _ in range(3):  # the engine thread may add a k while we copy
            try:
                d = {f: getattr(stats, f) for f in COUNTERS}
                d["rounds_by_k"] = {str(k): v for k, v in dict(stats.rounds_by_k).items()}
                out.append(d)
                break
            except RuntimeError:
                continue
    return out


def _loop(directory: Path, interval_s: float) -> None:
    path = directory / f"{os.getpid()}.jsonl"
    while True:
        time.sleep(interval_s)
        try:
            drafters = snapshot()
        except Exception:  # noqa: BLE001 - a probe must never take a server down
            continue
        if drafters:
            line = json.dumps({"t": time.time(), "pid": os.getpid(), "drafters": drafters})
            with open(path, "a") as f:
                f.write(line + "\n")


def _start_thread() -> None:
    global _started_pid
    directory = os.environ.get(ENV_DIR)
    if not directory or _started_pid == os.getpid():
        return
    _started_pid = os.getpid()
    interval = float(os.environ.get(ENV_INTERVAL, "5"))
    Path(directory).mkdir(parents=True, exist_ok=True)
    threading.Thread(
        target=_loop, args=(Path(directory), interval), name="frozen-kv-mtp-stats", daemon=True
    ).start()


def start() -> None:
    """General-plugin entry point: a no-op unless ``FROZEN_KV_MTP_STATS_DIR`` is set. A
    forked engine core inherits vLLM's "plugins loaded" flag but not threads, hence the
    fork hook."""
    if not os.environ.get(ENV_DIR):
        return
    _start_thread()
    os.register_at_fork(after_in_child=_start_thread)


def read_stats(directory: Path) -> dict[str, Any]:
    """Counters summed over every process's newest line; ``rounds_by_k`` includes k = 0
    (the steps that skipped the draft round). Empty before the first line."""
    total: dict[str, Any] = {f: 0 for f in COUNTERS}
    by_k: dict[int, int] = {}
    seen = False
    for path in sorted(Path(directory).glob("*.jsonl")):
        last = _last_line(path)
        if last is None:
            continue
        seen = True
        for d in last["drafters"]:
            for f in COUNTERS:
                total[f] += int(d.get(f, 0))
            for k, v in d.get("rounds_by_k", {}).items():
                by_k[int(k)] = by_k.get(int(k), 0) + int(v)
    if not seen:
        return {}
    if total["skipped_rounds"]:
        by_k[0] = by_k.get(0, 0) + total["skipped_rounds"]
    total["rounds_by_k"] = dict(sorted(by_k.items()))
    return total


def _last_line(path: Path) -> dict[str, Any] | None:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            data: dict[str, Any] = json.loads(line)
            return data
        except ValueError:
            continue  # a line being written
    return None
