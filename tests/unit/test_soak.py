"""``bench.soak``'s parts that need no server: the request mix, outcome triage, the
speculative config, the defaults, the model directories, and the document and report
built from records and samples."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from bench import soak
from bench.gpu_tokens import PROFILES
from devkit.serving import client
from devkit.serving.fuzz import timeline as tl
from devkit.serving.fuzz.servers import ServeMode


def test_request_mix_follows_the_fractions() -> None:
    a = soak.parse_args([])
    rng = random.Random(0)
    reqs = [soak.plan_request(rng, i, "m", a) for i in range(4000)]
    bodies = [r.payload for r, _ in reqs]
    sampled = [b for (_, s), b in zip(reqs, bodies, strict=True) if s]
    greedy = [b for (_, s), b in zip(reqs, bodies, strict=True) if not s]
    assert 0.45 < len(sampled) / 4000 < 0.55
    assert all((b["temperature"], b["top_p"], b["top_k"]) == (1.0, 0.95, 64) for b in sampled)
    assert all(b["temperature"] == 0.0 and "top_k" not in b for b in greedy)
    aborts = [r for r, _ in reqs if r.abort_after_chunks or r.cancel_after_s]
    assert 0.08 < len(aborts) / 4000 < 0.12
    assert all(r.payload["stream"] for r, _ in reqs if r.abort_after_chunks)
    assert all(not r.payload["stream"] for r, _ in reqs if r.cancel_after_s)
    chat = [b for b in bodies if "messages" in b]
    assert 0.25 < len(chat) / 4000 < 0.35
    assert all(isinstance(b["messages"][0]["content"], str) for b in chat)
    ids = [b["prompt"] for b in bodies if "prompt" in b]
    assert all(isinstance(p, list) and all(3 <= t < 512 for t in p) for p in ids)
    assert min(map(len, ids)) >= 64 and max(map(len, ids)) <= 1024
    assert all(32 <= b["max_tokens"] <= 512 and b["ignore_eos"] for b in bodies)
    again = [soak.plan_request(random.Random(0), 0, "m", a)[0].payload]
    assert again == bodies[:1]  # seeded


def test_outcome_triage() -> None:
    assert soak.outcome(client.Completion(status=200)) == tl.OK
    assert soak.outcome(client.Completion(status=200, aborted=True)) == tl.ABORTED
    assert soak.outcome(client.Completion(aborted=True)) == tl.ABORTED
    assert soak.outcome(client.Completion(status=503, error="x")) == tl.ERROR_5XX
    assert soak.outcome(client.Completion(status=400, error="x")) == tl.ERROR_4XX
    assert soak.outcome(client.Completion(error="timeout after 900s")) == tl.ERROR_OTHER
    assert soak.outcome(client.Completion(status=200, error="stream error")) == tl.ERROR_OTHER


def test_spec_config_and_defaults() -> None:
    spec = soak.spec_config("/a", 4, "chat")
    assert spec["num_speculative_tokens"] == "auto" and spec["max_num_speculative_tokens"] == 4
    assert spec["rejection_sample_method"] == "synthetic"
    assert spec["synthetic_acceptance_rates"] == PROFILES["chat"][:4]
    assert "rejection_sample_method" not in soak.spec_config("/a", 4, "none")
    gpu = soak.parse_args([])
    assert (gpu.minutes, gpu.c_min, gpu.c_max, gpu.abort_fraction) == (20.0, 64, 256, 0.1)
    assert gpu.synthetic == "chat" and gpu.dtype == "bfloat16" and gpu.max_model_len == 4096
    assert gpu.kv_cache_bytes == 3 << 30 and gpu.periods % 4 == 0
    cpu = soak.parse_args(["--cpu", "--trained", "--minutes", "1", "--max-tokens", "8,48"])
    assert cpu.synthetic == "none" and cpu.dtype == "float32" and cpu.max_model_len == 512
    assert cpu.max_tokens == (8, 48) and cpu.kv_cache_bytes == 256 << 20


def test_resolve_model_writes_shapes_with_a_tokenizer(tmp_path: Path) -> None:
    a = soak.parse_args(["--model", "E4B"])
    target, assistant, k = soak.resolve_model(a, tmp_path)
    assert k == 4 and Path(target, "tokenizer.json").is_file()
    assert json.loads(Path(target, "config.json").read_text())["hidden_size"] == 2560
    assert Path(assistant, "config.json").is_file()
    t, _, k = soak.resolve_model(soak.parse_args(["--trained"]), tmp_path)
    assert k == 4 and Path(t, "model.safetensors").is_file()


def test_kv_lines() -> None:
    log = (
        "(EngineCore pid=1) INFO 12-06 [kv_cache_utils.py:2327] GPU KV cache size: 80,659 "
        "tokens, Maximum concurrency for 4096 tokens per request: 19.7x\nother\n"
    )
    assert soak.kv_lines(log + "non-default args: {'num_gpu_blocks_override': 9}\n") == [
        "GPU KV cache size: 80,659 tokens, Maximum concurrency for 4096 tokens per request: 19.7x"
    ]


def test_document_and_report() -> None:
    a = soak.parse_args(["--cpu", "--trained", "--minutes", "1", "--bucket-s", "30"])
    records = [tl.RequestRecord(1.0, 5.0, tl.OK, 10), tl.RequestRecord(35.0, 40.0, tl.OK, 10)]
    records += [tl.RequestRecord(50.0, 52.0, tl.ABORTED)]
    samples = [
        tl.Sample(t=float(t), preemptions=float(t), rss_mib=100.0, rounds_by_k={0: t, 2: t})
        for t in range(0, 60, 5)
    ]
    mode = ServeMode.cpu()
    running = soak.document(a, mode, {"startup_s": 1.0}, records, samples, None)
    assert running["status"] == "running" and "criteria" not in running
    assert running["card"] == "cpu" and running["runner"] == "v1" and running["startup_s"] == 1.0
    assert [r["served"] for r in running["rows"]] == [1, 1]
    assert running["settings"]["max_tokens"] == a.max_tokens
    end = {"engine_death_lines": 0, "alive": True, "final_request_ok": True, "kv_usage": 0.0}
    done = soak.document(a, mode, {}, records, samples, end)
    assert done["status"] == "done" and set(done["criteria"]) >= {
        "zero_engine_deaths",
        "no_latency_drift",
        "host_memory_flat",
        "preempted",
    }
    assert not done["passed"]  # one request per half: no second-quarter p50 to compare with
    text = soak.report(done)
    assert "| 0 | 1 | 0 | 0 | 25 |" in text and "0:25 2:25" in text
    assert "FAIL no_latency_drift" in text and text.endswith("soak FAILED")


def test_show_prints_a_running_files_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = soak.parse_args(["--cpu", "--trained", "--minutes", "1", "--bucket-s", "30"])
    records = [tl.RequestRecord(1.0, 5.0, tl.OK, 10)]
    doc = soak.document(a, ServeMode.cpu(), {"startup_s": 9.5}, records, [], None)
    path = tmp_path / "soak.json"
    soak.write(path, doc)
    assert soak.main(["--show", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("status: running, startup_s: 9.5")
    assert "| 0 | 1 | 0 | 0 | 0 |" in out and "soak" not in out.splitlines()[-1]
    assert "\n| 30 | " in out  # each line starts at its bucket's second, not its index
