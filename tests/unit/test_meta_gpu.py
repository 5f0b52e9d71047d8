"""The SGLang preflight's faked GPU (tools/offline_gpu/sglang/meta_gpu.py) and the op layer
of its stub kernels (stub_kernels._MetaOps), on the CPU torch: where "CUDA" tensors land,
what is counted as GPU memory, and which failing ops are stood in for."""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "offline_gpu" / "sglang"))
from meta_gpu import BIG, START_FREE, MetaGPU  # noqa: E402
from stub_kernels import _MetaOps  # noqa: E402


def test_big_cuda_tensors_are_meta_and_counted_small_ones_keep_values_on_the_cpu() -> None:
    with MetaGPU() as gpu:
        big = torch.empty(BIG // 2, dtype=torch.bfloat16, device="cuda")
        small = torch.zeros(4, dtype=torch.int64, device="cuda:0")
        table = torch.tensor([3, 5], device=torch.device("cuda"))
        with torch.device("cuda"):
            weight = torch.nn.Parameter(torch.empty(BIG // 4, dtype=torch.float32))
        assert big.is_meta and weight.is_meta
        assert small.device.type == "cpu" and table.tolist() == [3, 5]
        # a meta tensor passes for a CUDA one; a CPU one does not
        assert big.is_cuda and big.device == torch.device("cuda", 0)
        assert not small.is_cuda
        assert gpu.used == 2 * BIG + 4 * 8 + 2 * 8
        free, total = torch.cuda.mem_get_info()
        assert free == START_FREE - gpu.used and total == 80 << 30
        # counted by storage: the Parameter keeps its bytes, a freed tensor gives them back
        del big
        gc.collect()
        assert gpu.used == BIG + 48
        # .cuda() / .to("cuda") leave a tensor where it is (values stay readable)
        assert table.cuda() is table and table.to("cuda").tolist() == [3, 5]
        assert torch.cuda.memory_allocated() == gpu.used


def test_streams_events_and_graphs_are_stand_ins() -> None:
    with MetaGPU():
        s = torch.cuda.Stream()
        e = torch.cuda.Event(enable_timing=True)
        e.record(s)
        s.wait_event(e)
        assert e.query() and e.elapsed_time(e) == 0.0
        with torch.cuda.graph(torch.cuda.CUDAGraph(), pool=torch.cuda.graph_pool_handle()):
            pass
        torch.cuda.synchronize()


def test_ops_mixing_cpu_and_meta_run_on_meta_and_copies_into_cpu_are_skipped() -> None:
    seen: set[str] = set()
    cpu = torch.ones(3)
    meta = torch.empty(3, device="meta")
    with _MetaOps(seen):
        out = meta * cpu
        assert out.is_meta and out.shape == (3,)
        cpu.copy_(meta)
    assert cpu.tolist() == [1.0, 1.0, 1.0] and not seen


_LIB = torch.library.Library("metagpu_test", "DEF")
_LIB.define("fill_out(Tensor(a!) out, Tensor x) -> ()")
_LIB.define("make(Tensor x) -> Tensor")
_LIB.impl("fill_out", lambda out, x: out.copy_(x), "CPU")
_LIB.impl("make", lambda x: x.clone(), "CPU")


def test_a_kernel_without_a_meta_version_is_stood_in_for_if_it_writes_its_outputs() -> None:
    seen: set[str] = set()
    with _MetaOps(seen):
        torch.ops.metagpu_test.fill_out(
            torch.empty(2, device="meta"), torch.empty(2, device="meta")
        )
        assert seen == {"metagpu_test.fill_out.default"}
        # one that returns a new tensor has no shape to stand in with
        with pytest.raises(NotImplementedError, match="returns new tensors"):
            torch.ops.metagpu_test.make(torch.empty(2, device="meta"))


def test_outside_the_context_cuda_is_cuda_again() -> None:
    orig = torch.cuda.mem_get_info
    with MetaGPU():
        assert torch.cuda.mem_get_info is not orig
    assert torch.cuda.mem_get_info is orig
