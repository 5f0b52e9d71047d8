"""What a bounded draft context could save at long context: bytes per draft step and per
verify from the real Gemma 4 shapes, priced against measured 128-token steps.

    python -m bench.bounded_bytes
    python -m bench.bounded_bytes --models 31B --tokens bench/results/h200_tokens.json

At long context the KV reads grow with the context and nothing else does, so a step
at context ``L`` is modelled as the measured step at 128-token prompts plus the extra
KV bytes at ``L`` over an effective bandwidth (``--bandwidth``, TB/s):

* a draft step reads, per request, the assistant's global layer over all ``L`` keys of
  the target's global KV and its three sliding layers over the sliding window;
* a verify pass reads every target layer's KV once for its k + 1 queries;
* the rest of a draft step (the assistant's weights, its head, launches) is the
  measured per-k slope of the step time at 128-token prompts (TRITON_ATTN, greedy,
  code profile, one GPU) at the same concurrency (else at c = 1).

A bounded drafter (``--bound``, SINK:WINDOW) reads ``SINK + WINDOW`` global keys
instead of ``L``. It wins if its acceptance length stays above ``1 - saved / step`` of
the unbounded one's: ``break_even_al_loss``. KV counts K and V, bf16, block rounding
ignored; one GPU (tensor parallelism halves every KV and weight read alike).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from vllm_frozen_kv_mtp.frontend.published_sizes import shape

BASE_PROMPT = 128


def kv_bytes_per_key(cfg: dict[str, Any], layer_type: str) -> int:
    """K + V bytes (bf16) of one key of one layer of ``layer_type`` in a text config."""
    if layer_type == "full_attention":
        heads = cfg.get("num_global_key_value_heads") or cfg["num_key_value_heads"]
        return int(heads) * int(cfg.get("global_head_dim") or cfg["head_dim"]) * 2 * 2
    return int(cfg["num_key_value_heads"]) * int(cfg["head_dim"]) * 2 * 2


def keys_read(layer_type: str, context: int, window: int) -> int:
    return context if layer_type == "full_attention" else min(context, window)


def draft_kv_bytes(size: str, context: int, bound: tuple[int, int] | None = None) -> dict[str, int]:
    """Per request and draft step: bytes of target KV the assistant's global and
    sliding layers read (each assistant layer reads the target's KV of its type)."""
    spec = shape(size)
    tcfg, acfg = spec.target, spec.assistant["text_config"]
    out = {"global": 0, "sliding": 0}
    for layer_type in acfg["layer_types"]:
        keys = keys_read(layer_type, context, int(tcfg["sliding_window"]))
        if layer_type == "full_attention" and bound is not None:
            keys = min(keys, sum(bound))
        kind = "global" if layer_type == "full_attention" else "sliding"
        out[kind] += keys * kv_bytes_per_key(tcfg, layer_type)
    return out


def verify_kv_bytes(size: str, context: int) -> int:
    """Per request and verify pass: bytes of KV every target layer reads."""
    tcfg = shape(size).target
    return sum(
        keys_read(t, context, int(tcfg["sliding_window"])) * kv_bytes_per_key(tcfg, t)
        for t in tcfg["layer_types"]
    )


def measured_steps(rows: list[dict[str, Any]], model: str) -> dict[int, dict[int, float]]:
    """concurrency -> k -> median step ms of frozen_kv_mtp at 128-token prompts."""
    got: dict[int, dict[int, list[float]]] = {}
    for r in rows:
        if (
            r.get("model") == model
            and r.get("method") == "frozen_kv_mtp"
            and r.get("prompt_len", BASE_PROMPT) == BASE_PROMPT
            and r.get("profile") == "code"
            and not r.get("temperature")
            and r.get("attention") == "TRITON_ATTN"
            and r.get("tp", 1) == 1
            and not r.get("options")
        ):
            got.setdefault(r["concurrency"], {}).setdefault(r["k"], []).append(r["step_ms"])
    return {c: {k: statistics.median(v) for k, v in ks.items()} for c, ks in got.items()}


def slope(steps: dict[int, float]) -> float | None:
    """Least-squares ms per draft step over the measured k's (None below two k's)."""
    if len(steps) < 2:
        return None
    ks, ms = list(steps), list(steps.values())
    mk, mm = statistics.fmean(ks), statistics.fmean(ms)
    return sum((k - mk) * (m - mm) for k, m in zip(ks, ms, strict=True)) / sum(
        (k - mk) ** 2 for k in ks
    )


def estimate(
    size: str,
    context: int,
    c: int,
    k: int,
    steps: dict[int, dict[int, float]],
    bandwidth_tbs: float,
    bound: tuple[int, int],
) -> dict[str, Any] | None:
    """One (model, context, c, k) row of the cost model; None without a measured step."""
    if k not in steps.get(c, {}):
        return None
    per_k = slope(steps[c])
    slope_at = c
    if per_k is None:
        per_k, slope_at = slope(steps.get(1, {})), 1
    if per_k is None:
        return None
    ms = 1e-9 / bandwidth_tbs  # ms per byte (1 TB/s moves 1e9 bytes a ms)
    full, base = draft_kv_bytes(size, context), draft_kv_bytes(size, BASE_PROMPT)
    bounded = draft_kv_bytes(size, context, bound)
    draft_extra = c * (sum(full.values()) - sum(base.values())) * ms
    verify_extra = c * (verify_kv_bytes(size, context) - verify_kv_bytes(size, BASE_PROMPT)) * ms
    draft_step = per_k + draft_extra
    step = steps[c][k] + k * draft_extra + verify_extra
    global_ms = c * full["global"] * ms
    saved = k * c * (full["global"] - bounded["global"]) * ms
    return {
        "model": size,
        "context": context,
        "concurrency": c,
        "k": k,
        "draft_step_ms": round(draft_step, 3),
        "draft_step_rest_ms": round(per_k, 3),
        "rest_slope_at_c": slope_at,
        "global_kv_mb_per_request": round(full["global"] / 1e6, 1),
        "global_kv_ms": round(global_ms, 3),
        "global_share_of_draft_step": round(global_ms / draft_step, 3),
        "draft_round_ms": round(k * draft_step, 3),
        "step_ms": round(step, 3),
        "draft_round_share_of_step": round(k * draft_step / step, 3),
        "bounded_saves_ms": round(saved, 3),
        "break_even_al_loss": round(saved / step, 3),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--models", default="E4B,26B-A4B")
    ap.add_argument("--tokens", default="bench/results/h100_tokens.json")
    ap.add_argument("--contexts", default="8192,32768")
    ap.add_argument("--concurrency", default="1,8,32")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--bandwidth", type=float, default=3.0, help="effective TB/s (H100: ~3)")
    ap.add_argument("--bound", default="4:512")
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args(argv)
    sink, _, window = args.bound.partition(":")
    bound = (int(sink), int(window))
    rows = json.loads(Path(args.tokens).read_text())
    out = []
    for model in args.models.split(","):
        steps = measured_steps(rows, model)
        for context in (int(x) for x in args.contexts.split(",")):
            for c in (int(x) for x in args.concurrency.split(",")):
                r = estimate(model, context, c, args.k, steps, args.bandwidth, bound)
                if r is None:
                    print(f"SKIP {model} c={c}: no measured k={args.k} step in {args.tokens}")
                    continue
                out.append(r)
    print(
        "| model | context | c | draft step ms | its global KV read ms (share) | "
        f"step ms, k={args.k} | draft round share of step | bounded saves ms a step "
        "| break-even AL loss |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in out:
        print(
            f"| {r['model']} | {r['context']} | {r['concurrency']} | {r['draft_step_ms']:.2f} | "
            f"{r['global_kv_ms']:.2f} ({r['global_share_of_draft_step']:.0%}) | "
            f"{r['step_ms']:.1f} | {r['draft_round_share_of_step']:.0%} | "
            f"{r['bounded_saves_ms']:.2f} | {r['break_even_al_loss']:.1%} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
