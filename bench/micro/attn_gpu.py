"""Draft-step attention on CUDA, alone (no engine): vLLM's Triton ``unified_attention``
at a Gemma 4 assistant's shapes (E4B or 31B), split-KV ("3D", 16 segments + reduce) against one
pass per (request, KV head) ("2D"), and this project's split decode kernel
(``vllm_frozen_kv_mtp.kernels.decode_attention_kernel``, what ``draft_attention="split"`` runs),
for one decode query per request.

    python -m bench.micro.attn_gpu --rows 1,8,16,32,64,128 --contexts 128,256,512,2048 \\
        --json bench/results/h200_attn.json
    python -m bench.micro.attn_gpu --shape 31B --json bench/results/h200_attn_31B.json

Layers (``SHAPES``): ``sliding`` (head size 256, window 512 for E4B, 1024 for 31B) and
``full`` (head size 512); E4B: 4 query heads over 2 KV heads in both; 31B: 32 query heads
over 16 KV heads (sliding) and over 4 (full). bf16, block size 16, random KV in distinct
blocks per request.
Each call is captured in a CUDA graph and replayed (median us per call); the outputs
are compared with the one-pass kernel's. The last line recommends
``sliding_split_kv_max_rows``: the largest row count at which split-KV was faster for
the sliding layer at the window length (every context >= 512 reads 512 keys there), 0
if never.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

#: shape -> layer -> (head size, window, query heads, KV heads), from frontend/published_sizes.py
SHAPES = {
    "E4B": {"sliding": (256, 512, 4, 2), "full": (512, None, 4, 2)},
    "31B": {"sliding": (256, 1024, 32, 16), "full": (512, None, 32, 4)},
}
Q_HEADS, KV_HEADS, BLOCK, SEGMENTS = 4, 2, 16, 16  # E4B's heads: attention_call's default


def recommend(rows_out: list[dict[str, Any]], window: int = 512, margin: float = 0.02) -> int:
    """Largest row count whose sliding-layer split-KV time beats one pass by ``margin``
    at context ``window``; 0 when one pass is never slower."""
    best = 0
    for r in rows_out:
        if r["layer"] == "sliding" and r["context"] == window:
            if r["split_us"] < (1 - margin) * r["single_us"]:
                best = max(best, r["rows"])
    return best


def attention_call(
    rows: int,
    context: int,
    head: int,
    window: int | None,
    kind: str,
    dev: str = "cuda",
    q_heads: int = Q_HEADS,
    kv_heads: int = KV_HEADS,
) -> Any:
    """A closure that runs one decode attention call (outputs written in place): ``kind``
    "split" (vLLM 3D), "single" (vLLM 2D), "frozen" (decode_attention_kernel, its own
    launch shape) or "frozen:S:T:W" (S splits, T-key tiles, W warps); the inputs depend
    only on rows, context and head, so the outputs are comparable. K and V are views of
    one cache laid out as the engine's TRITON_ATTN cache is ([blocks, KV heads, block,
    2 x head], K then V per token), not as separate [blocks, block, KV heads, head]
    tensors)."""
    import torch

    dt = torch.bfloat16 if dev == "cuda" else torch.float32  # the interpreter: fp32
    blocks_per_req = -(-context // BLOCK)
    num_blocks = rows * blocks_per_req + 1
    g = torch.Generator(device=dev).manual_seed(rows * 7919 + context)
    kv = torch.randn(num_blocks, kv_heads, BLOCK, 2 * head, device=dev, dtype=dt, generator=g)
    k, v = kv.transpose(1, 2).split(head, dim=-1)
    q = torch.randn(rows, q_heads, head, device=dev, dtype=dt, generator=g)
    out = torch.empty_like(q)
    perm = torch.randperm(num_blocks - 1, device=dev, generator=g).to(torch.int32) + 1
    block_table = perm[: rows * blocks_per_req].view(rows, blocks_per_req).contiguous()
    cu_q = torch.arange(rows + 1, device=dev, dtype=torch.int32)
    seq_lens = torch.full((rows,), context, device=dev, dtype=torch.int32)
    if kind.startswith("frozen"):
        from vllm_frozen_kv_mtp.kernels.decode_attention_kernel import (
            DecodeAttentionWorkspace,
            decode_attention,
            default_splits,
            tile_keys,
        )

        # "frozen[:splits[:tile[:warps[:fma]]]]", an empty or "auto" field: the kernel's
        # choice; "fma" scores on CUDA cores instead of tl.dot
        fields = [f for f in kind.split(":")[1:]] + ["", "", "", ""]
        tile = int(fields[1]) if fields[1] not in ("", "auto") else tile_keys(head)
        warps = int(fields[2]) if fields[2] not in ("", "auto") else 4
        mma = fields[3] != "fma"
        splits = (
            int(fields[0])
            if fields[0] not in ("", "auto")
            else default_splits(rows, kv_heads, head, window or 0, context, tile)
        )
        ws = DecodeAttentionWorkspace.allocate(rows, q_heads, splits, head, dev)

        def frozen(_: Any) -> Any:
            decode_attention(
                q, k, v, block_table, seq_lens, out, 1.0, window or 0,
                num_splits=splits, workspace=ws, tile=tile, num_warps=warps, mma=mma,
            )  # fmt: skip
            return out

        frozen.splits = splits  # type: ignore[attr-defined]
        frozen.inputs = (q, k, v, block_table, seq_lens)  # type: ignore[attr-defined]
        return frozen

    from vllm.v1.attention.ops.triton_unified_attention import unified_attention

    split = kind == "split"
    pad = 1 << (head - 1).bit_length()
    seg_out = torch.empty(rows, q_heads, SEGMENTS, pad, device=dev, dtype=torch.float32)
    seg_max = torch.empty(rows, q_heads, SEGMENTS, device=dev, dtype=torch.float32)
    seg_sum = torch.empty(rows, q_heads, SEGMENTS, device=dev, dtype=torch.float32)

    def call(_: Any) -> Any:
        unified_attention(
            q=q, k=k, v=v, out=out, cu_seqlens_q=cu_q, max_seqlen_q=1,
            seqused_k=seq_lens, max_seqlen_k=context, softmax_scale=1.0, causal=True,
            window_size=(window - 1, 0) if window else (-1, -1), block_table=block_table,
            softcap=0, q_descale=None, k_descale=None, v_descale=None,
            seq_threshold_3D=rows if split else 0, num_par_softmax_segments=SEGMENTS,
            softmax_segm_output=seg_out, softmax_segm_max=seg_max,
            softmax_segm_expsum=seg_sum,
        )  # fmt: skip
        return out

    return call


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="E4B")
    ap.add_argument("--rows", default="1,8,16,32,64,128")
    ap.add_argument("--contexts", default="128,256,512,2048")
    ap.add_argument("--replays", type=int, default=200)
    ap.add_argument("--json", help="also write the rows here")
    ap.add_argument(
        "--frozen-variants",
        default="1,2,4,8,auto:32,auto:64,auto:128,auto:auto:8,1:auto:8,auto:16:4:fma,auto:32:8:fma",
        help="launch shapes to time the frozen kernel at besides its own choice, each "
        "splits[:tile[:warps[:fma]]] ('auto' or empty: the kernel's choice; fma: CUDA "
        "cores instead of tl.dot)",
    )
    args = ap.parse_args()
    forced = [f"frozen:{n}" for n in args.frozen_variants.split(",") if n]

    import torch

    from bench.micro.timing import time_graph

    rows_out: list[dict[str, Any]] = []
    with torch.inference_mode():
        for layer, (head, window, q_heads, kv_heads) in SHAPES[args.shape].items():
            for context in (int(c) for c in args.contexts.split(",")):
                for rows in (int(r) for r in args.rows.split(",")):
                    timed = {}
                    for kind in ("split", "single", "frozen", *forced):
                        call = attention_call(
                            rows, context, head, window, kind, q_heads=q_heads, kv_heads=kv_heads
                        )
                        try:
                            timed[kind] = (*time_graph(call, None, args.replays), call)
                        except Exception as e:  # a variant past the shared-memory limit
                            if not kind.startswith("frozen:"):
                                raise
                            print(f"SKIP {layer} {kind}: {type(e).__name__}: {e}"[:300])
                    single_out = timed["single"][1]
                    split_diff = float((timed["split"][1] - single_out).abs().max())
                    ran = [k for k in forced if k in timed]
                    sweep = {k.partition(":")[2]: round(timed[k][0], 2) for k in ran}
                    # every variant computes the same attention
                    worst = max(
                        (float((timed[k][1] - timed["frozen"][1]).abs().max()) for k in ran),
                        default=0.0,
                    )
                    best = min(sweep, key=lambda n: sweep[n]) if sweep else None
                    row = {
                        "shape": args.shape,
                        "layer": layer,
                        "context": context,
                        "rows": rows,
                        "split_us": round(timed["split"][0], 2),
                        "single_us": round(timed["single"][0], 2),
                        "frozen_us": round(timed["frozen"][0], 2),
                        "frozen_splits": timed["frozen"][2].splits,
                        "frozen_sweep_us": sweep,
                        "frozen_best_variant": best,
                        "frozen_variants_max_abs_diff": round(worst, 5),
                        "max_abs_diff": round(split_diff, 5),
                        "frozen_max_abs_diff": round(
                            float((timed["frozen"][1] - single_out).abs().max()), 5
                        ),
                    }
                    print("ROW", json.dumps(row), flush=True)
                    rows_out.append(row)
    print(
        "| layer | context | rows | split-KV us | one pass us | frozen kernel us (splits) "
        "| frozen, best variant us (splits:tile:warps) | max abs diff split / frozen |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows_out:
        b = r["frozen_best_variant"]
        best = f"{r['frozen_sweep_us'][b]} ({b})" if b else "-"
        print(
            f"| {r['layer']} | {r['context']} | {r['rows']} | {r['split_us']} | "
            f"{r['single_us']} | {r['frozen_us']} ({r['frozen_splits']}) | {best} | "
            f"{r['max_abs_diff']} / {r['frozen_max_abs_diff']} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows_out, indent=1) + "\n")
    window = SHAPES[args.shape]["sliding"][1] or 0
    print(f"RECOMMEND sliding_split_kv_max_rows={recommend(rows_out, window)}")


if __name__ == "__main__":
    main()
