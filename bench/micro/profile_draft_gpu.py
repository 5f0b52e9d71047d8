"""Kernel breakdown of one draft round on CUDA, for E4B-shaped dummy weights.

    python -m bench.micro.profile_draft_gpu --method frozen_kv_mtp --concurrency 32
    python -m bench.micro.profile_draft_gpu --method frozen_kv_mtp --concurrency 32 --mode graphs

Prints JSON (kernels per round, summed kernel time per round, host ms per round) and
the top kernels. ``eager`` (default) shows every kernel as the drafter's own modules
launch it; ``graphs`` profiles the round as it runs in production (torch.compile,
CUDA-graph replay: CUPTI still reports each kernel). Compare the summed kernel time
with bench.gpu's draft-round time to see whether a round is launch- or work-bound.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from typing import Any

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="E4B")
    ap.add_argument(
        "--method",
        default="frozen_kv_mtp",
        help="a method string (bench/method.py); k 3 unless given",
    )
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--shapes", default="models/shapes")
    ap.add_argument("--mode", choices=("eager", "graphs"), default="eager")
    args = ap.parse_args()

    import torch
    from vllm import SamplingParams

    from bench.engine import EngineSettings, build
    from bench.gpu import parse_method, random_prompts
    from devkit.instrument import drafter

    settings = EngineSettings(
        parse_method(args.method),
        model=args.model,
        shapes=args.shapes,
        default_k=3,
        allow_sweep=False,
        # graphs: as production runs it, torch.compile + CUDA graphs (vLLM's default)
        mode="eager" if args.mode == "eager" else "default",
        max_model_len=1024,
        max_num_seqs=args.concurrency,
        gpu_memory_utilization=0.85 if args.model == "31B" else 0.5,  # 62 GB of 31B weights
    )
    llm = build(settings).llm
    d = drafter(llm)
    original = d.propose
    state: dict[str, Any] = {"left": 0, "events": [], "host_ms": []}

    def propose(*a: Any, **kw: Any) -> Any:
        if state["left"] <= 0:
            return original(*a, **kw)
        state["left"] -= 1
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            t = time.perf_counter()
            out = original(*a, **kw)
            state["host_ms"].append(1000 * (time.perf_counter() - t))
            torch.cuda.synchronize()
        state["events"].append(prof.key_averages())
        return out

    d.propose = propose
    rng = random.Random(0)
    prompts = random_prompts(rng, args.concurrency, 128, 200000)
    params = SamplingParams(temperature=0.0, max_tokens=32, ignore_eos=True, detokenize=False)
    llm.generate(prompts, params, use_tqdm=False)  # warm-up
    state["left"] = args.rounds
    llm.generate(prompts, params, use_tqdm=False)
    rounds = state["events"][2:]  # skip the post-prefill rounds
    per: dict[str, list[float]] = {}
    counts = []
    for ka in rounds:
        n = 0
        for e in ka:
            t = float(getattr(e, "device_time_total", 0) or getattr(e, "cuda_time_total", 0) or 0)
            if t <= 0:
                continue
            per.setdefault(e.key, []).append(t / 1000)
            n += e.count
        counts.append(n)
    total = sum(sum(v) for v in per.values()) / max(len(rounds), 1)
    top = sorted(per.items(), key=lambda kv: -sum(kv[1]))[:20]
    print(
        "PROFILE",
        json.dumps(
            {
                "model": args.model,
                "method": args.method,
                "mode": args.mode,
                "concurrency": args.concurrency,
                "rounds": len(rounds),
                "kernels_per_round": sum(counts) / max(len(counts), 1),
                "kernel_ms_per_round": round(total, 3),
                # launch time under the profiler (inflated by it; compare methods only)
                "host_ms_per_round": round(statistics.median(state["host_ms"][2:] or [0]), 3),
                "top": [[k[:80], round(sum(v) / len(rounds), 4)] for k, v in top],
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
