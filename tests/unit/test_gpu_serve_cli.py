"""``bench.gpu_serve``'s pure parts: the server command line (real ``vllm serve`` CLI or the
api_server module), the request mix, /metrics parsing, traceback triage and the installed-
plugin probe. No server is started."""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import inspect
import json
import os
from pathlib import Path
from typing import Any

import pytest

from bench import gpu_serve
from devkit.fixtures import dummy

METRICS = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 100.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e9
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 400.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 250.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 70.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 90.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 50.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="3"} 40.0
vllm:frozen_kv_mtp_fallbacks_total{engine="0",kernel="softcap"} 2.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.0
vllm:num_requests_running{engine="0",model_name="m"} 0.0
"""


def test_metrics_summary() -> None:
    s = gpu_serve.metrics_summary(METRICS)
    assert (s["drafts"], s["draft_tokens"], s["accepted_tokens"]) == (100, 400, 250)
    assert s["acceptance_rate"] == 0.625
    assert s["mean_acceptance_length"] == 3.5
    assert s["accepted_per_position"] == [90, 70, 50, 40]
    assert s["frozen_metrics"] == {"vllm:frozen_kv_mtp_fallbacks_total": 2.0}
    assert s["kv_cache_usage_perc"] == 0.0


def test_metrics_summary_without_speculation() -> None:
    s = gpu_serve.metrics_summary('vllm:kv_cache_usage_perc{engine="0"} 0.25\n')
    assert s["drafts"] == 0 and s["mean_acceptance_length"] is None
    assert s["acceptance_rate"] is None and s["accepted_per_position"] == []
    assert s["kv_cache_usage_perc"] == 0.25


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_serve_argv_real_cli() -> None:
    argv = gpu_serve.serve_argv(
        "/m/t", "/m/a", k=4, port=8123, python="py", extra=["--enforce-eager"]
    )
    assert argv[:5] == ["py", "-m", "vllm.entrypoints.cli.main", "serve", "/m/t"]
    assert "--model" not in argv
    spec = json.loads(_flag(argv, "--speculative-config"))
    assert spec == {"method": "frozen_kv_mtp", "model": "/m/a", "num_speculative_tokens": 4}
    expected = {
        "--load-format": "dummy",
        "--host": "127.0.0.1",
        "--port": "8123",
        "--max-num-seqs": "64",
        "--max-model-len": "4096",
        "--dtype": "bfloat16",
        "--gpu-memory-utilization": "0.85",
        "--seed": "0",
    }
    assert {f: _flag(argv, f) for f in expected} == expected
    assert "--chat-template" not in argv and argv[-1] == "--enforce-eager"


def test_serve_argv_api_server_and_bad_entrypoint() -> None:
    argv = gpu_serve.serve_argv("/t", "/a", k=2, port=1, entrypoint="api_server", python="py")
    assert argv[:5] == ["py", "-m", "vllm.entrypoints.openai.api_server", "--model", "/t"]
    argv = gpu_serve.serve_argv("/t", "/a", k=2, port=1, chat_template="/c.jinja")
    assert _flag(argv, "--chat-template") == "/c.jinja"
    with pytest.raises(ValueError, match="cli or api_server"):
        gpu_serve.serve_argv("/t", "/a", k=2, port=1, entrypoint="serve")


def test_cli_module_is_the_vllm_console_script() -> None:
    """``-m vllm.entrypoints.cli.main`` runs what the ``vllm`` command runs."""
    scripts = [ep for ep in md.entry_points(group="console_scripts") if ep.name == "vllm"]
    assert [ep.value for ep in scripts] == ["vllm.entrypoints.cli.main:main"]
    spec = importlib.util.find_spec("vllm")  # not imported: vLLM's import is slow
    assert spec is not None and spec.origin is not None
    main = Path(spec.origin).parent / "entrypoints" / "cli" / "main.py"
    assert 'if __name__ == "__main__":\n    main()' in main.read_text()


def test_request_mix() -> None:
    reqs = gpu_serve.plan(64, "m", 128)
    bodies = [r.payload for r in reqs]
    assert [r.index for r in reqs] == list(range(64))
    assert sum(b["stream"] for b in bodies) == 32
    assert sum("messages" in b for b in bodies) == 32
    kinds = {("messages" in b, b["stream"]) for b in bodies if b["temperature"] == 1.0}
    assert len(kinds) == 4  # sampled requests on every endpoint, streamed or not
    sampled = [b for b in bodies if b["temperature"] == 1.0]
    assert len(sampled) == 16
    assert all(b["top_p"] == 0.95 and b["top_k"] == 64 for b in sampled)
    assert all(b["ignore_eos"] and b["max_tokens"] == 128 and b["model"] == "m" for b in bodies)
    assert all(b["stream_options"] == {"include_usage": True} for b in bodies if b["stream"])


def test_tracebacks_shutdown_race_is_told_apart() -> None:
    p = "(APIServer pid=1) ERROR 12-02 06:29:21 [async_llm.py:906] "
    log = "\n".join(
        [
            "(EngineCore pid=2) ERROR [core.py:1] Traceback (most recent call last):",
            '(EngineCore pid=2) ERROR [core.py:1]   File "x.py", line 1, in f',
            "(EngineCore pid=2) ERROR [core.py:1] RuntimeError: boom",
            "(APIServer pid=1) INFO [launcher.py:254] [shutdown] API server: shutdown triggered",
            p + "AsyncLLM output_handler failed.",
            p + "Traceback (most recent call last):",
            p + '  File "async_llm.py", line 849, in output_handler',
            p + "    outputs = await engine_core.get_output_async()",
            p + "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.",
        ]
    )
    tbs = gpu_serve.tracebacks(log)
    assert [(t["line"], t["shutdown_race"]) for t in tbs] == [(1, False), (6, True)]
    assert tbs[0]["exception"] == "RuntimeError: boom"
    assert tbs[1]["exception"].startswith("vllm.v1.engine.exceptions.EngineDeadError:")
    # the same error before any shutdown is a real failure
    before = "\n".join(log.splitlines()[5:] + log.splitlines()[3:4])
    assert [t["shutdown_race"] for t in gpu_serve.tracebacks(before)] == [False]


def test_probe_finds_the_installed_entry_point(tmp_path: Path) -> None:
    found = gpu_serve.probe_plugin(dict(os.environ), str(tmp_path))
    assert found is not None, "the plugin is not installed in this environment"
    assert found["entry_point"] == "frozen_kv_mtp = vllm_frozen_kv_mtp:register"
    assert found["distribution"].replace("_", "-") == "vllm-frozen-kv-mtp"
    assert Path(found["location"]).is_dir() and found["module"].endswith("__init__.py")


def test_dummy_fix_dist_is_a_general_plugin(tmp_path: Path) -> None:
    gpu_serve.dummy_fix_dist(tmp_path)
    (dist,) = md.distributions(path=[str(tmp_path)])
    eps = [ep for ep in dist.entry_points if ep.group == "vllm.general_plugins"]
    assert [ep.value for ep in eps] == ["frozen_kv_mtp_dummy_weights:fill_dummy_token_ordering"]
    # the module ships beside the metadata: the server needs no checkout on its path
    assert (tmp_path / "frozen_kv_mtp_dummy_weights.py").read_text() == (
        Path(inspect.getfile(dummy)).read_text()
    )


def test_missing_plugin_exits_with_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_serve, "probe_plugin", lambda *a: None)
    monkeypatch.setattr(gpu_serve.tempfile, "mkdtemp", lambda **kw: str(tmp_path / "s"))
    args = gpu_serve.parse_args(["--target", str(tmp_path), "--assistant", str(tmp_path)])
    with pytest.raises(SystemExit) as e:
        gpu_serve.run(args)
    assert "pip install --no-deps dist/vllm_frozen_kv_mtp-" in str(e.value.code)
    assert "pip install --no-deps -e ." in str(e.value.code)


def test_table_names_the_entry_point_and_failed_checks() -> None:
    doc: dict[str, Any] = {
        "load": {"completed": 63, "requests": 64, "throughput_tok_s": 1234.5},
        "metrics": {"drafts": 10, "accepted_tokens": 5, "mean_acceptance_length": 1.5}
        | {"kv_cache_usage_perc": 0.0},
        "shutdown": {"seconds": 3.2, "returncode": 0, "leftovers": [], "tracebacks": []},
        "plugin": {"distribution": "vllm-frozen-kv-mtp", "version": "0.1.0", "location": "/sp"},
        "checks": {"all_requests_ok": False, "drafts": True},
        "ok": False,
    }
    text = gpu_serve.table(doc)
    assert "| requests ok / failed | 63 / 1 |" in text
    assert "vllm-frozen-kv-mtp 0.1.0 at /sp" in text
    assert "['all_requests_ok']" in text
