"""tools/remote_gpu_session.sh's plan, dry: which steps, GPUs and flags each env runs.

GPU time is scarce; a plan that runs the wrong steps wastes it. The
script's ``dry`` command runs the real plan with ``python`` and ``nvidia-smi`` replaced
by shell functions that log their arguments.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "remote_gpu_session.sh"
PLAN_ENV = (
    "E4B",
    "E4B_METHODS",
    "E4B_ARGS",
    "E4B_RUNNERS",
    "TESTS",
    "TESTS_FIRST",
    "V2_TESTS",
    "BENCH_31B",
    "B31_ARGS",
    "HEADS",
    "ATTN",
    "PROFILES",
    "TP2",
    "RUN",
    "LATE_S",
    "B31_METHODS",
    "SESSION_DIR",
    "SESSION_DRY_DIR",
    "PROFILE_MODEL",
    "ATTN_SHAPES",
    "DENSE",
    "VERIFY_HEADS",
    "V1_TESTS",
    "SESSION_ESTIMATE",
)

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def dry_output(**env: str) -> str:
    """``dry``'s whole output under ``env`` (no time estimate unless SESSION_ESTIMATE=1)."""
    base = {k: v for k, v in os.environ.items() if k not in PLAN_ENV}
    return subprocess.run(
        ["bash", str(SCRIPT), "dry"],
        cwd=SCRIPT.parents[1],
        env={**base, "SESSION_ESTIMATE": "0", **env},
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    ).stdout


def dry(**env: str) -> list[str]:
    """The plan's python calls under ``env``, one line each."""
    return [line for line in dry_output(**env).splitlines() if "python" in line]


#: (text in a logged call, step name; "{runner}" = v1 under VLLM_USE_V2_MODEL_RUNNER=0)
STEP_MARKERS = (
    ("bench.micro.heads_gpu", "heads"),
    ("bench.micro.attn_gpu", "attn"),
    ("bench.micro.dense_head_gpu --hidden", "verify head"),
    ("bench.micro.logits_gemm_gpu", "logits gemm"),
    ("bench.micro.dense_head_gpu", "dense"),
    ("--models E4B", "E4B {runner}"),
    ("--models 31B", "31B"),
    ("test_gpu_tp2.py -q", "tp2"),
    ("pytest tests/gpu", "tests {runner}"),
    ("bench.micro.profile_draft_gpu", "profile"),
    (" report ", "report"),
)


def steps(lines: list[str]) -> list[str]:
    """Each logged call as a step name ("E4B v2", "tests v1", "31B", ...)."""
    names = []
    for line in lines:
        runner = "v1" if "v2=0" in line else "v2"
        name = next(n for marker, n in STEP_MARKERS if marker in line)
        names.append(name.format(runner=runner))
    return names


def test_default_one_gpu_runs_everything_in_order() -> None:
    assert steps(dry()) == ["heads", "E4B v2", "tests v2", "tests v1", "31B", "report"]


def test_empty_tests_runs_no_tests() -> None:
    # TESTS="" once fell back to the default ("v2 v1") and ran both suites.
    assert steps(dry(TESTS="", BENCH_31B="0", HEADS="0")) == ["E4B v2", "report"]


def test_tests_first_and_selection() -> None:
    lines = dry(TESTS="v2", TESTS_FIRST="1", V2_TESTS="greedy or centroid", BENCH_31B="0")
    assert steps(lines) == ["heads", "tests v2", "E4B v2", "report"]
    assert "-k greedy or centroid" in lines[1]


def test_31b_only_session() -> None:
    lines = dry(E4B="0", TESTS="", HEADS="0", B31_ARGS="--concurrency 1,32")
    assert steps(lines) == ["31B", "report"]
    assert lines[0].endswith("--concurrency 1,32")


def test_e4b_args_runners_and_profiles() -> None:
    lines = dry(
        TESTS="",
        HEADS="0",
        BENCH_31B="0",
        RUN="a",
        E4B_RUNNERS="v2 v1",
        E4B_ARGS="--profile-at 32,128",
        PROFILES="frozen_kv_mtp@128",
    )
    assert steps(lines) == ["E4B v2", "E4B v1", "profile", "report"]
    assert all("--run a --profile-at 32,128" in line for line in lines[:2])
    assert "--model E4B --method frozen_kv_mtp --concurrency 128" in lines[2]
    lines = dry(E4B="0", TESTS="", HEADS="0", BENCH_31B="0", PROFILES="mtp@32", PROFILE_MODEL="31B")
    assert steps(lines) == ["profile", "report"]
    assert "--model 31B --method mtp --concurrency 32" in lines[0]


@pytest.mark.parametrize(
    ("recommend", "methods"),
    [
        ("32", "none,frozen_kv_mtp,frozen_kv_mtp:sliding_split_kv_max_rows=32"),
        ("64", "none,frozen_kv_mtp"),  # vLLM's own threshold for E4B: the variant is dropped
    ],
)
def test_attn_recommendation_fills_the_method(recommend: str, methods: str) -> None:
    lines = dry(
        ATTN="1",
        SESSION_DRY_ATTN=recommend,
        HEADS="0",
        TESTS="",
        BENCH_31B="0",
        E4B_METHODS="none,frozen_kv_mtp,frozen_kv_mtp:sliding_split_kv_max_rows=@ATTN",
    )
    assert steps(lines) == ["attn", "E4B v2", "report"]
    assert f"--methods {methods} " in lines[1]


def test_attn_shapes_each_get_their_json() -> None:
    lines = dry(ATTN="1", ATTN_SHAPES="E4B 31B", HEADS="0", TESTS="", E4B="0", BENCH_31B="0")
    assert steps(lines) == ["attn", "attn", "report"]
    assert "--shape E4B --json " in lines[0] and lines[0].endswith("/h200_attn.json")
    assert "--shape 31B --json " in lines[1] and lines[1].endswith("/h200_attn_31B.json")


def test_dense_head_step_runs_first() -> None:
    lines = dry(DENSE="1", ATTN="1", HEADS="0", TESTS="", E4B="0")
    assert steps(lines) == ["attn", "dense", "31B", "report"]
    assert lines[1].endswith("/h200_dense_head.json")


def test_verify_heads_time_the_targets_heads_before_the_engines() -> None:
    lines = dry(VERIFY_HEADS="1", DENSE="1", HEADS="0", TESTS="", BENCH_31B="0")
    assert steps(lines) == ["dense", "verify head", "verify head", "E4B v2", "report"]
    assert "--hidden 5376 --rows 32,128 " in lines[1]
    assert lines[1].endswith("/h200_verify_head_31B.json")
    assert "--hidden 2560 --rows 32,128,512 " in lines[2]
    assert lines[2].endswith("/h200_verify_head_E4B.json")


def test_logits_gemm_names_the_targets_logits_kernel_before_the_engines() -> None:
    lines = dry(LOGITS_GEMM="1", VERIFY_HEADS="1", HEADS="0", TESTS="", BENCH_31B="0")
    assert steps(lines) == [
        "verify head", "verify head", "logits gemm", "logits gemm", "E4B v2", "report"
    ]  # fmt: skip
    assert "--hidden 5376 --rows 32,128,512 " in lines[2]
    assert lines[3].endswith("/h200_logits_gemm_E4B.json")


def test_v1_tests_take_a_selection() -> None:
    (line,) = dry(TESTS="v1", V1_TESTS="greedy or sync", E4B="0", BENCH_31B="0", HEADS="0")[:1]
    assert line.startswith("gpu0 v2=0 python -m pytest tests/gpu ")
    assert " -k greedy or sync --ignore=" in line


def test_two_gpus_split_lanes() -> None:
    lines = dry(SESSION_GPUS="2", HEADS="0")
    assert sorted(steps(lines)) == sorted(
        ["E4B v2", "tests v1", "31B", "tests v2", "tp2", "report"]
    )
    by_step = dict(zip(steps(lines), lines, strict=True))
    assert by_step["E4B v2"].startswith("gpu0 ")
    assert by_step["31B"].startswith("gpu1 ")
    assert steps(dry(SESSION_GPUS="2", HEADS="0", TESTS="", TP2="0", BENCH_31B="0")) == [
        "E4B v2",
        "report",
    ]


def test_31b_methods_run_in_the_given_order() -> None:
    lines = dry(E4B="0", TESTS="", HEADS="0", B31_METHODS="none,mtp,frozen_kv_mtp")
    assert steps(lines) == ["31B", "report"]
    assert "--methods none,mtp,frozen_kv_mtp " in lines[0]
    assert "--methods frozen_kv_mtp,mtp,none " in dry(E4B="0", TESTS="", HEADS="0")[0]


def test_reset_lets_a_second_plan_wait_and_keeps_rows(tmp_path: Path) -> None:
    # A 31B plan, then an E4B plan on the same warm machine. The first plan's
    # DONE made `wait` return at once, and its 31B log was overwritten by "skipped".
    (tmp_path / "DONE").write_text("plan done after 785 s\n")
    (tmp_path / "t0").write_text("0\n")
    (tmp_path / "h200_31B.jsonl").write_text('{"model": "31B"}\n')
    (tmp_path / "bench_31B.log").write_text("31B engine log\n")
    env = {k: v for k, v in os.environ.items() if k not in PLAN_ENV}
    subprocess.run(
        ["bash", str(SCRIPT), "reset"],
        cwd=SCRIPT.parents[1],
        env={**env, "SESSION_DIR": str(tmp_path)},
        check=True,
        timeout=30,
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench_31B.log", "h200_31B.jsonl"]
    # The E4B plan skips 31B: the 31B log stays; a skipped step without a log gets one.
    lines = dry(BENCH_31B="0", TESTS="", HEADS="0", SESSION_DRY_DIR=str(tmp_path))
    assert steps(lines) == ["E4B v2", "report"]
    assert (tmp_path / "bench_31B.log").read_text() == "31B engine log\n"
    dry(E4B="0", BENCH_31B="0", TESTS="", HEADS="0", SESSION_DRY_DIR=str(tmp_path))
    assert (tmp_path / "bench_E4B.log").read_text() == "skipped\n"


@pytest.mark.parametrize(
    ("env", "measured_s"),
    [
        (  # run K31: "plan done after 1525 s"
            dict(E4B="0", TESTS="v2", TESTS_FIRST="1", V2_TESTS="split or dense", HEADS="0",
                 ATTN="1", ATTN_SHAPES="31B E4B", DENSE="1", LATE_S="3000",
                 B31_METHODS="none,mtp,frozen_kv_mtp:draft_attention=split/dense_head=fp8,frozen_kv_mtp",
                 B31_ARGS="--concurrency 1,8,32 --ttft 1024 --profile-at 32 --profile-ttft 1024"),
            1525,
        ),
        (dict(E4B="0", TESTS="", HEADS="0"), 785),  # run I31: "plan done after 785 s"
        (  # run L31: "plan done after 1225 s"
            dict(E4B="0", TESTS="v2", TESTS_FIRST="1", V2_TESTS="split or fp8", HEADS="0",
                 DENSE="1", LATE_S="3000",
                 B31_METHODS="none,mtp,frozen_kv_mtp:draft_attention=split/dense_head=fused,frozen_kv_mtp",
                 B31_ARGS="--concurrency 1,8,32 --ttft 1024 --profile-at 32"),
            1225,
        ),
        (  # run L1: "plan done after 234 s" (its 5 tests; "greedy_identical" alone now
            # also selects the later test_hub_architecture_target_greedy_identical)
            dict(TESTS="v1", E4B="0", BENCH_31B="0", HEADS="0",
                 V1_TESTS="greedy_identical_async or no_host_sync or drafter_uses_target_scales"),
            234,
        ),
    ],
)  # fmt: skip
def test_dry_estimates_measured_plans(env: dict[str, str], measured_s: int) -> None:
    """``dry`` ends with the plan's estimated wall time, within 10% of what the same
    plan took on the H200."""
    last = dry_output(SESSION_ESTIMATE="1", **env).splitlines()[-1]
    assert last.startswith("estimated: "), last
    estimated = int(last.split()[1])
    assert abs(estimated - measured_s) <= 0.1 * measured_s, (estimated, measured_s, last)


def test_plan_estimate_counts_each_step() -> None:
    from tools.plan_estimate import METHOD_S, TEST_S, TESTS_BASE_S, count_gpu_tests, step_seconds

    bench = "python -m bench.gpu all --models 31B --methods none,mtp --concurrency 1,32"
    bench += " --ttft 1024"
    one = step_seconds(bench.replace("none,mtp", "mtp"))
    assert one > METHOD_S and step_seconds(bench) == 2 * one  # per method
    longer = bench.replace("--ttft 1024", "--ttft 1024,8192")
    assert step_seconds(longer) > step_seconds(bench)  # an 8k TTFT costs more
    tests = "gpu0 v2=1 python -m pytest tests/gpu -q -k split --ignore=tests/gpu/test_gpu_tp2.py"
    assert step_seconds(tests, lambda line: 3) == TESTS_BASE_S + 3 * TEST_S
    # pytest's own collection: a -k that matches nothing selects 0 tests
    assert count_gpu_tests(tests) >= 1
    assert count_gpu_tests(tests.replace("-k split", "-k no_such_test")) == 0
    assert step_seconds("python -m bench.gpu report x.jsonl") == 0
