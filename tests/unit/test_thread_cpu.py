"""bench/thread_cpu.py on this process: a busy helper thread shows up by name."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from bench.thread_cpu import delta, ms_per_step, snapshot

pytestmark = pytest.mark.skipif(not snapshot(), reason="no /proc/self/task/*/schedstat")


def _spin(seconds: float, then_wait: threading.Event | None = None) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass
    if then_wait is not None:
        then_wait.wait()


def test_busy_threads_are_counted_by_name_and_the_main_thread_apart() -> None:
    before = snapshot()
    done = threading.Event()
    helper = threading.Thread(target=_spin, args=(0.3, done), name="spinner")
    helper.start()
    _spin(0.5)
    total = delta(before)  # a thread counts while it lives
    done.set()
    helper.join()
    assert total["main.cpu"] >= 0.1e9
    # Python names the native thread after the Thread on Linux from 3.12 only
    helper_ns = max(v for k, v in total.items() if not k.startswith("main."))
    assert helper_ns >= 0.1e9  # it shares the GIL with the main thread
    row = ms_per_step(total, steps=100)
    assert row["main_cpu"] >= 1.0  # 0.1 s over 100 steps
    others = row["others"]
    assert isinstance(others, dict) and max(others.values()) >= 1.0
    if sys.version_info >= (3, 12):
        assert "spinner" in others


def test_nothing_reported_without_data() -> None:
    assert ms_per_step(delta({}), steps=10) == {}
