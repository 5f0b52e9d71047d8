"""CUDA-graph timing shared by the kernel benchmarks."""

from __future__ import annotations

import statistics
from typing import Any


def time_graph(fn: Any, h: Any, replays: int) -> tuple[float, Any]:
    """Median microseconds per replay of a graph holding one ``fn(h)``, and its output."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):  # warm-up: Triton JIT, cuBLAS handles
            fn(h)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(h)
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(1000 * start.elapsed_time(end) / replays)
    return statistics.median(times), out.clone()
