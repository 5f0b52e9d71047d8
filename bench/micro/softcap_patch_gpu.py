"""Patch 5 as the engine calls it: vLLM's ``LogitsProcessor.forward`` on a target head
(262144 x hidden, bf16) in each ``target_softcap`` mode, eager, on CUDA.

    python -m bench.micro.softcap_patch_gpu --hidden 2560 --rows 128,512

Per mode and row count: host us per call (Python and launches; the GPU queue is kept
from filling by syncing every ``--batch`` calls), GPU us per call (CUDA events over
the same calls), and whether a call made a host sync (``torch.cuda.set_sync_debug_mode``
set to "error" raises on one). Why: kernel time per step and timed steps can disagree
(a mode can be cheaper on the GPU and still lengthen steps); this separates host cost and
syncs from GPU time.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

SOFTCAP = 30.0  # Gemma 4's final_logit_softcapping
MODES = ("vllm", "one_pass")


def processor(mode: str, weight: Any) -> Any:
    """A soft-capped LogitsProcessor marked as our drafter marks the target's."""
    import torch
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.logits_processor import LogitsProcessor

    from vllm_frozen_kv_mtp.patches.target_softcap import mark_target_logits

    with set_current_vllm_config(VllmConfig()):
        lp = LogitsProcessor(weight.shape[0], soft_cap=SOFTCAP)
    if mode != "vllm":
        model = torch.nn.Module()
        model.lp = lp
        assert mark_target_logits(model, mode) == 1
    return lp


def measure(lp: Any, head: Any, h: Any, calls: int, batch: int) -> dict[str, Any]:
    import torch

    for _ in range(3):  # warm-up: Triton compiles on first use
        lp(head, h)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        lp(head, h)
        synced = False
    except RuntimeError:
        synced = True
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    host = 0.0
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(0, calls, batch):
        t = time.perf_counter()
        for _ in range(min(batch, calls - i)):
            lp(head, h)
        host += time.perf_counter() - t
        torch.cuda.synchronize()
    end.record()
    torch.cuda.synchronize()
    return {
        "host_us": round(host / calls * 1e6, 1),
        "gpu_us": round(start.elapsed_time(end) / calls * 1e3, 1),
        "host_sync": synced,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", default="128,512")
    ap.add_argument("--vocab", type=int, default=262144)
    ap.add_argument("--hidden", type=int, default=2560)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args()

    import torch

    import vllm_frozen_kv_mtp

    vllm_frozen_kv_mtp.register()  # patch 5
    g = torch.Generator(device="cuda").manual_seed(0)
    weight = (torch.randn(args.vocab, args.hidden, device="cuda", generator=g) * 0.1).to(
        torch.bfloat16
    )
    head = SimpleNamespace(
        weight=weight,
        quant_method=SimpleNamespace(
            apply=lambda layer, x, bias=None: torch.nn.functional.linear(x, layer.weight, bias)
        ),
        tp_size=1,
    )
    rows_out = []
    for rows in (int(r) for r in args.rows.split(",")):
        h = torch.randn(rows, args.hidden, device="cuda", generator=g).to(torch.bfloat16)
        want = processor("vllm", weight)(head, h)
        for mode in MODES:
            lp = processor(mode, weight)
            row = {"rows": rows, "mode": mode, **measure(lp, head, h, args.calls, args.batch)}
            row["equal"] = bool(torch.equal(lp(head, h), want))
            rows_out.append(row)
    print(json.dumps(rows_out))
    head_row = "| rows | mode | host us/call | GPU us/call | host sync | equal |"
    print(f"262144 x {args.hidden} head\n{head_row}")
    print("|---|---|---|---|---|---|")
    for r in rows_out:
        print(
            f"| {r['rows']} | {r['mode']} | {r['host_us']} | {r['gpu_us']} | {r['host_sync']} "
            f"| {r['equal']} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows_out, indent=1))


if __name__ == "__main__":
    main()
