"""Acceptance of greedy vs sampled drafts on the committed trained pair (CPU).

    python -m bench.acceptance_cpu --out bench/results/cpu_acceptance.json

One engine per draft method (``draft_sample_method`` "greedy", then "probabilistic"),
k=3, fp32, the pair's held-out prompts all in one batch; each engine runs every
temperature (0 = greedy requests; above 0 with Gemma 4's recommended top_p 0.95 and
top_k 64). Acceptance is vLLM's own counters: mean acceptance length (AL) = 1 +
accepted / drafts. With greedy drafts a draft is accepted with probability p(draft);
with sampled drafts, sum over tokens of min(p, q). Prints JSON and a table.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from vllm_frozen_kv_mtp.fixtures.trained import eval_prompts, trained_pair_paths

DRAFT_METHODS = ("greedy", "probabilistic")
#: Gemma 4's recommended sampling (temperature varies)
TOP_P, TOP_K = 0.95, 64


def measure(
    draft_method: str, temperatures: list[float], k: int, max_tokens: int, samples: int
) -> list[dict[str, Any]]:
    """One engine; acceptance per temperature."""
    from vllm import SamplingParams

    from vllm_frozen_kv_mtp.demo import tiny_llm
    from vllm_frozen_kv_mtp.instrument import acceptance, diff_metrics, spec_metrics

    target, assistant = trained_pair_paths()
    prompts = [{"prompt_token_ids": p} for p in eval_prompts()]
    spec = {
        "method": "frozen_kv_mtp",
        "model": str(assistant),
        "num_speculative_tokens": k,
        "draft_sample_method": draft_method,
    }
    llm = tiny_llm(
        str(target),
        spec,
        dtype="float32",
        max_num_seqs=len(prompts),
        kv_cache_memory_bytes=256 << 20,
    )
    rows = []
    try:
        for t in temperatures:
            truncation = {"top_p": TOP_P, "top_k": TOP_K} if t > 0 else {}
            params = SamplingParams(
                temperature=t, max_tokens=max_tokens, ignore_eos=True, **truncation
            )
            # greedy output is the same every time: one pass is enough
            batch = prompts * (samples if t > 0 else 1)
            before = spec_metrics(llm)
            start = time.perf_counter()
            llm.generate(batch, params, use_tqdm=False)
            wall = time.perf_counter() - start
            row = {"draft_sample_method": draft_method, "temperature": t, **truncation}
            row.update(acceptance(diff_metrics(before, spec_metrics(llm))))
            row["wall_s"] = round(wall, 1)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    finally:
        with contextlib.suppress(Exception):
            llm.llm_engine.engine_core.shutdown()
        del llm
        gc.collect()
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    by = {(r["temperature"], r["draft_sample_method"]): r for r in rows}
    lines = [
        "| temperature | AL greedy drafts | AL sampled drafts | sampled / greedy | "
        "per-position acceptance, greedy | per-position acceptance, sampled |",
        "|---|---|---|---|---|---|",
    ]
    for t in sorted({r["temperature"] for r in rows}):
        g, s = by.get((t, "greedy")), by.get((t, "probabilistic"))
        if g is None or s is None:
            continue
        ratio = s["mean_acceptance_length"] / g["mean_acceptance_length"]
        lines.append(
            f"| {t} | {g['mean_acceptance_length']:.3f} | {s['mean_acceptance_length']:.3f} | "
            f"{ratio:.2f}x | "
            + " / ".join(f"{p:.2f}" for p in g["per_position_acceptance"])
            + " | "
            + " / ".join(f"{p:.2f}" for p in s["per_position_acceptance"])
            + " |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--temperatures", default="0,0.7,1.0")
    ap.add_argument(
        "--samples", type=int, default=1, help="passes over the prompts at each temperature > 0"
    )
    ap.add_argument("--out", default="bench/results/cpu_acceptance.json")
    args = ap.parse_args()
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    temperatures = [float(t) for t in args.temperatures.split(",")]
    rows: list[dict[str, Any]] = []
    for method in DRAFT_METHODS:
        rows += measure(method, temperatures, args.k, args.max_tokens, args.samples)
    meta = {
        "pair": "trained",
        "k": args.k,
        "max_tokens": args.max_tokens,
        "prompts": len(eval_prompts()),
        "samples_per_prompt": args.samples,
        "command": "python -m bench.acceptance_cpu " + " ".join(sys.argv[1:]),
    }
    report = {"meta": meta, "results": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report))
    print(table(rows))


if __name__ == "__main__":
    main()
