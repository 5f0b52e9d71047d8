"""``python -m bench.gpu report``: the tables BENCHMARKS.md quotes are computed from the
stored rows as documented (overheads against none, ratios against mtp, modelled
speedups, GPU idle time per step). Pure logic: the rows are written here. Also the
GPU benches' argument checks, which must refuse bad input before any GPU work."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from bench.gpu import parse_method, report, ttft_host_timing
from bench.micro.attn_gpu import recommend
from bench.micro.heads_gpu import launch_shapes


def _row(method: str, step_ms: float, kernel_ms: float, draft: float | None = None) -> Any:
    return {
        "run": "T",
        "model": "E4B",
        "method": method,
        "runner": "v2",
        "concurrency": 32,
        "prompt_len": 128,
        "step_ms": step_ms,
        "draft_round_ms": draft,
        "decode_tok_s": None,
        "ttft_ms": None,
        "draft_host_ms": None if draft is None else 0.2,
        "profile": {"kernel_ms": kernel_ms},
    }


def _cells(text: str, first: str) -> list[list[str]]:
    return [
        [c.strip() for c in line.strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith(f"| {first} |")
    ]


def test_report_overheads_ratios_speedups_and_gpu_idle() -> None:
    rows = [
        _row("none", 5.0, 4.5),
        _row("mtp", 7.0, 6.1, 1.2),
        _row("frozen_kv_mtp", 6.5, 5.7, 0.8),
        _row("frozen_kv_mtp:centroid_head=dense", 6.0, 5.5, 0.7),
    ]
    text = report(rows)
    main, variant, *kernel_rows = _cells(text, "T")
    # none, mtp, frozen ms/step; overheads; frozen/mtp; draft ms; AL x none / frozen
    assert main[4:] == [
        "5.00", "7.00", "6.50", "+2.00", "+1.50", "0.75", "1.20", "0.80", "2.15", "2.69"
    ]  # fmt: skip
    assert variant[3] == "frozen_kv_mtp:centroid_head=dense"
    assert variant[4:] == ["32", "6.00", "+1.00", "0.50", "0.70"]
    by_method = {r[3]: r for r in kernel_rows}
    # kernel overhead vs none's kernel sum, its ratio to mtp's, GPU idle = timed - kernel
    assert by_method["frozen_kv_mtp"][5:] == ["6.50", "5.70", "+1.20", "0.75", "0.80", "0.20"]
    assert by_method["none"][5:] == ["5.00", "4.50", "-", "-", "0.50", "-"]


def test_report_sets_a_methods_kernels_against_nones() -> None:
    """The kernel-difference table: per method, the kernels whose time per step moved
    most from none's, with launch counts; a kernel absent from one list counts as 0,
    and rows in the old 15-kernel format (no launch counts) stay out of it."""
    none, frozen = _row("none", 5.0, 4.5), _row("frozen_kv_mtp", 6.5, 5.7, 0.8)
    none["profile"]["top_kernels"] = [["gemm_a", 2.0, 10], ["lm_head", 0.5, 1], ["tanh", 0.1, 1]]
    frozen["profile"]["top_kernels"] = [
        ["gemm_a", 2.1, 10], ["lm_head", 1.4, 1], ["tanh", 0.4, 1], ["draft_attn", 0.3, 12]
    ]  # fmt: skip
    text = report([none, frozen])
    diffs = [r for r in _cells(text, "T") if len(r) == 10]
    assert [r[5] for r in diffs] == ["`lm_head`", "`tanh`", "`draft_attn`", "`gemm_a`"]
    assert diffs[0][6:] == ["0.500", "1.400", "+0.900", "1 / 1"]
    assert diffs[2][6:] == ["0.000", "0.300", "+0.300", "0 / 12"]
    old = _row("frozen_kv_mtp", 6.5, 5.7, 0.8)
    old["profile"]["top_kernels"] = [["lm_head", 1.4]]
    assert "Where a method's extra kernel time" not in report([none, old])


def test_profile_summary_keeps_time_and_launches_per_step() -> None:
    """``gpu_profile.summarize``: kernel ms and launches per unit, ranked by time; CUDA
    runtime calls apart; the kernel sum covers kernels past the kept top list too."""
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    from bench.micro.gpu_profile import summarize

    def ev(key: str, dev: Any, us: float, count: int) -> Any:
        return SimpleNamespace(
            key=key, device_type=dev, self_device_time_total=us, count=count, cpu_time_total=us
        )

    events = [
        ev("small", DeviceType.CUDA, 400.0, 8),
        ev("big", DeviceType.CUDA, 4000.0, 4),
        ev("tiny", DeviceType.CUDA, 40.0, 4),
        ev("cudaGraphLaunch", DeviceType.CPU, 200.0, 4),
        ev("aten::mm", DeviceType.CPU, 999.0, 4),
    ]
    prof = SimpleNamespace(key_averages=lambda: events)
    out = summarize(prof, units=4, top=2)
    assert out["top_kernels"] == [["big", 1.0, 1.0], ["small", 0.1, 2.0]]
    assert out["kernel_ms"] == 1.11 and out["kernels"] == 4.0
    assert out["runtime_ms"] == [["cudaGraphLaunch", 0.05]]


def test_heads_sweep_shapes_are_parsed_or_refused_early() -> None:
    assert launch_shapes("64x4,128x8:torch") == [(64, 4, "triton"), (128, 8, "torch")]
    assert launch_shapes("") == []
    for bad in ("64", "48x4", "64x32", "ax4", "64x4x2", "64x4:cub"):
        with pytest.raises(argparse.ArgumentTypeError, match=bad):
            launch_shapes(bad)


def test_method_options_convert_integers_and_booleans() -> None:
    spec = parse_method(
        "frozen_kv_mtp:centroid_head=fused/kv_guard=false/sliding_split_kv_max_rows=-1"
    )
    assert spec.name == "frozen_kv_mtp" and spec.k is None
    assert spec.options == {
        "centroid_head": "fused",
        "kv_guard": False,
        "sliding_split_kv_max_rows": -1,
    }
    assert parse_method("frozen_kv_mtp:sliding_split_kv_max_rows=8").options == {
        "sliding_split_kv_max_rows": 8
    }
    with pytest.raises(SystemExit, match="unknown method"):
        parse_method("eagle9")


def test_attention_recommendation_is_the_largest_batch_where_split_kv_wins() -> None:
    def row(rows: int, split: float, single: float, layer: str = "sliding", ctx: int = 512) -> Any:
        return {"layer": layer, "context": ctx, "rows": rows, "split_us": split} | {
            "single_us": single
        }

    rows = [
        row(1, 5.0, 20.0),
        row(8, 6.0, 9.0),
        row(32, 9.9, 10.0),  # within the 2% margin: not a win
        row(128, 30.0, 20.0),
        row(64, 1.0, 50.0, layer="full"),  # other layers and contexts do not count
        row(64, 1.0, 50.0, ctx=256),
    ]
    assert recommend(rows) == 8
    assert recommend([row(1, 9.0, 5.0)]) == 0


def test_ttft_host_timing_takes_each_samples_first_propose() -> None:
    # Three TTFT samples submitted at t=10, 20 and 30 s; the second made no draft call,
    # the third made two (the first counts); a call outside every window is ignored.
    timer = argparse.Namespace(
        enter_s=[5.0, 10.004, 30.002, 30.05], host_s=[9.0, 0.0003, 0.0005, 0.7]
    )
    got = ttft_host_timing([10.0, 20.0, 30.0], [0.1, 0.1, 0.1], timer)  # type: ignore[arg-type]
    assert got == {"ttft_propose_at_ms": 3.0, "ttft_propose_host_ms": 0.4}
    assert ttft_host_timing([1.0], [0.1], timer) == {}  # type: ignore[arg-type]


def test_report_lists_the_first_draft_calls_host_side() -> None:
    def ttft_row(method: str, ttft: float, at: float | None, held: float | None) -> Any:
        r = {**_row(method, 0.0, 0.0), "step_ms": None, "prompt_len": 1024, "ttft_ms": ttft}
        r.pop("profile", None)
        if at is not None:
            r.update(ttft_propose_at_ms=at, ttft_propose_host_ms=held)
        return r

    text = report(
        [
            ttft_row("none", 108.6, None, None),
            ttft_row("mtp", 109.6, 2.5, 0.3),
            ttft_row("frozen_kv_mtp", 112.5, 2.4, 3.1),
        ]
    )
    host_rows = [r for r in _cells(text, "T") if len(r) == 8]
    assert [r[4:] for r in host_rows] == [
        ["mtp", "109.60", "2.50", "0.30"],
        ["frozen_kv_mtp", "112.50", "2.40", "3.10"],
    ]
