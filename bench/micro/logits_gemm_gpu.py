"""The target's logits head alone on CUDA (no engine), at the row counts a verify pass
scores: which cuBLAS kernel ``F.linear`` picks for [rows, hidden] x [262144, hidden]^T,
how long it takes, and how long the rest of vLLM's logits path takes over those rows
(Gemma 4's soft-cap as three bf16 passes, the rejection sampler's fp32 copy, argmax).

    python -m bench.micro.logits_gemm_gpu --hidden 2560 --rows 128,512 --json out.json

Why: kernel profiles of speculative steps show GEMMs that only the verify
pass runs long (31B c=32: a 1.30 ms ``96x64 ... TNN`` kernel where none's 32-row logits
GEMM took 0.66 ms). This names the logits GEMM's kernel at each row count so those
profiles can be read, and times other ways to compute the same logits:

- ``linear``: what vLLM runs (``F.linear``, bf16);
- ``mm_t``: ``mm(W, h^T)^T`` made contiguous (cuBLAS sees the transposed problem);
- ``addmm``: ``addmm(zeros, h, W^T)`` (cuBLASLt with a bias epilogue);
- ``chunkN``: the vocabulary in N slices, concatenated.

The soft-cap is also timed as one in-place Triton pass that rounds to bf16 after each of
vLLM's three ops (``softcap1``, ``vllm_frozen_kv_mtp/kernels/softcap_kernel.py``, what option
``target_softcap="one_pass"`` runs; ``softcap1_equal``: bitwise vLLM's result).

``equal`` says whether a variant's logits are bitwise those of ``linear``; a variant that
is not could still move a greedy pick on a near-tie, so only an equal one can replace
vLLM's GEMM without a new losslessness argument. Each call is captured in a CUDA graph
and replayed (median us per call, ``bench.micro.timing.time_graph``).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

SOFTCAP = 30.0  # Gemma 4's final_logit_softcapping


def kernel_names(fn: Callable[[Any], Any], h: Any) -> list[list[Any]]:
    """[name, us] of the CUDA kernels one eager ``fn(h)`` launches, longest first."""
    import torch

    from bench.micro.gpu_profile import summarize

    fn(h)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn(h)
        torch.cuda.synchronize()
    top = summarize(prof, 1, top=4)["top_kernels"]  # [name, ms, launches]
    return [[name, round(ms * 1000, 1)] for name, ms, _ in top]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", default="32,128,512")
    ap.add_argument("--vocab", type=int, default=262144)
    ap.add_argument("--hidden", type=int, default=2560)
    ap.add_argument("--replays", type=int, default=50)
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F

    from bench.micro.timing import time_graph

    g = torch.Generator(device="cuda").manual_seed(0)
    weight = torch.randn(args.vocab, args.hidden, device="cuda", generator=g)
    weight = (weight * args.hidden**-0.5).to(torch.bfloat16)
    zeros = torch.zeros(args.vocab, device="cuda", dtype=torch.bfloat16)

    def softcap(x: Any) -> Any:  # LogitsProcessor.forward's three passes
        return torch.tanh(x / SOFTCAP) * SOFTCAP

    from vllm_frozen_kv_mtp.kernels.softcap_kernel import softcap_in_place

    def softcap1(x: Any) -> Any:  # in place: replays re-cap a scratch copy (same cost)
        return softcap_in_place(x, SOFTCAP)

    gemms: dict[str, Callable[[Any], Any]] = {
        "linear": lambda h: F.linear(h, weight),
        "mm_t": lambda h: torch.mm(weight, h.t()).t().contiguous(),
        "addmm": lambda h: torch.addmm(zeros, h, weight.t()),
        "chunk2": lambda h: torch.cat([F.linear(h, w) for w in weight.chunk(2)], dim=1),
        "chunk4": lambda h: torch.cat([F.linear(h, w) for w in weight.chunk(4)], dim=1),
    }
    tails: dict[str, Callable[[Any], Any]] = {
        "softcap": softcap,
        "softcap1": softcap1,
        "fp32": lambda x: x.float(),
        "argmax": lambda x: x.argmax(dim=-1),
        "logits_path": lambda h: softcap(F.linear(h, weight)).float().argmax(dim=-1),
    }
    out_rows: list[dict[str, Any]] = []
    with torch.inference_mode():
        for rows in (int(r) for r in args.rows.split(",")):
            h = torch.randn(rows, args.hidden, device="cuda", generator=g).to(torch.bfloat16)
            ref = F.linear(h, weight)
            row: dict[str, Any] = {"rows": rows, "vocab": args.vocab, "hidden": args.hidden}
            for name, fn in gemms.items():
                us, out = time_graph(fn, h, args.replays)
                row[f"{name}_us"] = round(us, 1)
                row[f"{name}_equal"] = bool(torch.equal(out, ref))
                row[f"{name}_kernels"] = kernel_names(fn, h)
            for name, fn in tails.items():
                in_place = name == "softcap1"
                x = h if name == "logits_path" else ref.clone() if in_place else ref
                row[f"{name}_us"] = round(time_graph(fn, x, args.replays)[0], 1)
            row["softcap1_equal"] = bool(torch.equal(softcap1(ref.clone()), softcap(ref)))
            print("ROW", json.dumps(row), flush=True)
            out_rows.append(row)
    names = list(gemms)
    print(
        f"| rows ({args.vocab} x {args.hidden}) | "
        + " | ".join(f"{n} us" for n in names)
        + " | softcap us | one-pass softcap us | fp32 copy us | argmax us"
        + " | whole path us"
        + " | linear's kernel |"
    )
    print("|---" * (len(names) + 7) + "|")
    for r in out_rows:
        cells = [f"{r[f'{n}_us']}{'' if r[f'{n}_equal'] else ' (differs)'}" for n in names]
        kernel = r["linear_kernels"][0][0] if r["linear_kernels"] else "-"
        print(
            f"| {r['rows']} | " + " | ".join(cells)
            + f" | {r['softcap_us']} | {r['softcap1_us']}"
            + ("" if r["softcap1_equal"] else " (differs)")
            + f" | {r['fp32_us']} | {r['argmax_us']} | "
            f"{r['logits_path_us']} | `{kernel}` |"
        )  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(out_rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
