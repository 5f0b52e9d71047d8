"""Per-step cost on CUDA, alone (no engine), of cutting a sampled draft's q by each
request's top_k / top_p (`drafters/draft_q.py`, which the V1 runner applies
and Model Runner V2 does not) on one draft step's logits, Gemma 4's vocabulary (262144),
bf16, captured in a CUDA graph as V2's whole-round draft graph would hold it. A round
would pay it once per draft step (k times).

    python -m bench.micro.draft_q_gpu --rows 1,8,32,128,256 --json bench/results/h200_draft_q.json

Settings per row: Gemma 4's recommended temperature 1.0, top_k 64, top_p 0.95, and the
two cuts alone, on bell-shaped logits; and the recommended setting on rows shaped like an
E2B/E4B centroid head's (4096 candidate logits, every other token at bf16's lowest finite
value, as vLLM's masked embedder fills them). Prints JSON rows and a table (microseconds
per draft step).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bench.micro.timing import time_graph

SETTINGS: dict[str, dict[str, Any]] = {
    "top_k=64,top_p=0.95": {"top_k": 64, "top_p": 0.95},
    "top_k=64": {"top_k": 64, "top_p": None},
    "top_p=0.95": {"top_k": None, "top_p": 0.95},
    "top_k=64,top_p=0.95,centroid-masked": {"top_k": 64, "top_p": 0.95, "candidates": 4096},
}


def measure(rows: int, vocab: int, setting: dict[str, Any], replays: int) -> dict[str, Any]:
    import torch

    from vllm_frozen_kv_mtp.drafters.draft_q import mask_outside_top_k_top_p

    g = torch.Generator(device="cuda").manual_seed(rows)
    logits = torch.randn(rows, vocab, device="cuda", generator=g).mul_(4).to(torch.bfloat16)
    if "candidates" in setting:
        keep = torch.rand(rows, vocab, device="cuda", generator=g).argsort(dim=1)
        outside = keep[:, setting["candidates"] :]
        logits.scatter_(1, outside, torch.finfo(torch.bfloat16).min)
    temperature = torch.ones(rows, device="cuda")
    top_k = (
        None
        if setting["top_k"] is None
        else torch.full((rows,), setting["top_k"], dtype=torch.int32, device="cuda")
    )
    top_p = (
        None if setting["top_p"] is None else torch.full((rows,), setting["top_p"], device="cuda")
    )
    work = logits.clone()

    def cut(x: Any) -> Any:
        work.copy_(x)  # a fresh copy each replay: the cut is in place
        mask_outside_top_k_top_p(work, temperature, top_k, top_p)
        return work

    def copy_only(x: Any) -> Any:
        work.copy_(x)
        return work

    us, out = time_graph(cut, logits, replays)
    copy_us, _ = time_graph(copy_only, logits, replays)
    kept = (~out.isneginf()).sum(dim=1).float()
    return {
        "rows": rows,
        "vocab": vocab,
        "us_per_draft_step": round(us - copy_us, 2),
        "kept_tokens_per_row": round(kept.mean().item(), 1),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="1,8,32,128,256")
    ap.add_argument("--vocab", type=int, default=262144)
    ap.add_argument("--replays", type=int, default=50)
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args(argv)
    import vllm

    out = []
    for name, setting in SETTINGS.items():
        for rows in (int(r) for r in args.rows.split(",")):
            row = {"setting": name, **measure(rows, args.vocab, setting, args.replays)}
            row["vllm_version"] = vllm.__version__
            print(json.dumps(row), flush=True)
            out.append(row)
    print("\n| setting | rows | us per draft step | kept tokens per row |\n|---|---|---|---|")
    for r in out:
        cells = (r["setting"], r["rows"], r["us_per_draft_step"], r["kept_tokens_per_row"])
        print("| " + " | ".join(str(c) for c in cells) + " |")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
