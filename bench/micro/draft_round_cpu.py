"""Draft-round A/B on CPU: frozen_kv_mtp vs upstream `mtp` on the same captured rounds.

    python -m bench.micro.draft_round_cpu --batch 8 --iters 20

Whole-engine tokens/s on a shared 2-core VM drifts by tens of percent between
runs. This compares the two drafters where they differ, in one process: a
frozen_kv_mtp engine generates with the trained pair, its decode rounds (the
drafter's inputs after a verify step, at the given batch) are captured, and each
captured round is replayed through (a) ``FrozenKVMTPProposer.propose`` and (b)
vLLM's ``Gemma4Proposer.propose`` with vLLM's own per-step metadata builds, on the
same drafter weights and target KV. The two take turns round by round (order
alternating), so drift hits both alike. Checks that both draft the same tokens,
then prints the median round time of each, the median of the back-to-back ratios,
and the median drafter forward time per step. Rounds after a prefill are not
replayed (upstream's first pass there covers whole prompts: frozen's gain is larger).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time
from typing import Any

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

from devkit.demo import resolve_pair
from devkit.fixtures.prompts import CODE_PROMPTS

MODES = ("frozen_kv_mtp", "mtp")


def _clone(x: Any) -> Any:
    return x.clone() if hasattr(x, "clone") else x


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--iters", type=int, default=20, help="passes over the captured rounds")
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=64)
    args = ap.parse_args()

    import torch
    from vllm import LLM, SamplingParams
    from vllm.v1.spec_decode.gemma4 import Gemma4Proposer

    from devkit.instrument import drafter

    target, assistant = resolve_pair("trained", "models")
    llm = LLM(
        target,
        dtype="float32",
        max_model_len=1024,
        max_num_seqs=8,
        enforce_eager=True,
        kv_cache_memory_bytes=256 << 20,
        seed=0,
        speculative_config={
            "method": "frozen_kv_mtp",
            "model": assistant,
            "num_speculative_tokens": args.k,
        },
    )
    d = drafter(llm)
    prompts = CODE_PROMPTS[: args.batch]
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
    llm.generate(prompts, params, use_tqdm=False)  # warm-up

    captured: list[dict[str, Any]] = []
    propose = d.propose

    def capture(**kw: Any) -> Any:
        cad = kw["common_attn_metadata"]
        if kw["num_rejected_tokens_gpu"] is not None and cad.batch_size() == args.batch:
            c = {k: _clone(v) for k, v in kw.items()}
            c["common_attn_metadata"] = dataclasses.replace(
                cad, **{f.name: _clone(getattr(cad, f.name)) for f in dataclasses.fields(cad)}
            )
            c["slot_mappings"] = {k: v.clone() for k, v in (kw["slot_mappings"] or {}).items()}
            c["block_tables"] = {g: t.clone() for g, t in d._per_group_block_tables.items()}
            captured.append(c)
        return propose(**kw)

    d.propose = capture
    llm.generate(prompts, params, use_tqdm=False)
    d.propose = propose
    rounds = captured[2:]  # skip the first rounds after the prefills
    if not rounds:
        raise SystemExit("no decode rounds at this batch were captured")
    upstream_build = Gemma4Proposer.build_per_group_and_layer_attn_metadata.__get__(d)

    def replay(c: dict[str, Any], mode: str) -> torch.Tensor:
        kw = {k: v for k, v in c.items() if k != "block_tables"}
        cad = kw["common_attn_metadata"]
        # upstream subtracts the rejected tokens from seq_lens in place
        kw["common_attn_metadata"] = dataclasses.replace(cad, seq_lens=cad.seq_lens.clone())
        d._per_group_block_tables = dict(c["block_tables"])
        if mode == "frozen_kv_mtp":
            return d.propose(**kw)  # type: ignore[no-any-return]
        d.build_per_group_and_layer_attn_metadata = upstream_build
        try:
            return Gemma4Proposer.propose(d, **kw)
        finally:
            del d.build_per_group_and_layer_attn_metadata

    for c in rounds:
        a, b = (replay(c, m) for m in MODES)
        if not torch.equal(a, b):
            raise SystemExit("frozen_kv_mtp and mtp drafted different tokens")

    forward = d.model.forward
    step: dict[str, Any] = {"mode": None, "i": 0}
    fwd_s: dict[str, list[list[float]]] = {m: [[] for _ in range(args.k)] for m in MODES}

    def timed_forward(*a: Any, **kw: Any) -> Any:
        t = time.perf_counter()
        out = forward(*a, **kw)
        if step["mode"] is not None and step["i"] < args.k:
            fwd_s[step["mode"]][step["i"]].append(time.perf_counter() - t)
        step["i"] += 1
        return out

    d.model.forward = timed_forward
    round_s: dict[str, list[float]] = {m: [] for m in MODES}
    for it in range(args.iters):
        for c in rounds:
            for m in MODES if it % 2 == 0 else MODES[::-1]:
                step["mode"], step["i"] = m, 0
                t = time.perf_counter()
                replay(c, m)
                round_s[m].append(time.perf_counter() - t)
    d.model.forward = forward

    ratio = statistics.median(a / b for a, b in zip(*round_s.values(), strict=True))
    print(
        f"batch {args.batch}, k={args.k}: {len(rounds)} captured decode rounds x {args.iters}, "
        "same drafts from both"
    )
    for m in MODES:
        per_step = " / ".join(f"{statistics.median(x) * 1e3:.2f}" for x in fwd_s[m])
        print(
            f"  {m:14s} draft round median {statistics.median(round_s[m]) * 1e3:.2f} ms; "
            f"drafter forward per step {per_step} ms"
        )
    print(f"  frozen_kv_mtp / mtp, back-to-back rounds (median ratio): {ratio:.3f}")


if __name__ == "__main__":
    main()
