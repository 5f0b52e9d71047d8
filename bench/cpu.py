"""CPU benchmark: no speculation vs upstream `mtp` vs `frozen_kv_mtp`, one run, same pair.

    python -m bench.cpu --out bench/results/cpu.json          # (= make bench-cpu)

Each method runs in its own subprocess (a fresh in-process engine), on the same
prompts, greedy. The engines of one round are alive together and take turns: every
timed run of one method is followed by one of each other method (the order rotates
per repeat), so a slow spell of this shared machine hits all methods alike. Per
batch mode (1: one request at a time; 8: all prompts batched, 8 running at once) it
reports tokens/s (median over all timed runs after a warm-up), the paired ratio to
upstream ``mtp`` (median of the ratios of runs taken back to back), vLLM's own
acceptance counters (mean acceptance length = 1 + accepted/drafts, per-position
acceptance), the drafter's first-pass rows per request, rows per draft round, and
the median wall time of a draft round. Prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.engine import EngineSettings, speculative_config
from bench.method import parse
from devkit.demo import resolve_pair, tiny_llm
from devkit.fixtures.prompts import CODE_PROMPTS

METHODS = ("none", "mtp", "frozen_kv_mtp")

PROMPTS = CODE_PROMPTS


def serve_method(args: argparse.Namespace) -> None:
    """Child process: one engine, one method; runs the parent's commands (one JSON
    line each on stdin) and answers each with a ``RESULT`` JSON line."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm import SamplingParams

    from devkit.instrument import DrafterProbe, acceptance, diff_metrics, drafter, spec_metrics

    target, assistant = resolve_pair(args.pair, args.models)
    spec = speculative_config(EngineSettings(parse(args.method), default_k=args.k), assistant)
    llm = tiny_llm(target, spec, kv_cache_memory_bytes=args.kv_mib << 20)
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
    probe = DrafterProbe().attach(drafter(llm)) if spec else None

    def generate(batch: int) -> tuple[list[list[int]], int]:
        if batch == 1:
            outs = [llm.generate([p], params, use_tqdm=False)[0] for p in PROMPTS]
        else:
            outs = llm.generate(PROMPTS, params, use_tqdm=False)
        ids = [list(o.outputs[0].token_ids) for o in outs]
        return ids, sum(len(i) for i in ids)

    def reply(obj: dict[str, Any]) -> None:
        print("RESULT " + json.dumps(obj), flush=True)

    reply({"ready": args.method})
    before: dict[str, Any] = {}
    ids: list[list[int]] = []
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["cmd"] == "warmup":  # untimed, uncounted; then counters restart
            if probe:
                probe.enabled = False
            generate(cmd["batch"])
            if probe:
                probe.reset()
                probe.enabled = True
            before = spec_metrics(llm)
            reply({})
        elif cmd["cmd"] == "run":
            t = time.perf_counter()
            ids, n = generate(cmd["batch"])
            reply({"tokens_per_s": n / (time.perf_counter() - t)})
        elif cmd["cmd"] == "stats":  # counters since the warm-up, outputs of the last run
            stats: dict[str, Any] = {"token_ids": ids}
            if spec:
                stats.update(acceptance(diff_metrics(before, spec_metrics(llm))))
                assert probe is not None
                stats.update(probe.summary())
            reply(stats)
        else:
            return


class Engine:
    """The parent's handle on one child engine."""

    def __init__(self, method: str) -> None:
        self.method = method
        cmd = [sys.executable, "-m", "bench.cpu", "--method", method] + sys.argv[1:]
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=os.environ.copy(),
        )
        # stderr is drained in the background so the child never blocks on it
        self.err: list[str] = []
        self._drain = threading.Thread(target=self._read_err, daemon=True)
        self._drain.start()

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.err = (self.err + [line])[-200:]

    def result(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("RESULT "):
                out: dict[str, Any] = json.loads(line.removeprefix("RESULT "))
                return out
        sys.stderr.write("".join(self.err)[-4000:])
        raise SystemExit(f"bench-cpu: {self.method} failed (exit {self.proc.wait()})")

    def ask(self, cmd: str, batch: int = 0) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"cmd": cmd, "batch": batch}) + "\n")
        self.proc.stdin.flush()
        return self.result()

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
            self.proc.stdin.close()
            self.proc.wait()


def run_round(
    methods: list[str], batches: list[int], repeats: int, k: int, r: int
) -> dict[str, Any]:
    """One engine per method, alive together; timed runs interleaved across them."""
    engines: list[Engine] = []
    try:
        for m in methods:  # one start-up at a time (2 cores)
            print(f"[bench-cpu] round {r}: starting {m} ...", file=sys.stderr, flush=True)
            engines.append(Engine(m))
            engines[-1].result()  # ready
        out: dict[str, Any] = {
            m: {"method": m, "k": 0 if m == "none" else k, "runs": []} for m in methods
        }
        for batch in batches:
            for e in engines:
                e.ask("warmup", batch)
            rates: dict[str, list[float]] = {m: [] for m in methods}
            for i in range(repeats):
                turn = engines[i % len(engines) :] + engines[: i % len(engines)]
                for e in turn:
                    rates[e.method].append(e.ask("run", batch)["tokens_per_s"])
                print(
                    f"[bench-cpu] round {r}, batch {batch}, repeat {i + 1}: "
                    + ", ".join(f"{m} {rates[m][-1]:.1f}" for m in methods),
                    file=sys.stderr,
                    flush=True,
                )
            for e in engines:
                run = {"batch": batch, "tokens_per_s_runs": [round(x, 1) for x in rates[e.method]]}
                out[e.method]["runs"].append(run | e.ask("stats", batch))
        return out
    finally:
        for e in engines:
            e.close()


def merge_rounds(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One method's engines merged: median tokens/s over every timed run; the
    counters and outputs come from the first engine (greedy: all engines agree)."""
    merged = dict(rounds[0])
    merged["runs"] = []
    for i, first in enumerate(rounds[0]["runs"]):
        rates = [x for r in rounds for x in r["runs"][i]["tokens_per_s_runs"]]
        same = all(r["runs"][i]["token_ids"] == first["token_ids"] for r in rounds)
        merged["runs"].append(
            first
            | {
                "tokens_per_s": round(statistics.median(rates), 1),
                "tokens_per_s_runs": rates,
                "engines_agree": same,
            }
        )
    return merged


def add_paired_ratios(results: list[dict[str, Any]], base: str = "mtp") -> None:
    """Per run, ``method rate / base rate`` of the two runs taken in the same repeat
    (back to back); the median of those ratios is robust to the machine's drift."""
    ref = next((r for r in results if r["method"] == base), None)
    if ref is None:
        return
    for res in results:
        for run, b in zip(res["runs"], ref["runs"], strict=True):
            ratios = [
                x / y for x, y in zip(run["tokens_per_s_runs"], b["tokens_per_s_runs"], strict=True)
            ]
            run[f"paired_ratio_vs_{base}"] = round(statistics.median(ratios), 3)


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| method | batch | tokens/s | speedup vs none | mean acceptance length | drafts | "
        "accepted | per-position acceptance | first-pass rows/request | drafter rows/round | "
        "draft ms/round | output == none | vs mtp (paired) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    base = {r["batch"]: r for r in next(x for x in results if x["method"] == "none")["runs"]}
    for res in results:
        for r in res["runs"]:
            b = base[r["batch"]]
            cells = [
                res["method"],
                r["batch"],
                r["tokens_per_s"],
                f"{r['tokens_per_s'] / b['tokens_per_s']:.2f}x",
                r.get("mean_acceptance_length", "-"),
                r.get("drafts", "-"),
                r.get("accepted_tokens", "-"),
                " / ".join(f"{p:.2f}" for p in r.get("per_position_acceptance", [])) or "-",
                r.get("first_pass_rows_per_request", "-"),
                r.get("drafter_rows_per_round", "-"),
                r.get("draft_ms_per_round", "-"),
                "yes" if r["token_ids"] == b["token_ids"] else "NO",
                f"{r['paired_ratio_vs_mtp']:.3f}x" if "paired_ratio_vs_mtp" in r else "-",
            ]
            lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--pair",
        default="trained",
        help="'trained' (committed pair) or a fixture variant (fp32, fp32-oracle, ...)",
    )
    ap.add_argument("--models", default="models", help="where fixture variants are built")
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per engine and batch")
    ap.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="engine sets, one after the other (each: one live engine per method, timed "
        "runs taking turns); tokens/s is the median over all their timed runs",
    )
    ap.add_argument("--kv-mib", type=int, default=256, help="KV cache per engine (MiB)")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--out", default="bench/results/cpu.json")
    ap.add_argument("--method", help=argparse.SUPPRESS)  # child-process mode
    args = ap.parse_args()
    if args.method:
        serve_method(args)
        return
    methods = args.methods.split(",")
    if "none" not in methods or not set(methods) <= set(METHODS):
        ap.error(f"--methods must include 'none' (the baseline) and only {', '.join(METHODS)}")
    batches = [int(b) for b in args.batches.split(",")]
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in methods}
    for r in range(args.rounds):
        done = run_round(methods, batches, args.repeats, args.k, r + 1)
        for m in methods:
            runs[m].append(done[m])
    results = [merge_rounds(rs) for rs in runs.values()]
    add_paired_ratios(results)
    meta = {
        "pair": args.pair,
        "k": args.k,
        "max_tokens": args.max_tokens,
        "prompts": len(PROMPTS),
        "repeats": args.repeats,
        "rounds": args.rounds,
        "command": "python -m bench.cpu " + " ".join(sys.argv[1:]),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    slim = [
        {
            **r,
            "runs": [
                {k: v for k, v in run.items() if k != "token_ids"}
                | {
                    "output_equals_none": run["token_ids"]
                    == next(b for b in results[0]["runs"] if b["batch"] == run["batch"])[
                        "token_ids"
                    ]
                }
                for run in r["runs"]
            ],
        }
        for r in results
    ]
    Path(args.out).write_text(json.dumps({"meta": meta, "results": slim}, indent=1) + "\n")
    print(json.dumps({"meta": meta, "results": slim}))
    print(table(results))


if __name__ == "__main__":
    main()
