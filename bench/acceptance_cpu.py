"""Acceptance of greedy vs sampled drafts on the committed trained pair (CPU).

    python -m bench.acceptance_cpu --samples 4 --max-tokens 64 --assistant greedy-distilled
    python -m bench.acceptance_cpu --samples 4 --max-tokens 64 --assistant kl

One engine per assistant and draft method (``draft_sample_method`` "greedy", then
"probabilistic"), k=3, fp32, the pair's held-out prompts all in one batch; each engine
runs every temperature (0 = greedy requests; above 0 with Gemma 4's recommended top_p
0.95 and top_k 64). Acceptance is vLLM's own counters: mean acceptance length (AL) =
1 + accepted / drafts. With greedy drafts a draft is accepted with probability
p(draft); with sampled drafts, sum over tokens of min(p, q).

The target has two committed assistants (``--assistant``, repeatable; default both):
``greedy-distilled``, trained on the target's greedy tokens, and ``kl``, distilled
against its whole distribution at temperature 1. Rows are tagged with the assistant;
rows of assistants not run this time are kept from ``--out`` when it was measured
with the same k, max tokens and samples, so one assistant can be re-measured alone.
Prints JSON and a table.
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

from bench.engine import EngineSettings, speculative_config
from bench.method import MethodSpec
from devkit.fixtures.trained import ASSISTANTS, eval_prompts, trained_pair_paths

DRAFT_METHODS = ("greedy", "probabilistic")
#: Gemma 4's recommended sampling (temperature varies)
TOP_P, TOP_K = 0.95, 64


def measure(
    draft_method: str,
    temperatures: list[float],
    k: int,
    max_tokens: int,
    samples: int,
    assistant_name: str = "greedy-distilled",
) -> list[dict[str, Any]]:
    """One engine; acceptance per temperature."""
    from devkit.demo import tiny_llm

    target, assistant = trained_pair_paths(assistant=assistant_name)
    prompts = [{"prompt_token_ids": p} for p in eval_prompts()]
    method = MethodSpec("frozen_kv_mtp", k, {"draft_sample_method": draft_method})
    spec = speculative_config(EngineSettings(method), str(assistant))
    llm = tiny_llm(
        str(target),
        spec,
        dtype="float32",
        max_num_seqs=len(prompts),
        kv_cache_memory_bytes=256 << 20,
    )
    try:
        return measure_temperatures(
            llm,
            prompts,
            temperatures,
            max_tokens,
            samples,
            {"assistant": assistant_name, "draft_sample_method": draft_method},
        )
    finally:
        with contextlib.suppress(Exception):
            llm.llm_engine.engine_core.shutdown()
        del llm
        gc.collect()


def measure_temperatures(
    llm: Any,
    prompts: list[Any],
    temperatures: list[float],
    max_tokens: int,
    samples: int,
    tags: dict[str, Any],
) -> list[dict[str, Any]]:
    """Acceptance of one running engine at each temperature (0: greedy requests, one pass;
    above 0: Gemma 4's recommended top_p / top_k, ``samples`` passes), rows tagged."""
    from vllm import SamplingParams

    from devkit.instrument import acceptance, diff_metrics, spec_metrics

    rows = []
    for t in temperatures:
        truncation = {"top_p": TOP_P, "top_k": TOP_K} if t > 0 else {}
        params = SamplingParams(temperature=t, max_tokens=max_tokens, ignore_eos=True, **truncation)
        # greedy output is the same every time: one pass is enough
        batch = prompts * (samples if t > 0 else 1)
        before = spec_metrics(llm)
        start = time.perf_counter()
        llm.generate(batch, params, use_tqdm=False)
        wall = time.perf_counter() - start
        row = {**tags, "temperature": t, **truncation}
        row.update(acceptance(diff_metrics(before, spec_metrics(llm))))
        row["wall_s"] = round(wall, 1)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    by = {
        (r.get("assistant", "greedy-distilled"), r["temperature"], r["draft_sample_method"]): r
        for r in rows
    }
    lines = [
        "| assistant | temperature | AL greedy drafts | AL sampled drafts | sampled / greedy | "
        "per-position acceptance, greedy | per-position acceptance, sampled |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in [a for a in ASSISTANTS if any(key[0] == a for key in by)]:
        for t in sorted({key[1] for key in by if key[0] == name}):
            g, s = by.get((name, t, "greedy")), by.get((name, t, "probabilistic"))
            if g is None or s is None:
                continue
            ratio = s["mean_acceptance_length"] / g["mean_acceptance_length"]
            lines.append(
                f"| {name} | {t} | {g['mean_acceptance_length']:.3f} | "
                f"{s['mean_acceptance_length']:.3f} | {ratio:.2f}x | "
                + " / ".join(f"{p:.2f}" for p in g["per_position_acceptance"])
                + " | "
                + " / ".join(f"{p:.2f}" for p in s["per_position_acceptance"])
                + " |"
            )
    return "\n".join(lines)


def kept_rows(path: Path, meta: dict[str, Any], measured: list[str]) -> list[dict[str, Any]]:
    """Rows of other assistants from an earlier report at ``path`` with the same settings."""
    if not path.is_file():
        return []
    old = json.loads(path.read_text())
    same = ("k", "max_tokens", "prompts", "samples_per_prompt")
    if any(old.get("meta", {}).get(key) != meta[key] for key in same):
        return []
    return [
        r
        for r in old.get("results", [])
        if "assistant" in r and r["assistant"] in ASSISTANTS and r["assistant"] not in measured
    ]


def add_run_args(ap: argparse.ArgumentParser, samples: int) -> None:
    """The flags every acceptance benchmark takes (this one and ``bench.acceptance_gpu``)."""
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--temperatures", default="0,0.7,1.0")
    ap.add_argument(
        "--samples",
        type=int,
        default=samples,
        help="passes over the prompts at each temperature > 0",
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add_run_args(ap, samples=1)
    ap.add_argument(
        "--assistant",
        action="append",
        choices=list(ASSISTANTS),
        help="assistant(s) to measure (repeatable; default: all)",
    )
    ap.add_argument("--out", default="bench/results/cpu_acceptance.json")
    args = ap.parse_args()
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    temperatures = [float(t) for t in args.temperatures.split(",")]
    assistants = args.assistant or list(ASSISTANTS)
    rows: list[dict[str, Any]] = []
    for name in assistants:
        for method in DRAFT_METHODS:
            rows += measure(method, temperatures, args.k, args.max_tokens, args.samples, name)
    command = "python -m bench.acceptance_cpu " + " ".join(sys.argv[1:])
    meta: dict[str, Any] = {
        "pair": "trained",
        "k": args.k,
        "max_tokens": args.max_tokens,
        "prompts": len(eval_prompts()),
        "samples_per_prompt": args.samples,
    }
    out = Path(args.out)
    kept = kept_rows(out, meta, assistants)
    commands = {name: command for name in assistants}
    if kept:
        old_commands = json.loads(out.read_text())["meta"].get("commands", {})
        for name in {r["assistant"] for r in kept}:
            commands[name] = old_commands.get(name, "")
    meta["assistants"] = {name: f"{ASSISTANTS[name]}/" for name in ASSISTANTS}
    meta["commands"] = {name: commands[name] for name in ASSISTANTS if name in commands}
    order = {name: i for i, name in enumerate(ASSISTANTS)}
    all_rows = sorted(kept + rows, key=lambda r: order[r["assistant"]])
    report = {"meta": meta, "results": all_rows}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report))
    print(table(all_rows))


if __name__ == "__main__":
    main()
