"""A dense assistant head alone on CUDA (no engine): upstream's draft head (GEMM to
full-vocabulary logits, soft-cap, argmax) against ``dense_head="fused"`` and ``"fp8"``
(vllm_frozen_kv_mtp/kernels/dense_head.py), at the 31B assistant's head shape.

    python -m bench.micro.dense_head_gpu --rows 1,8,16,32,64,128 \\
        --json bench/results/h200_dense_head.json

The table: 262144 x 1024 (``--vocab``, ``--hidden``), bf16, random weights. Each call is
captured in a CUDA graph and replayed (median us per call). ``agree`` is the share of
rows whose pick equals upstream's: 1.0 expected for "fused" up to bf16 near-ties of
random weights, lower for "fp8" (quantised rows; drafts are verified, so only acceptance
can move). "fp8 as launched" is what the option runs: ``DenseHead.launch``'s choice of
table and launch shape for that row count. ``--variants`` also times the fp8 head at
other launch shapes (vocabulary rows and hidden chunk per program, warps, pipeline
stages, most draft rows per program).
Prints a JSON line per row count, then a table.

``--hidden 5376`` (31B) or ``--hidden 2560`` (E4B) times the same heads at a target's
logits shape, at the rows a verify pass scores ((k+1) x c): how much of a speculative
step's extra time the target's logits could give back to a greedy-verify GEMM + argmax
(``remote_gpu_session.sh`` VERIFY_HEADS=1).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

SOFTCAP = 30.0  # Gemma 4's final_logit_softcapping


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", default="1,8,16,32,64,128")
    ap.add_argument("--vocab", type=int, default=262144)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--replays", type=int, default=200)
    ap.add_argument("--json", help="also write the rows here")
    ap.add_argument(
        "--variants",
        default="64:64,128:128,256:64,128:64:8,128:64:4:4,128:64:4:2:128",
        help="fp8 launch shapes to time besides the default, each "
        "block_n[:block_k[:warps[:stages[:max_block_m]]]]",
    )
    args = ap.parse_args()

    import torch

    from bench.micro.timing import time_graph
    from vllm_frozen_kv_mtp.kernels.dense_head import DenseHead, dense_top_tokens, quantize_rows_fp8

    g = torch.Generator(device="cuda").manual_seed(0)
    weight = torch.randn(args.vocab, args.hidden, device="cuda", generator=g)
    weight = (weight * args.hidden**-0.5).to(torch.bfloat16)
    w8, scale = quantize_rows_fp8(weight)
    suppress = torch.tensor([0, 1, 2], device="cuda")

    def upstream(h: Any) -> Any:
        logits = torch.nn.functional.linear(h, weight)
        logits = torch.tanh(logits / SOFTCAP) * SOFTCAP
        logits.index_fill_(1, suppress, float("-inf"))
        return logits.argmax(dim=-1)

    # DenseHead.run, not top_tokens, whose fallback would hide a failed launch here
    launched = DenseHead(weight=w8, scale=scale, vocab=args.vocab, suppress=suppress, table=weight)

    heads: dict[str, Callable[[Any], Any]] = {
        "upstream": upstream,
        "fused": lambda h: dense_top_tokens(h, weight, None, args.vocab, suppress),
        "fp8": lambda h: dense_top_tokens(h, w8, scale, args.vocab, suppress),
        "fp8_launched": launched.run,
    }
    for v in (v for v in args.variants.split(",") if v):
        shape = dict(zip(("block_n", "block_k", "num_warps", "num_stages", "max_block_m"),
                         (int(x) for x in v.split(":")), strict=False))  # fmt: skip
        heads[f"fp8:{v}"] = partial(
            dense_top_tokens, weight=w8, scale=scale, vocab=args.vocab, suppress=suppress, **shape
        )
    out_rows: list[dict[str, Any]] = []
    with torch.inference_mode():
        for rows in (int(r) for r in args.rows.split(",")):
            h = torch.randn(rows, args.hidden, device="cuda", generator=g).to(torch.bfloat16)
            timed = {}
            for name, fn in heads.items():
                try:
                    timed[name] = time_graph(fn, h, args.replays)
                except Exception as e:  # a variant past the shared-memory limit
                    if ":" not in name:
                        raise
                    print(f"SKIP {name}: {type(e).__name__}: {e}"[:300])
            picks = timed["upstream"][1]
            variants = {n: round(t, 2) for n, (t, _) in timed.items() if ":" in n}
            row = {
                "rows": rows,
                "vocab": args.vocab,
                "hidden": args.hidden,
                **{
                    f"{n}_us": round(timed[n][0], 2)
                    for n in ("upstream", "fused", "fp8", "fp8_launched")
                },
                **{
                    f"{n}_agree": round(float((timed[n][1] == picks).float().mean()), 3)
                    for n in ("fused", "fp8", "fp8_launched")
                },
                # every fp8 launch shape picks what the default fp8 launch picks
                "fp8_variants_same": all(
                    torch.equal(o, timed["fp8"][1]) for n, (_, o) in timed.items() if ":" in n
                ),  # fmt: skip
                "fp8_variants_us": variants,
                "fp8_best": min(variants, key=lambda n: variants[n]) if variants else None,
            }
            print("ROW", json.dumps(row), flush=True)
            out_rows.append(row)
    print(
        f"| rows ({args.vocab} x {args.hidden}) | upstream us | fused us | fp8 us | "
        "fp8 as launched us | fp8, best shape us | fused agree | fp8 agree |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in out_rows:
        b = r["fp8_best"]
        best = f"{r['fp8_variants_us'][b]} ({b.partition(':')[2]})" if b else "-"
        print(
            f"| {r['rows']} | {r['upstream_us']} | {r['fused_us']} | {r['fp8_us']} | "
            f"{r['fp8_launched_us']} | {best} | "
            f"{r['fused_agree']} | {r['fp8_agree']} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(out_rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
