"""Serving benchmark on 127.0.0.1: the same seeded load (with client aborts) against vLLM's
OpenAI server without speculation and with frozen_kv_mtp, one server at a time.

    .venv/bin/python -m bench.serving --pairs fp32 fp32-oracle \
        --requests 200 --concurrency 32 --out bench/results/serving.json

Prints a JSON document and a Markdown table: latency p50/p90, TTFT p50, output tokens/s,
acceptance, errors, and whether completed greedy outputs matched the no-speculation run.
On CPU with the tiny fixtures the numbers measure serving overheads, not model speed:
``fp32`` drafts are almost always rejected, ``fp32-oracle`` drafts are always accepted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from devkit.fixtures.build import ensure_pair
from devkit.serving import client, load
from devkit.serving.openai_server import start_server

REPO = Path(__file__).resolve().parents[1]

CHAT_TEMPLATE = str(REPO / "configs" / "tiny-chat-template.jinja")


def run_one(
    target: str,
    spec: dict[str, Any] | None,
    reqs: list[load.LoadRequest],
    args: argparse.Namespace,
    log: Path,
) -> tuple[dict[str, Any], list[client.Completion]]:
    srv = start_server(target, log_path=log, spec=spec, chat_template=CHAT_TEMPLATE)
    try:
        t0 = time.perf_counter()
        srv.wait_ready(timeout=900)
        startup = time.perf_counter() - t0
        # warm-up outside the measurement (first requests pay one-off costs)
        load.run(srv.url, load.plan(8, target, seed=99, abort_fraction=0), concurrency=8)
        client.wait_idle(srv.url)
        before = client.scrape_metrics(srv.url)
        load_before = os.getloadavg()[0]
        results, wall = load.run(srv.url, reqs, concurrency=args.concurrency, timeout_s=1800)
        idle = client.wait_idle(srv.url, timeout=120)
        summary = load.summarize(results, wall, before, idle)
        summary["startup_s"] = round(startup, 1)
        # the machine may be shared: the 1-minute load average around the measured load
        summary["loadavg_1m"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
        summary["kv_cache_usage_after"] = idle.sum("vllm:kv_cache_usage_perc")
    finally:
        leftovers = srv.stop()
    summary["leftover_processes"] = len(leftovers)
    return summary, results


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", default=str(REPO / "models"), help="tiny fixtures directory")
    p.add_argument("--pairs", nargs="+", default=["fp32", "fp32-oracle"], help="fixture variants")
    p.add_argument("--k", type=int, default=3, help="num_speculative_tokens")
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--abort-fraction", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="also write the JSON here")
    args = p.parse_args(argv)
    # SIGTERM -> SystemExit, so the `finally` in run_one stops the server it started
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    doc: dict[str, Any] = {
        "command": " ".join([_rel(sys.executable), *sys.argv]),
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
        },
        "load": {k: getattr(args, k) for k in ("requests", "concurrency", "abort_fraction", "k")},
        "runs": [],
    }
    logs = Path(tempfile.mkdtemp(prefix="bench-serving-"))
    for variant in args.pairs:
        tdir, adir = ensure_pair(variant, args.models)
        target = str(tdir)
        reqs = load.plan(args.requests, target, seed=args.seed, abort_fraction=args.abort_fraction)
        spec = {"method": "frozen_kv_mtp", "model": str(adir), "num_speculative_tokens": args.k}
        plain, plain_res = run_one(target, None, reqs, args, logs / f"{variant}-plain.log")
        fkm, fkm_res = run_one(target, spec, reqs, args, logs / f"{variant}-spec.log")
        both = sum(a.ok and b.ok for a, b in zip(plain_res, fkm_res, strict=True))
        fkm["outputs_compared"] = both
        fkm["outputs_identical"] = not load.mismatches(plain_res, fkm_res)
        doc["runs"] += [
            {"pair": variant, "method": "none", **plain},
            {"pair": variant, "method": f"frozen_kv_mtp k={args.k}", **fkm},
        ]
    text = json.dumps(doc, indent=1)
    print(text)
    print()
    print(table(doc["runs"]))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    return doc


def _rel(path: str) -> str:
    """``path`` relative to the repository when it lies inside it (e.g. .venv/bin/python)."""
    try:
        return str(Path(path).relative_to(REPO))
    except ValueError:
        return path


def table(runs: list[dict[str, Any]]) -> str:
    cols = [
        ("pair", "pair"),
        ("method", "method"),
        ("completed", "done"),
        ("client_aborts", "aborted"),
        ("server_errors_5xx", "5xx"),
        ("latency_p50_s", "p50 s"),
        ("latency_p90_s", "p90 s"),
        ("ttft_p50_s", "TTFT p50 s"),
        ("throughput_tok_s", "tok/s"),
        ("acceptance_rate", "accept"),
        ("mean_acceptance_length", "accept len"),
        ("outputs_identical", "same output"),
    ]
    head = "| " + " | ".join(c[1] for c in cols) + " |"
    sep = "|" + "|".join("---" for _ in cols) + "|"
    rows = [
        "| " + " | ".join("" if r.get(k) is None else str(r.get(k)) for k, _ in cols) + " |"
        for r in runs
    ]
    return "\n".join([head, sep, *rows])


if __name__ == "__main__":
    main()
