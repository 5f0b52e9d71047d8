"""The SGLang peer benchmark's pure parts (``bench.sglang_tokens``, ``bench.peers``,
``bench.token_timing``, ``bench.sglang_hooks``): settings and matched acceptance, the
engine plan, the output-log timing, the peers.json schema, the gpu_tokens converter and
the report. None of it needs SGLang installed."""

from __future__ import annotations

import importlib.metadata as md
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import gpu_tokens
from bench.peers import (
    FIELDS,
    TREE_AL_RATIO,
    chain_al,
    peer_row,
    read_rows,
    report,
    same_chain,
    sglang_peers,
    tree_al,
    vllm_peers,
)
from bench.sglang_hooks import (
    ENTRY_GROUP,
    RPC_SET_ACC_LEN,
    set_simulated_acc_len,
    write_entry_point,
)
from bench.sglang_tokens import (
    Setting,
    acceptance_length,
    all_flags,
    engine_env,
    engine_kwargs,
    format_plan,
    main,
    main_parser,
    measured_al,
    parse_setting,
    plan,
    prompt_batches,
    settings_from,
)
from bench.token_timing import (
    OutputLog,
    decode_span,
    full_batch_span,
    latencies,
    percentile,
)
from tests.conftest import REPO

# ---- matched acceptance ----------------------------------------------------------


def test_chain_al_is_one_plus_the_profile_rates_cut_to_k() -> None:
    assert chain_al("chat", 4) == pytest.approx(3.10)
    assert chain_al("code", 7) == pytest.approx(5.37)
    assert chain_al("prose", 1) == pytest.approx(1.45)
    assert chain_al("chat", 0) == 1.0
    with pytest.raises(ValueError, match="outside"):
        chain_al("chat", 8)
    with pytest.raises(ValueError, match="unknown profile"):
        chain_al("poetry", 2)


def test_tree_al_is_the_published_ratio_times_the_chain_at_the_same_depth() -> None:
    # SGLang's published E4B numbers: 3.80 at topk 3 against 3.28 at topk 1, 5 steps
    assert TREE_AL_RATIO == pytest.approx(3.80 / 3.28, abs=0.005)
    assert chain_al("chat", 5) == pytest.approx(3.28)
    assert tree_al("chat", 5) == pytest.approx(1.16 * 3.28)
    # never above what a verify of depth k can accept: k drafts + the bonus
    assert tree_al("code", 1) == 2.0
    assert tree_al("code", 7) == pytest.approx(1.16 * 5.37)


def test_settings_parse_and_reject_with_the_fix() -> None:
    assert parse_setting("none") == Setting("none")
    chain = parse_setting("chain:4")
    assert (chain.topk, chain.steps, chain.draft_tokens, chain.method) == (1, 4, 5, "frozen_kv_mtp")
    tree = parse_setting("tree:3:12:5")
    assert (tree.topk, tree.draft_tokens, tree.steps) == (3, 12, 5)
    assert chain.acc_len("chat") == pytest.approx(3.10)
    assert tree.acc_len("chat") == pytest.approx(tree_al("chat", 5))
    assert Setting("none").acc_len("chat") is None
    for bad in ("chain", "chain:0", "chain:8", "tree:1:5:4", "tree:3:40:5", "tree:3:12", "x:1"):
        with pytest.raises(ValueError, match="expected none, chain:K"):
            parse_setting(bad)
    with pytest.raises(ValueError, match="integers"):
        parse_setting("chain:four")


def test_steps_add_chains_without_repeats() -> None:
    names = [s.name for s in settings_from("none,chain:4,tree:3:12:5", "3,4,5")]
    assert names == ["none", "chain:4", "tree:3:12:5", "chain:3", "chain:5"]


# ---- the plan ------------------------------------------------------------------


def _args(tmp_path: Path, *extra: str) -> Any:
    return main_parser().parse_args(["all", "--shapes", str(tmp_path), *extra])


def test_engine_arguments_set_what_frozen_kv_mtp_would_otherwise_default(tmp_path: Path) -> None:
    args = _args(tmp_path, "--concurrency", "1,8,32,128,256")
    kw = engine_kwargs(parse_setting("chain:4"), args, "t", "a")
    # SGLang caps FROZEN_KV_MTP at 48 running requests unless told otherwise
    assert kw["max_running_requests"] == 256
    assert kw["enable_mixed_chunk"] is False
    assert kw["attention_backend"] == "triton" and kw["sampling_backend"] == "pytorch"
    assert kw["cuda_graph_bs_decode"] == [1, 8, 32, 128, 256]
    assert kw["disable_prefill_cuda_graph"] is True
    assert kw["load_format"] == "dummy" and kw["skip_tokenizer_init"] is True
    assert kw["context_length"] == 128 + 128 + 64
    assert (
        kw["speculative_algorithm"],
        kw["speculative_draft_model_path"],
        kw["speculative_num_steps"],
        kw["speculative_eagle_topk"],
        kw["speculative_num_draft_tokens"],
    ) == ("FROZEN_KV_MTP", "a", 4, 1, 5)
    none = engine_kwargs(Setting("none"), args, "t", "a")
    assert not any(k.startswith("speculative") for k in none)
    assert (
        engine_kwargs(Setting("none"), _args(tmp_path, "--prefill-graphs"), "t", "a")[
            "disable_prefill_cuda_graph"
        ]
        is False
    )


def test_engine_env_starts_at_the_first_profile_and_unsets_for_none() -> None:
    assert engine_env(Setting("none"), ["-"]) == {"SGLANG_SIMULATE_ACC_LEN": None}
    env = engine_env(parse_setting("chain:4"), ["chat", "code"])
    assert env == {"SGLANG_SIMULATE_ACC_LEN": "3.1", "SGLANG_SIMULATE_ACC_METHOD": "match-expected"}


def test_plan_has_one_engine_per_setting_with_every_profile(tmp_path: Path) -> None:
    engines = plan(_args(tmp_path, "--model", "31B", "--steps", "3,5"))
    assert [e["setting"] for e in engines] == [
        "none",
        "chain:4",
        "tree:3:12:5",
        "chain:3",
        "chain:5",
    ]
    assert engines[0]["profiles"] == {"-": None}
    assert engines[1]["profiles"] == {"code": 4.0, "chat": 3.1, "prose": 1.78}
    target = engines[1]["engine"]["model_path"]
    assert target.endswith("gemma-4-31B-it-shape-sglang") and Path(target, "config.json").exists()
    # SGLang renames the assistant's wrapped config itself
    assert engines[1]["engine"]["speculative_draft_model_path"].endswith("assistant-shape")
    # warm-up + repeats_at(c) timed batches per profile and concurrency
    want = sum(3 * (1 + gpu_tokens.repeats_at(c, 3, 1024, 128)) for c in (1, 8, 32, 128))
    assert engines[1]["batch_runs"] == want
    text = format_plan(engines)
    assert "5 engine starts" in text and "SGLANG_SIMULATE_ACC_LEN=(unset)" in text
    assert "speculative_num_draft_tokens=12" in text


def test_dry_run_prints_the_plan_without_sglang(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.sglang_tokens",
            "all",
            "--dry-run",
            "--shapes",
            str(tmp_path),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "3 engine starts" in out and "FROZEN_KV_MTP" in out


def test_bad_flags_fail_early_naming_the_fix(tmp_path: Path, capsys: Any) -> None:
    with pytest.raises(SystemExit):
        main(["all", "--dry-run", "--shapes", str(tmp_path), "--settings", "chain:9"])
    assert "chain:K" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["all", "--dry-run", "--shapes", str(tmp_path), "--profiles", "poetry"])
    assert "unknown profile" in capsys.readouterr().err


def test_all_passes_its_run_flags_on_and_keeps_its_own() -> None:
    argv = ["--model", "31B", "--settings", "none", "--steps=3,5", "--timeout", "9", "--tp", "2"]
    assert all_flags(argv) == ["--model", "31B", "--tp", "2"]


def test_importing_the_driver_needs_neither_sglang_nor_torch() -> None:
    code = (
        "import sys, bench.sglang_tokens, bench.peers, bench.sglang_hooks;"
        "print([m for m in ('sglang', 'torch', 'vllm') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert out.stdout.strip() == "[]", out.stderr


# ---- prompts: the same as bench.gpu_tokens ----------------------------------------------


def test_prompts_are_gpu_tokens_draws_in_concurrency_order() -> None:
    batches = prompt_batches([1, 8], 262_144, 128)
    rng = random.Random(0)
    first = [rng.randrange(10, 262_144) for _ in range(128)]
    assert batches[1] == [first]
    assert len(batches[8]) == 8 and all(len(p) == 128 for p in batches[8])
    # the c=8 batch continues the same generator (gpu_tokens draws c by c)
    assert batches[8][0][0] == rng.randrange(10, 262_144)


# ---- timing from the output log ---------------------------------------------------------


def _log() -> list[tuple[float, dict[str, int]]]:
    """Two requests: a prefilled at 1.0, b at 1.5 (its output also carries a's next
    round); then rounds of 3 tokens every 0.1 s, b finishing last alone."""
    log = OutputLog()
    log.add(1.0, ["a"], [1])
    log.add(1.5, ["a", "b"], [4, 1])
    log.add(1.6, ["a", "b"], [7, 4])
    log.add(1.7, ["a", "b"], [10, 7])
    log.add(1.8, ["b"], [10])
    return log.events


def test_output_log_turns_cumulative_counts_into_gains() -> None:
    log = OutputLog()
    log.add(0.0, ["a", "b"], [1, 1])
    log.add(0.1, ["a", "b"], [3, 1])  # b gained nothing: not in this output
    assert log.events == [(0.0, {"a": 1, "b": 1}), (0.1, {"a": 2})]
    log.clear()
    assert log.events == []


def test_decode_span_starts_at_the_last_first_token() -> None:
    tokens, seconds = decode_span(_log())
    assert tokens == 6 + 6 + 3  # the outputs after 1.5
    assert seconds == pytest.approx(0.3)
    assert decode_span([]) == (0, 0.0)


def test_full_batch_span_counts_outputs_carrying_every_request() -> None:
    tokens, seconds = full_batch_span(_log(), 2)
    assert tokens == 12 and seconds == pytest.approx(0.2)


def test_latencies() -> None:
    lat = latencies(_log(), submitted=0.9)
    assert sorted(lat.ttft_ms) == pytest.approx([100.0, 600.0])
    # a: 1.0 -> 1.5 -> 1.6 -> 1.7 ; b: 1.5 -> 1.6 -> 1.7 -> 1.8
    assert sorted(lat.itl_ms) == pytest.approx([100.0] * 5 + [500.0])
    # a: 9 tokens after its first in 0.7 s; b: 9 in 0.3 s
    assert sorted(lat.tpot_ms) == pytest.approx([300 / 9, 700 / 9])


def test_percentile_interpolates_like_numpy() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0], 90) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 90) == pytest.approx(4.6)


def test_measured_al_counts_verify_rounds_after_the_prefill_token() -> None:
    metas = [
        {"completion_tokens": 128, "spec_verify_ct": 41},
        {"completion_tokens": 128, "spec_verify_ct": 43},
    ]
    assert measured_al(metas) == (254, 84)
    assert measured_al([{"completion_tokens": 128}]) == (127, 0)
    # 127 tokens after the prefill token in 32 rounds: about 4 a round, not 5
    assert acceptance_length(127, 32) == pytest.approx(3.969)
    assert acceptance_length(127, 0) == 1.0


# ---- the plugin -------------------------------------------------------------------


def test_entry_point_names_register(tmp_path: Path) -> None:
    write_entry_point(tmp_path)
    eps = [
        ep
        for dist in md.distributions(path=[str(tmp_path)])
        for ep in dist.entry_points
        if ep.group == ENTRY_GROUP
    ]
    assert [ep.value for ep in eps] == ["bench.sglang_hooks:register"]
    assert eps[0].load().__name__ == "register"
    assert RPC_SET_ACC_LEN.startswith("bench_")


def test_rpc_sets_the_global_the_verify_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    spec_utils = types.ModuleType("sglang.srt.speculative.spec_utils")
    spec_utils.SIMULATE_ACC_LEN = -1.0  # type: ignore[attr-defined]
    speculative = types.ModuleType("sglang.srt.speculative")
    speculative.spec_utils = spec_utils  # type: ignore[attr-defined]
    for name, mod in {
        "sglang": types.ModuleType("sglang"),
        "sglang.srt": types.ModuleType("sglang.srt"),
        "sglang.srt.speculative": speculative,
        "sglang.srt.speculative.spec_utils": spec_utils,
    }.items():
        monkeypatch.setitem(sys.modules, name, mod)
    set_simulated_acc_len(object(), value=3.1)
    assert spec_utils.SIMULATE_ACC_LEN == 3.1  # type: ignore[attr-defined]


# ---- peers.json -----------------------------------------------------------------


def _sgl(setting: str, c: int, profile: str, tok_s: float, **kw: Any) -> dict[str, Any]:
    s = parse_setting(setting)
    return {
        "engine": "sglang",
        "engine_version": "0.5.17",
        "model": "E4B",
        "method": s.method,
        "setting": s.name,
        "topk": s.topk,
        "k": s.steps,
        "concurrency": c,
        "profile": profile,
        "acceptance_length_set": s.acc_len(profile) if profile != "-" else None,
        "mean_acceptance_length": 3.0,
        "decode_tok_s": tok_s,
        "itl_p50_ms": 5.0,
        "itl_p90_ms": 7.0,
        "ttft_p50_ms": 20.0,
        "attention": "triton",
        "device": "NVIDIA H200",
        "label": "h200-x",
        "full_batch_tok_s": 1.0,
        **kw,
    }


def _vllm(engine: str, method: str, k: int, c: int, profile: str, tok_s: float, **kw: Any):
    return {
        "model": "E4B",
        "engine": engine,
        "method": method,
        "k": k,
        "concurrency": c,
        "profile": profile,
        "temperature": 0.0,
        "decode_tok_s": tok_s,
        "mean_acceptance_length": 2.9,
        "vllm_version": "0.33.0",
        "attention": "TRITON_ATTN",
        "device": "NVIDIA H200",
        "label": "h200-x",
        "pinned": engine.endswith("sweep") and ":" not in method,
        "options": "",
        **kw,
    }


def test_peer_row_has_exactly_the_issue_fields() -> None:
    values = {f: None for f in FIELDS} | {"engine": "sglang", "method": "none"}
    assert list(peer_row(**values)) == list(FIELDS)
    with pytest.raises(ValueError, match="missing"):
        peer_row(**{k: v for k, v in values.items() if k != "label"})
    with pytest.raises(ValueError, match="unknown"):
        peer_row(**values, setting="chain:4")
    with pytest.raises(ValueError, match="method"):
        peer_row(**(values | {"method": "eagle"}))
    with pytest.raises(ValueError, match="engine"):
        peer_row(**(values | {"engine": "trt"}))


def test_sglang_peers_keep_none_chain4_best_chain_and_tree() -> None:
    rows = [
        _sgl("none", 32, "-", 1000.0),
        _sgl("chain:4", 32, "chat", 2000.0),
        _sgl("chain:3", 32, "chat", 2100.0),
        _sgl("chain:5", 32, "chat", 1900.0),
        _sgl("chain:4", 32, "code", 2500.0),
        _sgl("chain:3", 32, "code", 2200.0),
        _sgl("tree:3:12:5", 32, "chat", 1800.0),
    ]
    peers = sglang_peers(rows)
    assert all(list(p) == list(FIELDS) for p in peers)
    by = {(p["k"], p["topk"], p["profile"]): p for p in peers}
    assert set(by) == {(0, 0, "-"), (4, 1, "chat"), (3, 1, "chat"), (4, 1, "code"), (5, 3, "chat")}
    assert "best of steps 3,4,5" in by[(3, 1, "chat")]["label"]
    # where k=4 is the best, its own row says so and no duplicate is written
    assert by[(4, 1, "code")]["label"].endswith("4 steps, the best of steps 3,4")
    assert "1.16 x chain AL" in by[(5, 3, "chat")]["label"]
    assert by[(5, 3, "chat")]["acceptance_length_set"] == pytest.approx(tree_al("chat", 5))
    assert all(p["label"].startswith("h200-x: ") for p in peers)


def test_vllm_peers_from_gpu_tokens_rows() -> None:
    rows = [
        _vllm("none", "none", 0, 32, "-", 900.0),
        _vllm("mtp:4", "mtp", 4, 32, "chat", 1500.0),
        _vllm("mtp:sweep", "mtp", 4, 32, "chat", 1400.0, pinned=True),
        _vllm("frozen:sweep", "frozen_kv_mtp", 4, 32, "chat", 1800.0, pinned=True),
        _vllm("frozen:sweep", "frozen_kv_mtp", 3, 32, "chat", 1850.0, pinned=True),
        _vllm("frozen:sweep", "frozen_kv_mtp:auto", 7, 32, "chat", 1900.0),
        _vllm("frozen:sweep", "frozen_kv_mtp:schedule", 7, 32, "chat", 1700.0),
        _vllm("frozen:4", "frozen_kv_mtp", 4, 32, "code", 2400.0),
        _vllm("frozen:sweep", "frozen_kv_mtp", 4, 32, "code", 2300.0, pinned=True),
        _vllm("frozen:4", "frozen_kv_mtp", 4, 32, "prose", 1.0, temperature=1.0),
    ]
    peers = vllm_peers(rows)
    got = sorted((p["method"], p["k"], p["profile"], p["decode_tok_s"]) for p in peers)
    assert got == [
        ("frozen_kv_mtp", 4, "chat", 1800.0),  # pinned k=4: no static engine ran for chat
        ("frozen_kv_mtp", 4, "code", 2400.0),  # the static engine wins over the pinned row
        ("frozen_kv_mtp:auto", 7, "chat", 1900.0),
        ("mtp", 4, "chat", 1500.0),
        ("none", 0, "-", 900.0),
    ]
    for p in peers:
        assert list(p) == list(FIELDS) and p["engine"] == "vllm"
        assert p["itl_p50_ms"] is None  # these rows predate the latency fields
    auto = next(p for p in peers if p["method"] == "frozen_kv_mtp:auto")
    assert auto["acceptance_length_set"] == pytest.approx(chain_al("chat", 7))
    assert next(p for p in peers if p["method"] == "none")["acceptance_length_set"] is None


def test_report_sets_our_auto_beside_the_best_sglang_setting() -> None:
    peers = sglang_peers(
        [
            _sgl("none", 32, "-", 1000.0),
            _sgl("chain:4", 32, "chat", 2000.0),
            _sgl("tree:3:12:5", 32, "chat", 2500.0),
        ]
    ) + vllm_peers(
        [
            _vllm("none", "none", 0, 32, "-", 900.0),
            _vllm("frozen:sweep", "frozen_kv_mtp:auto", 7, 32, "chat", 3000.0),
        ]
    )
    text = report(peers)
    line = next(ln for ln in text.splitlines() if ln.startswith("| E4B | 32 | chat"))
    assert "| 900 | 1000 | 3000 (2.90) | 2500 (topk 3 k=5, 3.00) | 1.20 |" in line
    assert "### NVIDIA H200" in text and "Runs: h200-x" in text


def test_report_sets_the_three_chains_of_four_side_by_side_with_latencies() -> None:
    peers = sglang_peers(
        [_sgl("chain:4", 128, "chat", 1000.0, itl_p50_ms=30.0, itl_p90_ms=35.0)]
    ) + vllm_peers(
        [
            _vllm(
                "frozen:4",
                "frozen_kv_mtp",
                4,
                128,
                "chat",
                2000.0,
                itl_p50_ms=15.0,
                itl_p90_ms=16.0,
                ttft_p50_ms=100.0,
            ),
            _vllm("mtp:4", "mtp", 4, 128, "chat", 1800.0),
            # not a chain of 4: stays out of this table
            _vllm("frozen:sweep", "frozen_kv_mtp:auto", 7, 128, "chat", 2100.0),
        ]
    )
    lines = same_chain(peers)
    assert "attention: TRITON_ATTN, triton" in lines[0]
    (row,) = [ln for ln in lines if ln.startswith("| E4B | 128 | chat")]
    assert row == (
        "| E4B | 128 | chat | 2.90 / 3.00 | 2000 · 15.0/16.0 · 100.0 | 1800 · ?/? · ? "
        "| 1000 · 30.0/35.0 · 20.0 | 2.00 |"
    )
    assert same_chain([p for p in peers if p["engine"] == "vllm"]) == []  # no SGLang chain


def test_peers_and_report_commands(tmp_path: Path, capsys: Any) -> None:
    sgl = tmp_path / "sglang.jsonl"
    sgl.write_text("\n".join(json.dumps(r) for r in [_sgl("chain:4", 8, "chat", 800.0)]) + "\n")
    ours = tmp_path / "h200.json"
    ours.write_text(json.dumps([_vllm("frozen:sweep", "frozen_kv_mtp:auto", 7, 8, "chat", 880.0)]))
    out = tmp_path / "peers.json"
    main(["peers", str(sgl), str(ours), "--out", str(out)])
    assert "without ITL/TTFT" in capsys.readouterr().out
    peers = read_rows(out)
    assert {p["engine"] for p in peers} == {"sglang", "vllm"}
    main(["report", str(out)])
    assert "| E4B | 8 | chat |" in capsys.readouterr().out


# ---- a closed batch through the driver, against an engine that streams like SGLang's ----------


class _StreamingEngine:
    """Streams like ``sglang.Engine.async_generate(stream=True)``: one chunk per round of
    ``per_round`` tokens; the front end (here: this class) logs each output batch, as the
    driver's patched TokenizerManager does."""

    def __init__(self, per_round: int) -> None:
        import asyncio

        self.loop = asyncio.new_event_loop()
        self.per_round = per_round
        self.calls: list[dict[str, Any]] = []

    async def async_generate(self, **kw: Any) -> Any:
        from bench.sglang_tokens import _Recorder

        self.calls.append(kw)
        n, rid, rounds = 0, kw["rid"], 0
        limit = kw["sampling_params"]["max_new_tokens"]

        async def chunks() -> Any:
            nonlocal n, rounds
            import asyncio

            while n < limit:
                n = min(limit, n + (1 if n == 0 else self.per_round))
                rounds += n > 1
                if _Recorder.log is not None:
                    _Recorder.log.add(self.loop.time(), [rid], [n])
                await asyncio.sleep(0)
                meta = {"completion_tokens": n}
                if n == limit:
                    meta |= {"spec_verify_ct": rounds, "spec_accept_length": n / rounds}
                yield {"output_ids": [100], "meta_info": meta}

        return chunks()


def test_run_batch_streams_every_request_and_returns_their_final_meta() -> None:
    from bench.sglang_tokens import SGLangEngine, _Recorder

    eng = object.__new__(SGLangEngine)
    eng.engine = _StreamingEngine(per_round=3)
    eng._rid = 0
    log, submitted, metas = eng.run_batch([[11, 12], [13, 14], [15, 16]], tokens=10)
    assert _Recorder.log is None  # detached after the batch
    assert [c["rid"] for c in eng.engine.calls] == ["bench-0", "bench-1", "bench-2"]
    assert all(
        c["stream"] is True and c["sampling_params"]["temperature"] == 0.0 for c in eng.engine.calls
    )
    assert all(c["sampling_params"]["ignore_eos"] for c in eng.engine.calls)
    assert [m["completion_tokens"] for m in metas] == [10, 10, 10]
    # 1 prefill token, then rounds of 3: 9 tokens in 3 rounds per request
    assert measured_al(metas) == (27, 9)
    assert acceptance_length(*measured_al(metas)) == 3.0  # 3 tokens a round, bonus included
    assert sum(sum(g.values()) for _, g in log.events) == 30
    eng.run_batch([[1]], tokens=2)
    assert eng.engine.calls[-1]["rid"] == "bench-3"  # request ids never repeat
    eng.engine.loop.close()


def test_run_group_kills_the_engine_and_its_children(tmp_path: Path) -> None:
    from bench.sglang_tokens import run_group

    pid_file = tmp_path / "child.pid"
    # a parent that starts a long-lived child, as an engine starts its scheduler
    code = (
        "import subprocess, sys, time;"
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
        f"open({str(pid_file)!r}, 'w').write(str(c.pid)); time.sleep(60)"
    )
    assert run_group([sys.executable, "-c", code], 3, "test") is None
    stat = Path(f"/proc/{int(pid_file.read_text())}/stat")
    import time

    for _ in range(50):  # SIGKILL is asynchronous; dead means gone or a zombie not yet reaped
        if not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z":
            break
        time.sleep(0.1)
    else:
        pytest.fail("the child outlived its killed process group")
    assert run_group([sys.executable, "-c", "pass"], 30, "test") == 0


def test_vllm_peers_carry_the_latency_fields_gpu_tokens_records() -> None:
    row = _vllm("none", "none", 0, 8, "-", 900.0)
    row.update(ttft_p50_ms=21.5, itl_p50_ms=4.25, itl_p90_ms=5.5)
    (peer,) = vllm_peers([row])
    assert (peer["ttft_p50_ms"], peer["itl_p50_ms"], peer["itl_p90_ms"]) == (21.5, 4.25, 5.5)


@pytest.mark.parametrize(
    "size, full, sliding",
    [
        ("E2B", (512, 1), (256, 1)),
        ("E4B", (512, 2), (256, 2)),
        ("26B-A4B", (512, 2), (256, 8)),
        ("31B", (512, 4), (256, 16)),
    ],
)
def test_sglang_copy_of_a_target_names_full_layers_plain_and_sliding_layers_swa(
    tmp_path: Path, size: str, full: tuple[int, int], sliding: tuple[int, int]
) -> None:
    """(head size, KV heads) of the full-attention and the sliding layers, as the
    checkpoints have them, in SGLang's naming."""
    from bench.sglang_tokens import for_sglang
    from vllm_frozen_kv_mtp.frontend.published_sizes import ensure_shape_pair

    target, assistant = ensure_shape_pair(size, str(tmp_path))
    copy = for_sglang(Path(target))
    assert copy.name.endswith("-sglang") and copy.parent == Path(target).parent
    cfg = json.loads((copy / "config.json").read_text())
    assert (cfg["head_dim"], cfg["num_key_value_heads"]) == full
    assert cfg["v_head_dim"] == full[0]
    assert (cfg["swa_head_dim"], cfg["swa_num_key_value_heads"]) == sliding
    assert cfg["swa_v_head_dim"] == sliding[0]
    assert cfg["architectures"] == ["Gemma4ForCausalLM"] and cfg["model_type"] == "gemma4_text"
    # the original stays as vLLM reads it (transformers' naming), and a second call
    # renames that original again rather than the copy
    orig = json.loads((Path(target) / "config.json").read_text())
    assert (orig["head_dim"], orig["num_key_value_heads"]) == sliding
    assert not any(k.startswith("swa_") for k in orig)
    assert json.loads((for_sglang(Path(target)) / "config.json").read_text()) == cfg
    # SGLang renames the assistant's wrapped text_config itself: no copy
    assert for_sglang(Path(assistant)) == Path(assistant)


def _plan_sglang_steps() -> list[tuple[str, list[str]]]:
    import shlex

    steps = []
    for plan_file in sorted((REPO / "tools/plans").glob("*.plan")):
        for line in plan_file.read_text().splitlines():
            if "bench.sglang_tokens" in line and not line.startswith("#"):
                argv = shlex.split(line.split("-m bench.sglang_tokens", 1)[1])
                steps.append((plan_file.name, argv))
    return steps


def test_every_planned_sglang_step_parses_and_names_a_setting() -> None:
    """A plan's SGLang step that argparse refuses would cost a GPU host its engine start."""
    steps = _plan_sglang_steps()
    assert {name for name, _ in steps} >= {"peers_e4b.plan", "peers_31b.plan"}
    for name, argv in steps:
        args = main_parser().parse_args(argv)
        assert args.cmd == "run", name
        assert parse_setting(args.setting).name == args.setting, (name, args.setting)
