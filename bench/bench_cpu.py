"""CPU benchmark: no speculation vs upstream `mtp` vs `frozen_kv_mtp`, one run, same pair.

    python bench/bench_cpu.py --out bench/results/cpu.json          # (= make bench-cpu)

Each method runs in its own subprocess (a fresh in-process engine), on the same
prompts, greedy. Per batch mode (1: one request at a time; 8: all prompts batched,
8 running at once) it reports tokens/s (median of --repeats timed runs after a
warm-up), vLLM's own acceptance counters (mean acceptance length = 1 +
accepted/drafts, per-position acceptance), the drafter's first-pass rows per
request, rows per draft round, and the median wall time of a draft round.
Prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from vllm_frozen_kv_mtp.demo import resolve_pair  # noqa: E402
from vllm_frozen_kv_mtp.prompts import CODE_PROMPTS  # noqa: E402

METHODS = ("none", "mtp", "frozen_kv_mtp")

PROMPTS = CODE_PROMPTS


def run_method(args: argparse.Namespace) -> dict[str, Any]:
    """Child process: one engine, one method; prints a JSON line."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm import LLM, SamplingParams

    from vllm_frozen_kv_mtp.instrument import (
        DrafterProbe,
        acceptance,
        diff_metrics,
        drafter,
        spec_metrics,
    )

    target, assistant = resolve_pair(args.pair, args.models)
    spec = None
    if args.method != "none":
        spec = {"method": args.method, "model": assistant, "num_speculative_tokens": args.k}
    dtype = "bfloat16" if "bf16" in target else "float32"
    llm = LLM(
        target,
        dtype=dtype,
        max_model_len=1024,
        max_num_seqs=8,
        enforce_eager=True,
        gpu_memory_utilization=args.mem,
        disable_log_stats=False,
        seed=0,
        speculative_config=spec,
    )
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
    probe = DrafterProbe().attach(drafter(llm)) if spec else None
    result: dict[str, Any] = {"method": args.method, "k": args.k if spec else 0, "runs": []}
    for batch in (int(b) for b in args.batches.split(",")):

        def generate(batch: int = batch) -> tuple[list[list[int]], int]:
            if batch == 1:
                outs = [llm.generate([p], params, use_tqdm=False)[0] for p in PROMPTS]
            else:
                outs = llm.generate(PROMPTS, params, use_tqdm=False)
            ids = [list(o.outputs[0].token_ids) for o in outs]
            return ids, sum(len(i) for i in ids)

        if probe:
            probe.enabled = False
        generate()  # warm-up
        if probe:
            probe.reset()
            probe.enabled = True
        before = spec_metrics(llm)
        rates: list[float] = []
        ids: list[list[int]] = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            ids, n = generate()
            rates.append(n / (time.perf_counter() - t))
        run = {
            "batch": batch,
            "tokens_per_s": round(statistics.median(rates), 1),
            "tokens_per_s_runs": [round(r, 1) for r in rates],
            "token_ids": ids,
        }
        if spec:
            run.update(acceptance(diff_metrics(before, spec_metrics(llm))))
            assert probe is not None
            run.update(probe.summary())
        result["runs"].append(run)
    return result


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


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| method | batch | tokens/s | speedup vs none | mean acceptance length | drafts | "
        "accepted | per-position acceptance | first-pass rows/request | drafter rows/round | "
        "draft ms/round | output == none |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
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
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per engine")
    ap.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="engines per method, run interleaved (none, mtp, frozen, none, ...); "
        "tokens/s is the median over all their timed runs, which evens out machine drift",
    )
    ap.add_argument("--mem", type=float, default=0.2)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--out", default="bench/results/cpu.json")
    ap.add_argument("--method", help=argparse.SUPPRESS)  # child-process mode
    args = ap.parse_args()
    if args.method:
        print("RESULT " + json.dumps(run_method(args)), flush=True)
        return
    methods = args.methods.split(",")
    if "none" not in methods or not set(methods) <= set(METHODS):
        ap.error(f"--methods must include 'none' (the baseline) and only {', '.join(METHODS)}")
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in methods}
    for r in range(args.rounds):
        for method in runs:
            cmd = [sys.executable, __file__, "--method", method] + sys.argv[1:]
            print(
                f"[bench-cpu] round {r + 1}/{args.rounds}: {method} ...",
                file=sys.stderr,
                flush=True,
            )
            proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy())
            line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
            if proc.returncode != 0 or line is None:
                sys.stderr.write(proc.stderr[-4000:])
                raise SystemExit(f"bench-cpu: {method} failed (exit {proc.returncode})")
            runs[method].append(json.loads(line.removeprefix("RESULT ")))
    results = [merge_rounds(rs) for rs in runs.values()]
    meta = {
        "pair": args.pair,
        "k": args.k,
        "max_tokens": args.max_tokens,
        "prompts": len(PROMPTS),
        "repeats": args.repeats,
        "rounds": args.rounds,
        "command": "python bench/bench_cpu.py " + " ".join(sys.argv[1:]),
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
