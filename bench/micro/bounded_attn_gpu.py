"""A Gemma 4 assistant's draft-step attention at long context, over every key and over
a bounded context (a sink plus a recent window), on CUDA, one decode query per request.

    python -m bench.micro.bounded_attn_gpu --json bench/results/h100_bounded_attn.json

For a draft query at position ``p = context - 1`` a bounded global layer reads the
first ``sink`` keys and the last ``window`` keys. A kernel gets that from a cut block
table, with no kernel change: the blocks holding keys ``[0, sink)`` and the blocks
from the one holding ``p - window + 1`` to the one holding ``p``, ``seq_len`` the
keys those blocks hold up to ``p`` (block granularity: at most ``block - 1`` extra
keys at each end). Cached keys already carry their RoPE, so positions stay right.

Per shape (``SHAPES``: E4B, 26B-A4B, 31B; one GPU, no tensor parallelism), context and
row count, every kernel of ``bench.micro.attn_gpu`` (vLLM's Triton unified attention
split-KV "3D" and one-pass "2D", and this project's split decode kernel, what
``draft_attention="split"`` runs) is timed over the full layer's whole context and
over its bounded table, on the same cache; the sliding layer at its window is timed
once per row count for scale (an assistant has three sliding layers and one global).
bf16, block size 16, CUDA graphs (median us per call). Outputs are checked against the
torch reference on the same (cut) table. ``--device cpu`` is a dry run: the reference
only, wall-clock timed, to check shapes and tables without a GPU.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

#: shape -> layer -> (head size, window, query heads, KV heads), from frontend/published_sizes.py
#: (an assistant's global layer reads the target's global KV: num_global_key_value_heads
#: where the checkpoint sets it, else num_key_value_heads)
SHAPES = {
    "E4B": {"full": (512, None, 4, 2), "sliding": (256, 512, 4, 2)},
    "26B-A4B": {"full": (512, None, 16, 2), "sliding": (256, 1024, 16, 8)},
    "31B": {"full": (512, None, 32, 4), "sliding": (256, 1024, 32, 16)},
}
BLOCK = 16
KINDS = ("split", "single", "frozen")


def bounded_blocks(
    context: int, sink: int, window: int, block: int = BLOCK
) -> tuple[list[int], int]:
    """(logical blocks of a row's table to keep, keys they hold up to ``p``) for a query
    at ``p = context - 1`` reading keys ``[0, sink)`` and ``(p - window, p]``; the whole
    table when the two ranges meet."""
    if context < 1 or sink < 0 or window < 1:
        raise ValueError(f"need context >= 1, sink >= 0, window >= 1: {context}, {sink}, {window}")
    p = context - 1
    head = -(-sink // block)
    first, last = max(0, p - window + 1) // block, p // block
    if first <= head:
        return list(range(last + 1)), context
    kept = list(range(head)) + list(range(first, last + 1))
    return kept, (len(kept) - 1) * block + p % block + 1


def kept_positions(context: int, sink: int, window: int, block: int = BLOCK) -> list[int]:
    """The key positions a cut table of :func:`bounded_blocks` makes a kernel read."""
    blocks, n = bounded_blocks(context, sink, window, block)
    return [b * block + i for b in blocks for i in range(block)][:n]


def kv_bytes(rows: int, keys: int, kv_heads: int, head: int, itemsize: int = 2) -> int:
    """Bytes of K and V one decode call reads."""
    return rows * keys * kv_heads * head * 2 * itemsize


def make_inputs(rows: int, context: int, head: int, q_heads: int, kv_heads: int, dev: str) -> Any:
    """Query, K/V views of one paged cache laid out as TRITON_ATTN's ([blocks, KV heads,
    block, 2 x head]: K then V per token), random distinct blocks per request."""
    import torch

    dt = torch.bfloat16 if dev == "cuda" else torch.float32
    per_req = -(-context // BLOCK)
    num_blocks = rows * per_req + 1
    g = torch.Generator(device=dev).manual_seed(rows * 7919 + context)
    kv = torch.randn(num_blocks, kv_heads, BLOCK, 2 * head, device=dev, dtype=dt, generator=g)
    k, v = kv.transpose(1, 2).split(head, dim=-1)
    q = torch.randn(rows, q_heads, head, device=dev, dtype=dt, generator=g)
    perm = torch.randperm(num_blocks - 1, device=dev, generator=g).to(torch.int32) + 1
    table = perm[: rows * per_req].view(rows, per_req).contiguous()
    return q, k, v, table


def attention(
    kind: str, q: Any, k: Any, v: Any, table: Any, seq_len: int, window: int | None
) -> Any:
    """A closure running one decode call of ``kind`` over ``table`` (every row reads
    ``seq_len`` keys), writing into its own output."""
    import torch

    rows, q_heads, head = q.shape
    kv_heads = k.shape[2]
    seq_lens = torch.full((rows,), seq_len, device=q.device, dtype=torch.int32)
    out = torch.empty_like(q)
    if kind == "reference":
        from vllm_frozen_kv_mtp.kernels.decode_attention_kernel import decode_attention_reference

        def ref(_: Any) -> Any:
            out.copy_(decode_attention_reference(q, k, v, table, seq_lens, 1.0, window or 0))
            return out

        return ref
    if kind == "frozen":
        from vllm_frozen_kv_mtp.kernels.decode_attention_kernel import (
            DecodeAttentionWorkspace,
            decode_attention,
            default_splits,
        )

        # the engine's choice: no context bound given (the row count picks the splits)
        splits = default_splits(rows, kv_heads, head, window or 0)
        ws = DecodeAttentionWorkspace.allocate(rows, q_heads, splits, head, q.device)

        def frozen(_: Any) -> Any:
            decode_attention(
                q, k, v, table, seq_lens, out, 1.0, window or 0, num_splits=splits, workspace=ws
            )
            return out

        return frozen
    from vllm.v1.attention.ops.triton_unified_attention import unified_attention

    from bench.micro.attn_gpu import SEGMENTS

    pad = 1 << (head - 1).bit_length()
    seg_out = torch.empty(rows, q_heads, SEGMENTS, pad, device=q.device, dtype=torch.float32)
    seg_max = torch.empty(rows, q_heads, SEGMENTS, device=q.device, dtype=torch.float32)
    seg_sum = torch.empty(rows, q_heads, SEGMENTS, device=q.device, dtype=torch.float32)
    split = kind == "split"
    cu_q = torch.arange(rows + 1, device=q.device, dtype=torch.int32)

    def call(_: Any) -> Any:
        unified_attention(
            q=q, k=k, v=v, out=out, cu_seqlens_q=cu_q, max_seqlen_q=1, seqused_k=seq_lens,
            max_seqlen_k=seq_len, softmax_scale=1.0, causal=True,
            window_size=(window - 1, 0) if window else (-1, -1), block_table=table,
            softcap=0, q_descale=None, k_descale=None, v_descale=None,
            seq_threshold_3D=rows if split else 0, num_par_softmax_segments=SEGMENTS,
            softmax_segm_output=seg_out, softmax_segm_max=seg_max, softmax_segm_expsum=seg_sum,
        )  # fmt: skip
        return out

    return call


def time_call(fn: Any, dev: str, replays: int) -> tuple[float, Any]:
    """Median us per call: CUDA-graph replays on CUDA, wall clock on CPU."""
    if dev == "cuda":
        from bench.micro.timing import time_graph

        return time_graph(fn, None, replays)
    t0 = time.perf_counter()
    out = fn(None)
    return 1e6 * (time.perf_counter() - t0), out.clone()


def measure(
    shape: str,
    layer: str,
    context: int,
    rows: int,
    bound: tuple[int, int] | None,
    kinds: tuple[str, ...],
    dev: str,
    replays: int,
) -> dict[str, Any]:
    """One row: each kind's us over the whole context, and over the bounded table."""
    import torch

    head, window, q_heads, kv_heads = SHAPES[shape][layer]
    q, k, v, table = make_inputs(rows, context, head, q_heads, kv_heads, dev)
    tables = {"whole": (table, context)}
    if bound is not None:
        blocks, n = bounded_blocks(context, *bound)
        idx = torch.tensor(blocks, device=dev, dtype=torch.long)
        tables["bounded"] = (table[:, idx].contiguous(), n)
    row: dict[str, Any] = {"shape": shape, "layer": layer, "context": context, "rows": rows}
    for name, (tab, n) in tables.items():
        keys = min(n, window) if window else n
        ref = attention("reference", q[:2], k, v, tab[:2], n, window)(None).float()
        timed, diffs = {}, {}
        for kind in kinds:
            us, out = time_call(attention(kind, q, k, v, tab, n, window), dev, replays)
            timed[kind] = round(us, 2)
            diffs[kind] = round(float((out[:2].float() - ref).abs().max()), 5)
            # bf16 rounding stays near 0.03 (one ulp at |x| ~ 5); a wrong table is O(1)
            if diffs[kind] > 0.25:
                raise AssertionError(f"{shape} {layer} {name} {kind}: max abs diff {diffs[kind]}")
        best = min(timed, key=lambda x: timed[x])
        nbytes = kv_bytes(rows, keys, kv_heads, head, q.element_size())
        row[name] = {
            "keys": keys,
            "us": timed,
            "best": best,
            "kv_mb": round(nbytes / 1e6, 3),
            "gb_per_s": round(nbytes / timed[best] / 1e3, 1),
            "max_abs_diff_vs_reference": diffs,
        }
    del q, k, v, table, tables
    if dev == "cuda":
        torch.cuda.empty_cache()
    return row


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--shapes", default="E4B,26B-A4B,31B")
    ap.add_argument("--rows", default="1,2,4,8,16,32,64")
    ap.add_argument("--contexts", default="1024,8192,32768")
    ap.add_argument("--bound", default="4:512", help="SINK:WINDOW keys of the bounded layer")
    ap.add_argument(
        "--kinds",
        help=f"subset of {','.join(KINDS)} (default: all on cuda, reference on cpu; "
        "frozen runs on cpu in Triton's interpreter, TRITON_INTERPRET=1)",
    )
    ap.add_argument("--replays", type=int, default=50)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args(argv)
    shapes = [s for s in args.shapes.split(",") if s]
    if bad := set(shapes) - set(SHAPES):
        ap.error(f"unknown shape(s) {sorted(bad)}: {', '.join(SHAPES)}")
    sink, sep, window = args.bound.partition(":")
    if not sep or not sink.isdigit() or not window.isdigit() or int(window) < 1:
        ap.error(f"--bound {args.bound!r}: write SINK:WINDOW, e.g. 4:512")
    bound = (int(sink), int(window))
    default = ",".join(KINDS) if args.device == "cuda" else "reference"
    kinds = tuple(k for k in (args.kinds or default).split(",") if k)
    if bad := set(kinds) - {*KINDS, "reference"}:
        ap.error(f"unknown kind(s) {sorted(bad)}: {', '.join(KINDS)}, reference")
    rows_list = [int(r) for r in args.rows.split(",")]
    contexts = [int(c) for c in args.contexts.split(",")]

    import torch

    t0 = time.time()
    out: list[dict[str, Any]] = []
    with torch.inference_mode():
        for shape in shapes:
            # a sliding layer reads its window at any longer context: time it there
            window = min(SHAPES[shape]["sliding"][1] or 0, max(contexts))
            for rows in rows_list:
                r = measure(shape, "sliding", window, rows, None, kinds, args.device, args.replays)
                out.append(r)
                print("ROW", json.dumps(r), flush=True)
                for context in contexts:
                    r = measure(
                        shape, "full", context, rows, bound, kinds, args.device, args.replays
                    )
                    out.append(r)
                    print("ROW", json.dumps(r), flush=True)
    print(
        f"| shape | context | rows | whole us ({'/'.join(kinds)}) | bounded us "
        "| saved us per draft step (best vs best) | one sliding layer us (best) |"
    )
    print("|---|---|---|---|---|---|---|")
    sliding = {
        (r["shape"], r["rows"]): min(r["whole"]["us"].values())
        for r in out
        if r["layer"] == "sliding"
    }
    for r in out:
        if r["layer"] != "full":
            continue
        w, b = r["whole"], r["bounded"]
        saved = w["us"][w["best"]] - b["us"][b["best"]]
        print(
            f"| {r['shape']} | {r['context']} | {r['rows']} | "
            f"{'/'.join(str(w['us'][k]) for k in kinds)} | "
            f"{'/'.join(str(b['us'][k]) for k in kinds)} | {saved:.1f} | "
            f"{sliding[(r['shape'], r['rows'])]} |"
        )
    print(f"wall {time.time() - t0:.1f}s")
    if args.json:
        doc = {"device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
               "bound": list(bound), "rows": out}  # fmt: skip
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
