"""Where a decode step's (or a TTFT request's) time goes, under the real compiled,
CUDA-graph engine: summed GPU kernel time next to wall time, the top kernels, and
the CUDA runtime calls the host waited in (a ``cudaStreamSynchronize`` there is a
host sync). Used by ``bench.gpu --profile-at`` / ``--profile-ttft``.

Kernels launched from CUDA-graph replays are reported by CUPTI like any other, so
the kernel sum of a step is its GPU busy time; wall time well above it means the GPU
waited on the host.
"""

from __future__ import annotations

import time
from typing import Any


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _activities() -> list[Any]:
    import torch

    acts = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    return acts


def summarize(prof: Any, units: float, top: int = 40, top_runtime: int = 15) -> dict[str, Any]:
    """Kernel and runtime-call totals of ``prof``, per ``units`` (steps or requests).
    ``top_kernels`` rows are [name, ms per unit, launches per unit]: long enough (40)
    that ``bench.gpu report`` can set a method's kernels against none's."""
    from torch.autograd import DeviceType

    kernels: dict[str, list[float]] = {}  # name -> [ms, launches]
    runtime: dict[str, float] = {}
    count = 0
    for e in prof.key_averages():
        if e.device_type == DeviceType.CUDA:
            us: Any = getattr(e, "self_device_time_total", None)
            if us is None:
                us = getattr(e, "self_cuda_time_total", 0)
            k = kernels.setdefault(e.key, [0.0, 0.0])
            k[0] += float(us) / 1000
            k[1] += e.count
            count += e.count
        elif e.key.startswith("cuda"):
            runtime[e.key] = runtime.get(e.key, 0.0) + float(e.cpu_time_total) / 1000
    n = max(units, 1e-9)
    ranked_kernels = sorted(kernels.items(), key=lambda kv: -kv[1][0])[:top]
    return {
        "units": units,
        "kernel_ms": round(sum(ms for ms, _ in kernels.values()) / n, 3),
        "kernels": round(count / n, 1),
        "top_kernels": [
            [name[:90], round(ms / n, 4), round(calls / n, 2)]
            for name, (ms, calls) in ranked_kernels
        ],
        "runtime_ms": [
            [name[:90], round(ms / n, 4)]
            for name, ms in sorted(runtime.items(), key=lambda kv: -kv[1])[:top_runtime]
        ],
    }


class StepCounter:
    """Counts engine steps (``LLMEngine.step`` calls), e.g. per 1-token request, and runs
    ``hooks`` with the step's index before each step. The one wrapper of ``step``."""

    def __init__(self, llm: Any) -> None:
        self.calls = 0
        self.hooks: list[Any] = []
        engine = llm.llm_engine
        original = engine.step

        def step(*args: Any, **kwargs: Any) -> Any:
            for hook in self.hooks:
                hook(self.calls)
            self.calls += 1
            return original(*args, **kwargs)

        engine.step = step


class StepWindowProfiler:
    """Profiles engine steps ``[start, start + steps)`` of the next ``generate``: the
    decode steps of a batch, without its prefill. Hooks into a ``StepCounter``."""

    def __init__(self, counter: StepCounter) -> None:
        self.counter = counter
        self.armed: tuple[int, int] | None = None
        self.result: dict[str, Any] | None = None
        self._prof: Any = None
        self._t0 = 0.0
        counter.hooks.append(self._before)

    def arm(self, start: int, steps: int) -> None:
        """``start`` counts from the next step."""
        base = self.counter.calls + start
        self.armed, self.result = (base, base + steps), None

    def _before(self, n: int) -> None:
        if self.armed is None:
            return
        import torch

        start, stop = self.armed
        if n == start:
            _sync()
            self._prof = torch.profiler.profile(activities=_activities())
            self._prof.start()
            self._t0 = time.perf_counter()
        elif n == stop:
            _sync()
            wall = time.perf_counter() - self._t0
            self._prof.stop()
            self.result = summarize(self._prof, stop - start)
            self.result["wall_ms"] = round(1000 * wall / (stop - start), 3)
            self.armed, self._prof = None, None


def profile_call(fn: Any, units: float = 1) -> dict[str, Any]:
    """Profile one call (e.g. a whole 1-token request) end to end."""
    import torch

    _sync()
    with torch.profiler.profile(activities=_activities()) as prof:
        t0 = time.perf_counter()
        fn()
        _sync()
        wall = time.perf_counter() - t0
    out = summarize(prof, units)
    out["wall_ms"] = round(1000 * wall / units, 3)
    return out
