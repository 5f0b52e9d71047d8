"""``bench.gpu_fuzz`` and the production-path server helpers it shares with the soak
(``serving/fuzz/servers.py``, ``serving/fuzz/probe.py``): command lines, environments,
the plugin's visibility, log evidence, the stats probe, the run's checks and its rows. No
server is started."""

from __future__ import annotations

import importlib.metadata as md
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from bench import gpu_fuzz
from devkit.serving import fuzz
from devkit.serving.fuzz import probe, servers
from devkit.serving.fuzz.servers import ServeMode
from vllm_frozen_kv_mtp.drafters.stats import DraftStats, log_stats_at_exit

GPU = ServeMode()


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_gpu_argv_is_the_real_cli_with_async_and_graphs() -> None:
    spec = gpu_fuzz.spec_config("/a", None)
    argv = servers.serve_argv(
        "/t", port=8001, mode=GPU, spec=spec, kv_cache_bytes=1 << 30, python="py"
    )
    assert argv[:5] == ["py", "-m", "vllm.entrypoints.cli.main", "serve", "/t"]
    assert "--async-scheduling" in argv and "--enforce-eager" not in argv
    assert "--compilation-config" not in argv  # torch.compile and graphs: vLLM's default
    assert json.loads(_flag(argv, "--speculative-config")) == {
        "method": "frozen_kv_mtp",
        "model": "/a",
        "num_speculative_tokens": "auto",
    }
    want = {"--host": "127.0.0.1", "--port": "8001", "--dtype": "float32"}
    want |= {"--kv-cache-memory-bytes": str(1 << 30), "--max-model-len": "2048"}
    assert {f: _flag(argv, f) for f in want} == want
    assert "--num-gpu-blocks-override" not in argv and "--load-format" not in argv


def test_argv_variants() -> None:
    no_compile = ServeMode(compile=False, async_scheduling=False, dtype="bfloat16")
    argv = servers.serve_argv("/t", port=1, mode=no_compile, num_gpu_blocks=99, load_format="dummy")
    assert json.loads(_flag(argv, "--compilation-config")) == servers.GRAPHS_ONLY
    assert "--no-async-scheduling" in argv and _flag(argv, "--dtype") == "bfloat16"
    assert _flag(argv, "--num-gpu-blocks-override") == "99"
    assert _flag(argv, "--load-format") == "dummy"
    eager = servers.serve_argv("/t", port=1, mode=ServeMode(graphs=False))
    assert "--enforce-eager" in eager and "--compilation-config" not in eager
    cpu = servers.serve_argv("/t", port=1, mode=ServeMode.cpu(), python="py")
    assert cpu[:5] == ["py", "-m", "vllm.entrypoints.openai.api_server", "--model", "/t"]
    assert "--enforce-eager" in cpu and "--async-scheduling" not in cpu
    assert "--speculative-config" not in cpu
    assert gpu_fuzz.spec_config("/a", 4)["max_num_speculative_tokens"] == 4


def test_server_env_puts_this_checkout_and_its_plugin_first(tmp_path: Path) -> None:
    env = servers.server_env(GPU, tmp_path, base={"PYTHONPATH": "/tmp/site"})
    paths = env["PYTHONPATH"].split(os.pathsep)
    assert paths == [str(tmp_path / "dists"), str(servers.REPO), "/tmp/site"]
    assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "1"
    assert env["VLLM_USE_V2_MODEL_RUNNER"] == "1"
    assert probe.ENV_DIR not in env
    (dist,) = md.distributions(path=[str(tmp_path / "dists")])
    assert [ep.value for ep in dist.entry_points] == ["vllm_frozen_kv_mtp:register"]
    v1 = servers.server_env(ServeMode(runner="v1"), tmp_path, base={})
    assert v1["VLLM_USE_V2_MODEL_RUNNER"] == "0" and v1["PYTHONPATH"].endswith(str(servers.REPO))


def test_server_env_with_dummy_weights_and_the_stats_probe(tmp_path: Path) -> None:
    env = servers.server_env(
        ServeMode.cpu(), tmp_path, dummy_weights=True, stats_dir=tmp_path / "s", base={}
    )
    assert env[probe.ENV_DIR] == str(tmp_path / "s") and env[probe.ENV_INTERVAL] == "5.0"
    assert "VLLM_USE_V2_MODEL_RUNNER" not in env
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
    eps = {
        ep.value
        for d in md.distributions(path=[str(tmp_path / "dists")])
        for ep in d.entry_points
        if ep.group == "vllm.general_plugins"
    }
    assert eps == {
        "vllm_frozen_kv_mtp:register",
        "devkit.fixtures.dummy:fill_dummy_token_ordering",
        probe.ENTRY_POINT,
    }


def test_the_server_env_imports_this_checkouts_plugin(tmp_path: Path) -> None:
    env = servers.server_env(GPU, tmp_path)
    seen = servers.plugin_seen_by(env, tmp_path)
    assert seen["module"] == str(servers.REPO / "vllm_frozen_kv_mtp" / "__init__.py")
    assert "frozen_kv_mtp = vllm_frozen_kv_mtp:register" in seen["entry_points"]


SPEC_LOG = """\
(EngineCore pid=2) INFO [core.py:140] Initializing a V1 LLM engine (v0.33.0) with config: \
model='/t', enforce_eager=False, compilation_config={'mode': <CompilationMode.VLLM_COMPILE: 3>, \
'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>}
(EngineCore pid=2) INFO [gpu_worker.py:513] Using V2 Model Runner
(EngineCore pid=2) INFO [speculator.py:112] frozen_kv_mtp: Model Runner V2 speculator active (one seed row per request)
(EngineCore pid=2) INFO [scheduler.py:70] frozen_kv_mtp: draft length policy 'auto': k in 0..7 \
(GoodputAsyncScheduler, over vLLM's AsyncScheduler: async scheduling stays on)
(EngineCore pid=2) INFO [speculator.py:226] frozen_kv_mtp: capturing whole-round draft CUDA graphs
"""  # noqa: E501


def test_observed_reads_runner_async_and_graphs_from_the_log() -> None:
    seen = servers.observed(SPEC_LOG)
    assert seen == {
        "runner": "v2",
        "async_scheduling": True,
        "graphs": True,
        "cudagraph_mode": "FULL_AND_PIECEWISE",
        "draft_graphs_captured": True,
        "engine_death_lines": 0,
    }
    assert servers.mode_mismatches(GPU, seen) == []
    wrong = servers.mode_mismatches(ServeMode(runner="v1", graphs=False), seen)
    assert wrong == ["runner: asked 'v1', log says 'v2'", "graphs: asked False, log says True"]


def test_observed_on_a_cpu_log_and_engine_deaths() -> None:
    log = (
        "enforce_eager=True, compilation_config={'cudagraph_mode': <CUDAGraphMode.NONE: 0>}\n"
        "frozen_kv_mtp: V1 proposer active\n"
        "(GoodputSyncScheduler, over vLLM's Scheduler: this engine schedules synchronously)\n"
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.\n"
        "(APIServer pid=1) INFO [launcher.py:254] [shutdown] API server: shutdown triggered\n"
        "vllm.v1.engine.exceptions.EngineDeadError: after shutdown: vLLM's race, not a death\n"
    )
    seen = servers.observed(log)
    assert (seen["runner"], seen["async_scheduling"], seen["graphs"]) == ("v1", False, False)
    assert seen["engine_death_lines"] == 1
    assert servers.mode_mismatches(ServeMode.cpu(), seen) == []
    assert servers.observed("")["runner"] is None
    assert servers.mode_mismatches(GPU, servers.observed("")) == []  # unknown is no proof


def test_cudagraph_tables_and_auto_k_lines() -> None:
    text = """\
(APIServer pid=1) INFO [loggers.py:343] **CUDAGraph Stats:**
(APIServer pid=1) INFO [loggers.py:343]
(APIServer pid=1) INFO [loggers.py:343] | Unpadded Tokens | Padded Tokens | Num Paddings | Runtime Mode | Count |
(APIServer pid=1) INFO [loggers.py:343] |-----------------|---------------|--------------|--------------|-------|
(APIServer pid=1) INFO [loggers.py:343] | 320             | 320           | 0            | FULL         | 41    |
(APIServer pid=1) INFO [loggers.py:343] | 700             | 700           | 0            | NONE         | 2     |
(APIServer pid=1) INFO [loggers.py:343] | 96              | 104           | 8            | FULL         | 9     |
(EngineCore pid=2) INFO [scheduler.py:170] frozen_kv_mtp auto k: steps=10 k_counts={0: 2, 3: 8} current_k=3 switches=1
(EngineCore pid=2) INFO [scheduler.py:170] frozen_kv_mtp auto k: steps=30 k_counts={0: 2, 3: 20, 4: 8} current_k=4 switches=2
"""  # noqa: E501
    assert servers.target_graph_modes(text) == {"FULL": 50, "NONE": 2}
    assert servers.auto_k_choice(text) == {
        "steps": 30,
        "k_counts": {0: 2, 3: 20, 4: 8},
        "current_k": 4,
    }
    assert servers.auto_k_choice("nothing") is None


def test_log_follower_returns_whole_new_lines(tmp_path: Path) -> None:
    log = tmp_path / "s.log"
    follow = servers.LogFollower(log)
    assert follow.new_text() == ""  # not there yet
    log.write_text("a\nb")
    assert follow.new_text() == "a\n"
    with open(log, "a") as f:
        f.write("c\nd\n")
    assert follow.new_text() == "bc\nd\n" and follow.new_text() == ""


def test_probe_writes_and_sums_live_drafter_counters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vllm_frozen_kv_mtp.drafters import stats as frozen_kv

    monkeypatch.setattr(frozen_kv, "_exit_stats", [])
    a, b = DraftStats(), DraftStats()
    for s in (a, b):
        log_stats_at_exit(s)
    a.rounds, a.graph_misses, a.skipped_rounds = 5, 1, 2
    a.count_round(3)
    a.count_round(3)
    b.count_round(1)
    snap = probe.snapshot()
    assert [d["rounds_by_k"] for d in snap] == [{"3": 2}, {"1": 1}]
    # two processes' files; only each file's newest complete line counts
    (tmp_path / "1.jsonl").write_text(
        json.dumps({"drafters": [{"rounds": 1, "rounds_by_k": {"3": 1}}]})
        + "\n"
        + json.dumps({"drafters": snap[:1]})
        + '\n{"drafters": [tr'  # a line being written
    )
    (tmp_path / "2.jsonl").write_text(json.dumps({"drafters": snap[1:]}) + "\n")
    total = probe.read_stats(tmp_path)
    assert total["rounds"] == 5 and total["graph_misses"] == 1
    assert total["rounds_by_k"] == {0: 2, 1: 1, 3: 2}  # k = 0: the skipped steps
    assert probe.read_stats(tmp_path / "none") == {}


def test_probe_start_is_a_no_op_without_its_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(probe.ENV_DIR, raising=False)
    before = probe._started_pid
    probe.start()
    assert probe._started_pid == before


def test_probe_dist_declares_the_entry_point(tmp_path: Path) -> None:
    probe.probe_dist(tmp_path)
    (dist,) = md.distributions(path=[str(tmp_path)])
    (ep,) = dist.entry_points
    assert (ep.group, ep.value) == ("vllm.general_plugins", probe.ENTRY_POINT)
    assert callable(ep.load())


# ----------------------------------------------------------------------------- rows


def _summary(**kw: Any) -> dict[str, Any]:
    s: dict[str, Any] = {
        "passed": True,
        "requests": 10,
        "sent": 10,
        "outcomes": {"ok": 8, "refused_4xx": 2},
        "engine_deaths": 0,
        "server_errors_5xx": 0,
        "greedy_compared": 4,
        "mismatch_count": 0,
        "end": {"kv_cache_usage_perc": 0.0},
    }
    return s | kw


def _checks(**kw: Any) -> dict[str, bool]:
    args: dict[str, Any] = dict(
        summary=_summary(),
        seen=servers.observed(SPEC_LOG),
        mismatched_mode=[],
        stats={"graph_misses": 0, "rounds": 9},
        drafts=9.0,
        alive=True,
        leftovers=[],
        compare=True,
    )
    return gpu_fuzz.checks(**(args | kw))


def test_checks_pass_and_each_one_fails_alone() -> None:
    assert all(_checks().values())
    cases: list[tuple[dict[str, Any], str]] = [
        ({"summary": _summary(passed=False)}, "fuzz_summary_passed"),
        ({"summary": _summary(sent=9)}, "all_requests_sent"),
        ({"alive": False}, "servers_alive_to_the_end"),
        ({"seen": {"runner": "v2", "engine_death_lines": 1}}, "servers_alive_to_the_end"),
        ({"mismatched_mode": ["runner"]}, "mode_as_asked"),
        ({"seen": servers.observed("")}, "mode_as_asked"),
        ({"drafts": 0.0}, "drafted"),
        ({"stats": {"graph_misses": 2}}, "no_draft_graph_misses"),
        ({"summary": _summary(greedy_compared=0)}, "greedy_compared"),
        ({"leftovers": ["pid 1 'vllm'"]}, "clean_shutdown"),
    ]
    for kw, name in cases:
        failed = [c for c, ok in _checks(**kw).items() if not ok]
        assert failed == [name], (kw, failed)
    assert "greedy_compared" not in _checks(compare=False, summary=_summary(greedy_compared=0))


def _row(dtype: str, card: str, n: int, vllm: str = "0.33.0") -> dict[str, Any]:
    return {
        "device": "gpu",
        "card": card,
        "vllm": vllm,
        "dtype": dtype,
        "runner": "v2",
        "async_scheduling": True,
        "graphs": True,
        "compile": True,
        "requests": n,
    }


def test_merge_rows_replaces_the_same_experiment_only() -> None:
    doc = gpu_fuzz.merge_rows(None, _row("float32", "H100", 1))
    doc = gpu_fuzz.merge_rows(doc, _row("bfloat16", "H100", 1))
    doc = gpu_fuzz.merge_rows(doc, _row("float32", "H200", 1))
    doc = gpu_fuzz.merge_rows(doc, _row("float32", "H100", 2))
    got = [(r["card"], r["dtype"], r["requests"]) for r in doc["rows"]]
    assert got == [("H100", "bfloat16", 1), ("H100", "float32", 2), ("H200", "float32", 1)]


def test_merge_rows_keeps_one_row_per_vllm_version() -> None:
    doc = gpu_fuzz.merge_rows(None, _row("bfloat16", "H100", 1, vllm="0.33.0"))
    doc = gpu_fuzz.merge_rows(doc, _row("bfloat16", "H100", 2, vllm="0.32.0"))
    doc = gpu_fuzz.merge_rows(doc, _row("bfloat16", "H100", 3, vllm="0.32.0"))
    got = [(r["vllm"], r["requests"]) for r in doc["rows"]]
    assert got == [("0.32.0", 3), ("0.33.0", 1)]


def test_row_carries_mode_counts_and_the_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(servers, "card", lambda: "NVIDIA H100 80GB HBM3")
    args = gpu_fuzz.parse_args(["--dtype", "bfloat16", "--n", "10", "--concurrency", "4"])
    assert args.compare is None and args.max_model_len == 2048
    checks = _checks(compare=False)
    r = gpu_fuzz.row(
        args,
        ServeMode(dtype="bfloat16"),
        _summary(),
        {"compare": False, "checks": checks, "startup_s": 3.0},
    )
    assert r["card"] == "NVIDIA H100 80GB HBM3" and r["dtype"] == "bfloat16"
    assert (r["runner"], r["async_scheduling"], r["graphs"]) == ("v2", True, True)
    assert r["passed"] and r["greedy_comparison"] is False and r["startup_s"] == 3.0
    assert r["outcomes"] == {"ok": 8, "refused_4xx": 2} and r["summary"]["sent"] == 10
    assert r["vllm"] == servers.vllm_version() and "compare" not in r
    r = gpu_fuzz.row(args, ServeMode(), _summary(), {"compare": True, "checks": {"x": False}})
    assert not r["passed"]
    cpu = gpu_fuzz.parse_args(["--cpu"])
    assert cpu.max_model_len == 512 and cpu.kv_cache_bytes == 256 << 20


def test_generator_sends_gemmas_recommended_sampling() -> None:
    cases = fuzz.generate(2000, "m", seed=0)
    gemma = [c for c in cases if "sampling:gemma_recommended" in c.tags]
    assert len(gemma) >= 100
    assert all(
        (c.payload["temperature"], c.payload["top_p"], c.payload["top_k"]) == (1.0, 0.95, 64)
        for c in gemma
    )
    assert any((c.payload.get("n") or 1) > 1 for c in gemma)
    assert any(c.stream and c.abort_after_chunks for c in gemma)
    cov = gpu_fuzz.coverage(cases)
    for key in ("greedy", "n>1", "structured", "logprobs", "stop", "abort", "prompt:unicode"):
        assert cov[key] >= 20, key
    assert cov["prompt:near_max"] >= 20 and cov["chat"] == sum(c.chat for c in cases)
    assert Counter(c.mode for c in cases).keys() >= {"chat-stream", "completions"}
