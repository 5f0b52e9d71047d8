"""Rough wall time of a GPU plan, from the calls ``tools/remote_gpu_session.sh dry`` lists.

A rented GPU host is often held for a fixed time, and a plan that runs past it loses
what it has not packed yet. ``dry`` prints this estimate after the steps:

    E4B=0 TESTS=v2 ... bash tools/remote_gpu_session.sh dry   # ends with "estimated: ..."
    python -m tools.plan_estimate dry.log                      # or on a saved call list

The costs are fitted to measured plans on a one-GPU H200 (16 cores), so they are rough:
one with attention sweeps at 31B and E4B, the dense head, 5 V2 tests and 4 31B methods
at 3 concurrencies with the 1k TTFT took 1525 s; one with the E4B sweep, 1 V2 test, 4 E4B
methods at 2 concurrencies with the 1k TTFT and a graph-mode profile took 1371 s. An
engine load (compile, CUDA graphs, dummy weights) is most of a bench method's time, at
E4B and 31B alike. Starting the host and setting it up add a few minutes more.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

#: seconds: one bench method (engine load and warm-up), each concurrency, each TTFT
#: length (8k: 5 prompts of 8192 tokens), each profiled point
METHOD_S, CONCURRENCY_S, TTFT_S, TTFT_8K_S, PROFILE_AT_S = 180, 8, 10, 40, 5
#: the attention sweep per drafter shape; the steps of a fixed cost: the dense head, the
#: centroid heads, a kernel profile of one draft round (profile_draft_gpu.py: its own
#: engine)
ATTN_S = {"31B": 257, "E4B": 135}
FIXED_S = {"dense": 45, "verify head": 40, "logits gemm": 30, "heads": 40, "profile": 200}
#: GPU tests: pytest start-up, then each selected test (two or three engines each)
TESTS_BASE_S, TEST_S = 60, 35
#: bench.gpu's defaults when a flag is absent
DEFAULT_CONCURRENCY, DEFAULT_TTFT = "1,8,32,128", "1024,8192"

REPO = Path(__file__).resolve().parents[1]


def _flag(line: str, name: str, default: str = "") -> str:
    m = re.search(rf"{name}[ =](\S*)", line)
    return m.group(1) if m else default


def _count(csv: str) -> int:
    return len([x for x in csv.split(",") if x])


def count_gpu_tests(line: str) -> int:
    """How many GPU tests a logged pytest call selects: pytest's own collection here
    (the tests skip without CUDA, but collect)."""
    args = ["tests/gpu", "--collect-only", "-q", "-p", "no:cacheprovider"]
    m = re.search(r" -k (.+?) --ignore", line)
    if m:
        args += ["-k", m.group(1)]
    if "--ignore=tests/gpu/test_gpu_tp2.py" in line:
        args.append("--ignore=tests/gpu/test_gpu_tp2.py")
    if "test_gpu_tp2.py -q" in line:
        args[0] = "tests/gpu/test_gpu_tp2.py"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if re.search(r"^no tests collected", done.stdout, re.M):  # -k matched none
        return 0
    m = re.search(r"(\d+)(?:/\d+)? tests? collected", done.stdout)
    if m is None:  # e.g. no pytest in this Python: say so rather than estimate 0 tests
        raise RuntimeError(
            f"could not count the GPU tests of {line!r} with {sys.executable} -m pytest: "
            + (done.stdout + done.stderr)[-500:]
        )
    return int(m.group(1))


def step_seconds(line: str, count_tests: Callable[[str], int] = count_gpu_tests) -> float:
    """The estimated seconds of one logged call (0 for the report)."""
    step = step_name(line)
    if step == "attn":
        return ATTN_S.get(_flag(line, "--shape", "E4B"), ATTN_S["31B"])
    if step in FIXED_S:
        return FIXED_S[step]
    if step == "tests":
        return TESTS_BASE_S + TEST_S * count_tests(line)
    if step in ("E4B", "31B", "26B"):
        methods = _count(_flag(line, "--methods", "frozen_kv_mtp,mtp,none"))
        ttft = _flag(line, "--ttft", DEFAULT_TTFT).split(",")
        profiled = _count(_flag(line, "--profile-at")) + _count(_flag(line, "--profile-ttft"))
        per_method = (
            METHOD_S
            + CONCURRENCY_S * _count(_flag(line, "--concurrency", DEFAULT_CONCURRENCY))
            + sum(TTFT_8K_S if int(t) > 4096 else TTFT_S for t in ttft if t)
            + PROFILE_AT_S * profiled
        )
        return methods * per_method
    return 0.0


def estimate(lines: list[str], count_tests: Callable[[str], int] = count_gpu_tests) -> str:
    """'estimated: N s (M min) of plan: step s + ...' for the plan's logged calls."""
    parts = [(line, step_seconds(line, count_tests)) for line in lines if "python" in line]
    total = sum(s for _, s in parts)
    named = " + ".join(f"{step_name(line)} {s:.0f}" for line, s in parts if s)
    return f"estimated: {total:.0f} s ({total / 60:.1f} min) of plan: {named}"


#: (text in a logged call, its step), first match wins; the report matches none
STEPS = (
    ("bench.micro.attn_gpu", "attn"),
    ("bench.micro.dense_head_gpu --hidden", "verify head"),
    ("bench.micro.logits_gemm_gpu", "logits gemm"),
    ("bench.micro.dense_head_gpu", "dense"),
    ("bench.micro.heads_gpu", "heads"),
    ("bench.micro.profile_draft_gpu", "profile"),
    ("pytest", "tests"),
    ("bench.gpu all --models E4B", "E4B"),
    ("bench.gpu all --models 31B", "31B"),
    ("bench.gpu all --models 26B-A4B", "26B"),
)


def step_name(line: str) -> str:
    return next((name for marker, name in STEPS if marker in line), "other")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("calls", help="the call list remote_gpu_session.sh dry writes (one per line)")
    args = ap.parse_args()
    print(estimate(Path(args.calls).read_text().splitlines()))


if __name__ == "__main__":
    main()
