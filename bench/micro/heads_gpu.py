"""Per-step cost of each centroid head on CUDA, alone (no engine): E2B/E4B assistant head
shape (256 wide, 262144 tokens, 2048 centroids, top 32), random bf16 weights.

    python -m bench.micro.heads_gpu --rows 1,8,32,128 --json bench/results/h200_heads.json

For each head and row count it captures one head call in a CUDA graph (as the draft
round does), replays it, and prints the median microseconds per call, plus how often
each head's pick equals upstream's (Model Runner V2's default: centroid-masked
full-vocabulary logits, then argmax). Heads: upstream, sparse, dense, fused.

    python -m bench.micro.heads_gpu --sweep 64x4,128x4,128x4:torch

also times the fused head's per-centroid kernel at other launch shapes (hidden-dim
chunk x warps; the default is centroid_kernel.BEST_KERNEL_BLOCK_D x BEST_KERNEL_WARPS),
and with ":torch" with torch.topk selecting the top centroids instead of the Triton
top-k kernel (centroid_kernel.CENTROID_TOPK).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bench.micro.timing import time_graph

HEADS = ("upstream", "sparse", "dense", "fused")


def build(dim: int, vocab: int, centroids: int, top_k: int, seed: int = 0) -> Any:
    import torch
    from vllm.model_executor.models.gemma4_mtp import Gemma4MTPMaskedEmbedder

    g = torch.Generator().manual_seed(seed)
    me = Gemma4MTPMaskedEmbedder(dim, vocab, centroids, top_k)
    with torch.no_grad():
        me.centroids.weight.copy_(torch.randn(centroids, dim, generator=g) * dim**-0.5)
        me.token_ordering.copy_(torch.randperm(vocab, generator=g))
    me = me.to("cuda", torch.bfloat16)
    weight = (torch.randn(vocab, dim, generator=g) * dim**-0.5).to("cuda", torch.bfloat16)
    return SimpleNamespace(
        masked_embedding=me, _suppress_idx=None, _get_full_lm_head_weight=lambda: weight
    )


def head_fn(model: Any, head: str) -> Any:
    from vllm.model_executor.models.gemma4_mtp import Gemma4MTP

    from vllm_frozen_kv_mtp.drafters.heads import top_tokens

    if head == "upstream":
        return lambda h: Gemma4MTP.compute_logits(model, h).argmax(dim=-1)
    return lambda h: top_tokens(model, h, head)


def launch_shapes(text: str) -> list[tuple[int, int, str]]:
    """``"64x4,128x4:torch"`` -> [(64, 4, "triton"), (128, 4, "torch")]: hidden-dim chunk,
    warps, and how the head selects the top centroids (``CENTROID_TOPK``; default the
    Triton kernel). Refused early unless chunk and warps are powers of two (a shape
    Triton rejects would count as a fused-head fallback and spoil later rows)."""
    shapes = []
    for item in filter(None, text.split(",")):
        shape, _, topk = item.partition(":")
        parts = shape.split("x")
        if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise argparse.ArgumentTypeError(f"{item!r}: use BLOCK_DxWARPS[:torch], e.g. 128x8")
        block_d, warps = int(parts[0]), int(parts[1])
        if block_d & (block_d - 1) or warps & (warps - 1) or warps > 16:
            raise argparse.ArgumentTypeError(
                f"{item!r}: BLOCK_D and warps must be powers of two (warps <= 16)"
            )
        if topk not in ("", "triton", "torch"):
            raise argparse.ArgumentTypeError(f"{item!r}: the top-k is 'triton' or 'torch'")
        shapes.append((block_d, warps, topk or "triton"))
    return shapes


def emit(rows: int, head: str, us: float, pick: Any, upstream: Any) -> dict[str, Any]:
    """One result row, printed as it comes."""
    same = float((pick == upstream).float().mean())
    row = {
        "rows": rows,
        "head": head,
        "us_per_call": round(us, 2),
        "same_as_upstream": round(same, 4),
    }
    print("ROW", json.dumps(row), flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", default="1,8,32,128")
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=262144)
    ap.add_argument("--centroids", type=int, default=2048)
    ap.add_argument("--top-k", type=int, default=32)
    ap.add_argument("--replays", type=int, default=200)
    ap.add_argument("--json", help="also write the rows here")
    ap.add_argument(
        "--sweep",
        type=launch_shapes,
        default=[],
        help="fused launch shapes to time, e.g. 64x4,128x4:torch (BLOCK_DxWARPS[:torch])",
    )
    args = ap.parse_args()

    import torch

    import vllm_frozen_kv_mtp.kernels.centroid_kernel as centroid_kernel
    from vllm_frozen_kv_mtp.kernels import fallbacks

    model = build(args.dim, args.vocab, args.centroids, args.top_k)
    rows_out: list[dict[str, Any]] = []
    with torch.inference_mode():
        for rows in (int(r) for r in args.rows.split(",")):
            h = torch.randn(rows, args.dim, device="cuda", dtype=torch.bfloat16)
            picks: dict[str, Any] = {}
            for head in HEADS:
                us, picks[head] = time_graph(head_fn(model, head), h, args.replays)
                rows_out.append(emit(rows, head, us, picks[head], picks["upstream"]))
            for block_d, warps, topk in args.sweep:
                default = (
                    centroid_kernel.BEST_KERNEL_BLOCK_D,
                    centroid_kernel.BEST_KERNEL_WARPS,
                    centroid_kernel.CENTROID_TOPK,
                )
                centroid_kernel.BEST_KERNEL_BLOCK_D = block_d
                centroid_kernel.BEST_KERNEL_WARPS = warps
                centroid_kernel.CENTROID_TOPK = topk
                try:
                    us, pick = time_graph(head_fn(model, "fused"), h, args.replays)
                finally:
                    (
                        centroid_kernel.BEST_KERNEL_BLOCK_D,
                        centroid_kernel.BEST_KERNEL_WARPS,
                        centroid_kernel.CENTROID_TOPK,
                    ) = default
                label = f"fused@{block_d}x{warps}" + (":torch" if topk == "torch" else "")
                rows_out.append(emit(rows, label, us, pick, picks["upstream"]))
    if fallbacks.count("centroid_head"):
        print("WARNING: the fused head fell back to dense; its rows time dense", flush=True)
    print("\n| rows | " + " | ".join(f"{h} us" for h in HEADS) + " |")
    print("|---|" + "---|" * len(HEADS))
    for rows in sorted({r["rows"] for r in rows_out}):
        cells = [
            f"{r['us_per_call']:.1f}"
            for h in HEADS
            for r in rows_out
            if r["rows"] == rows and r["head"] == h
        ]
        print(f"| {rows} | " + " | ".join(cells) + " |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows_out, indent=1) + "\n")


if __name__ == "__main__":
    main()
