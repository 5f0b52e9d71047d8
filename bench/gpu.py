"""GPU benchmark: none vs upstream `mtp` vs `frozen_kv_mtp` on real Gemma 4 shapes (dummy weights).

    python -m bench.gpu run --model E4B --method frozen_kv_mtp --out bench/results/h200.jsonl
    python -m bench.gpu all --models E4B --out bench/results/h200.jsonl   # all 3 methods
    python -m bench.gpu report bench/results/h200.jsonl --json bench/results/h200.json

Methods are bench/method.py's strings (``frozen_kv_mtp:draft_attention=split``; k from
``--k`` unless the string gives one); engines come from bench/engine.py. ``--target`` and
``--assistant`` run a local pair instead (e.g. the committed trained pair, on CPU with
``--mode eager --dtype float32``: draft rounds are then timed by wall clock).

One engine per process (in-process engine core, `VLLM_ENABLE_V1_MULTIPROCESSING=0`).
Weights are random (`load_format="dummy"`), so drafts are ~never accepted: what is
measured is the cost of speculation per engine step (draft round + verify), which
is what acceptance then pays back. Per concurrency c it warms up with a full N-token
run, times a 1-token run (prefill) and then N-token runs of c requests (--repeats,
median); ms/step = decode time / engine steps. TTFT rows keep their raw samples.
The draft-round time is measured with CUDA events around the drafter's `propose`
(recorded on the stream; read after the run, so no sync is added to the round), and
the host time of the same call with a wall clock (`draft_host_ms`: how long the host
spends launching a round; the GPU waits for it when the host is behind).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

from bench.engine import MODES, EngineSettings, build, draft_length
from bench.method import METHODS, MethodError, MethodSpec, parse
from bench.micro.gpu_profile import StepCounter, StepWindowProfiler, profile_call

FIELDS = (
    "model",
    "method",
    "runner",
    "concurrency",
    "prompt_len",
    "step_ms",
    "draft_round_ms",
    "decode_tok_s",
    "ttft_ms",
)


class WallEvent:
    """A CUDA event's interface on the host clock: where there is no CUDA device (a CPU
    smoke run) a draft round runs synchronously, so its wall time is its time."""

    def __init__(self, enable_timing: bool = True) -> None:
        self.t = 0.0

    def record(self) -> None:
        self.t = time.perf_counter()

    def elapsed_time(self, end: WallEvent) -> float:
        return 1000 * (end.t - self.t)


class DraftTimer:
    """CUDA events around every draft round, resolved after the run, and the host
    time of each ``propose`` call."""

    def __init__(self, drafter: Any) -> None:
        import torch

        self.cuda = torch.cuda.is_available()
        event: Any = torch.cuda.Event if self.cuda else WallEvent
        self.pairs: list[tuple[Any, Any]] = []
        self.host_s: list[float] = []
        self.enter_s: list[float] = []  # perf_counter at each propose call's entry
        self.enabled = False
        original = drafter.propose

        def propose(*args: Any, **kwargs: Any) -> Any:
            if not self.enabled:
                return original(*args, **kwargs)
            start, end = event(enable_timing=True), event(enable_timing=True)
            start.record()
            t = time.perf_counter()
            self.enter_s.append(t)
            out = original(*args, **kwargs)
            self.host_s.append(time.perf_counter() - t)
            end.record()
            self.pairs.append((start, end))
            return out

        drafter.propose = propose

    def clear(self) -> None:
        self.pairs.clear()
        self.host_s.clear()
        self.enter_s.clear()

    def median_host_ms(self) -> float | None:
        return 1000 * statistics.median(self.host_s) if self.host_s else None

    def median_ms(self) -> float | None:
        import torch

        if not self.pairs:
            return None
        if self.cuda:
            torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in self.pairs)


def ttft_host_timing(starts: list[float], times: list[float], timer: DraftTimer) -> dict[str, Any]:
    """Medians over TTFT samples of when the first ``propose`` call began (ms after the
    request was submitted) and how long it held the host, from the calls made inside
    each sample's wall-clock window; empty without calls."""
    enter, held = [], []
    for t0, dt in zip(starts, times, strict=True):
        calls = [i for i, e in enumerate(timer.enter_s) if t0 <= e <= t0 + dt]
        if calls:
            enter.append(1000 * (timer.enter_s[calls[0]] - t0))
            held.append(1000 * timer.host_s[calls[0]])
    if not enter:
        return {}
    return {
        "ttft_propose_at_ms": round(statistics.median(enter), 3),
        "ttft_propose_host_ms": round(statistics.median(held), 3),
    }


def parse_method(text: str) -> MethodSpec:
    """A ``--method`` string (bench/method.py's syntax) for this bench: one k per engine,
    no sweep; SystemExit names the fix before any engine starts."""
    try:
        spec = parse(text)
        draft_length(EngineSettings(spec, default_k=1, allow_sweep=False))
    except MethodError as e:
        raise SystemExit(f"--method: {e}") from None
    return spec


def _spec_drafts(llm: Any) -> int:
    from devkit.instrument import spec_metrics

    return int(spec_metrics(llm).get("num_drafts", 0))


def random_prompts(rng: random.Random, n: int, length: int, high: int) -> list[Any]:
    """``n`` token prompts of ``length`` random ids in [10, high): no prefix-cache hits."""
    from vllm.inputs import TokensPrompt

    return [
        TokensPrompt(prompt_token_ids=[rng.randrange(10, high) for _ in range(length)])
        for _ in range(n)
    ]


def engine_settings(
    args: argparse.Namespace, max_model_len: int, max_num_seqs: int
) -> EngineSettings:
    """The factory's settings of a ``run``: the shape (or ``--target``/``--assistant``), the
    method, ``--k`` where the method gives none, ``--mode``."""
    return EngineSettings(
        parse_method(args.method),
        model=args.model,
        shapes=args.shapes,
        target=args.target,
        assistant=args.assistant,
        default_k=args.k,
        allow_sweep=False,
        mode=args.mode,
        dtype=args.dtype,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        gpu_memory_utilization=args.mem,
        tensor_parallel_size=args.tp,
    )


def run_one(args: argparse.Namespace) -> list[dict[str, Any]]:
    from vllm import SamplingParams

    concurrency = [int(c) for c in args.concurrency.split(",")]
    ttft_lens = [int(n) for n in args.ttft.split(",") if n]
    max_len = max([args.prompt_len, *ttft_lens]) + args.tokens + 64
    settings = engine_settings(args, max_len, max(concurrency))
    t0 = time.time()
    built = build(settings)
    llm, spec = built.llm, built.spec
    load_s = time.time() - t0
    cfg = llm.llm_engine.vllm_config
    from devkit.instrument import drafter, uses_v2_model_runner

    runner = "v2" if uses_v2_model_runner(cfg) else "v1"

    # With TP>1 the drafter lives in worker processes: no draft-round timer then.
    timer = DraftTimer(drafter(llm)) if spec and args.tp == 1 else None
    counter = StepCounter(llm)
    profile_at = {int(c) for c in args.profile_at.split(",") if c}
    profile_ttft = {int(n) for n in args.profile_ttft.split(",") if n}
    window = StepWindowProfiler(counter) if profile_at else None
    rng = random.Random(0)
    vocab = cfg.model_config.get_vocab_size()

    def prompts(n: int, length: int) -> list[Any]:
        return random_prompts(rng, n, length, vocab)

    def params(n: int) -> Any:
        return SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True, detokenize=False)

    # the method without its K (rows keep k apart), as the report groups rows
    base = {
        "model": args.model,
        "method": settings.method.without_k(),
        "runner": runner,
        "run": args.run,
    }
    info = {
        "k": built.k,
        "mode": args.mode,
        "load_s": round(load_s, 1),
        "async": cfg.scheduler_config.async_scheduling,
        "tokens": args.tokens,
    }
    rows: list[dict[str, Any]] = []
    for c in concurrency:
        batch = prompts(c, args.prompt_len)
        # Warm-up over the same lengths as the timed runs: a shape first seen while
        # timing (a kernel specialised or JIT-compiled on first use) would land in
        # one method's numbers and not another's.
        llm.generate(batch, params(args.tokens), use_tqdm=False)
        t = time.perf_counter()
        llm.generate(batch, params(1), use_tqdm=False)
        prefill = time.perf_counter() - t
        if timer:
            timer.clear()
            timer.enabled = True
        step_samples = []
        for _ in range(args.repeats):  # median of repeats: one stray spike can't skew it
            drafts0 = _spec_drafts(llm)
            t = time.perf_counter()
            llm.generate(batch, params(args.tokens), use_tqdm=False)
            decode = max(time.perf_counter() - t - prefill, 1e-9)
            steps = (_spec_drafts(llm) - drafts0) / c if spec else args.tokens - 1
            step_samples.append(1000 * decode / max(steps, 1))
        if timer:
            timer.enabled = False
        step_ms = statistics.median(step_samples)
        draft_ms = timer.median_ms() if timer else None
        host_ms = timer.median_host_ms() if timer else None
        row = dict(
            base,
            concurrency=c,
            prompt_len=args.prompt_len,
            step_ms=round(step_ms, 3),
            draft_round_ms=None if draft_ms is None else round(draft_ms, 3),
            decode_tok_s=round(c * (args.tokens - 1) / (step_ms * steps / 1000), 1),
            ttft_ms=None,
            steps=round(steps, 1),
            step_ms_samples=[round(x, 3) for x in step_samples],
            draft_host_ms=None if host_ms is None else round(host_ms, 3),
            **info,
        )
        print("ROW", json.dumps(row), flush=True)
        rows.append(row)
    for n in ttft_lens:
        one = prompts(1, n)
        llm.generate(one, params(1), use_tqdm=False)  # warm-up at this length
        times, engine_steps, starts = [], [], []
        if timer:  # the draft round(s) a 1-token request still pays after its prefill
            timer.clear()
            timer.enabled = True
        for _ in range(args.ttft_repeats):
            one = prompts(1, n)  # fresh tokens: no prefix-cache hit
            steps0 = counter.calls
            t = time.perf_counter()
            starts.append(t)
            llm.generate(one, params(1), use_tqdm=False)
            times.append(time.perf_counter() - t)
            engine_steps.append(counter.calls - steps0)
        if timer:
            timer.enabled = False
        ttft_draft = timer.median_ms() if timer else None
        rounds = len(timer.pairs) / args.ttft_repeats if timer else None
        # Host side of the first token's draft: when propose was entered (ms after the
        # request was submitted) and how long the call held the host.
        host = ttft_host_timing(starts, times, timer) if timer else {}
        row = dict(
            base,
            concurrency=1,
            prompt_len=n,
            step_ms=None,
            draft_round_ms=None,
            decode_tok_s=None,
            ttft_ms=round(1000 * statistics.median(times), 2),
            ttft_ms_samples=[round(1000 * x, 2) for x in times],
            ttft_draft_ms=None if ttft_draft is None else round(ttft_draft, 3),
            ttft_draft_rounds=rounds,
            ttft_engine_steps=engine_steps,
            **host,
            **info,
        )
        print("ROW", json.dumps(row), flush=True)
        rows.append(row)
    # Profiles last: a profiler session can leave CUPTI hooks behind that would
    # disturb any timing taken after it.
    for row in rows:
        c, n = row["concurrency"], row["prompt_len"]
        if window is not None and row["step_ms"] is not None and c in profile_at:
            # Decode steps 4..19 of a 32-token run: kernel time vs wall per step.
            window.arm(4, 16)
            llm.generate(prompts(c, n), params(32), use_tqdm=False)
            row["profile"] = window.result
        elif row["ttft_ms"] is not None and n in profile_ttft:
            # One more fresh request, profiled end to end.
            fresh = prompts(1, n)
            row["ttft_profile"] = profile_call(
                lambda: llm.generate(fresh, params(1), use_tqdm=False)  # noqa: B023
            )
        else:
            continue
        print("PROFILE", json.dumps(row), flush=True)
    return rows


def kernel_differences(profiled: list[dict[str, Any]], per_row: int = 8) -> list[str]:
    """Markdown lines: for each profiled method row, the kernels whose time per decode
    step differs most from none's at the same run, model, runner and concurrency. Only
    rows that kept 40 kernels with launch counts (what ``gpu_profile.summarize`` keeps now)
    take part: with 15 kept, a kernel missing from one list would read as 0."""

    def kernels(r: dict[str, Any]) -> dict[str, tuple[float, float]] | None:
        top = r["profile"].get("top_kernels") or []
        if not top or len(top[0]) < 3:
            return None
        return {name: (ms, calls) for name, ms, calls in top}

    key = lambda r: (r.get("run", ""), r["model"], r["runner"], r["concurrency"])  # noqa: E731
    base = {key(r): kernels(r) for r in profiled if r["method"] == "none"}
    lines: list[str] = []
    for r in sorted(profiled, key=lambda r: (*key(r), r["method"])):
        mine, theirs = kernels(r), base.get(key(r))
        if r["method"] == "none" or mine is None or theirs is None:
            continue
        if not lines:
            lines += [
                "",
                "Where a method's extra kernel time per decode step goes (against none at the "
                f"same c; the {per_row} largest differences; ms and launches per step):",
                "",
                "| run | model | runner | method | c | kernel | none ms | method ms | "
                "difference ms | launches none / method |",
                "|---|---|---|---|---|---|---|---|---|---|",
            ]
        names = sorted(
            set(mine) | set(theirs),
            key=lambda k: -abs(mine.get(k, (0.0, 0.0))[0] - theirs.get(k, (0.0, 0.0))[0]),
        )
        run, model, runner, c = key(r)
        for name in names[:per_row]:
            (a, na), (b, nb) = theirs.get(name, (0.0, 0.0)), mine.get(name, (0.0, 0.0))
            cells = [run or "-", model, runner, r["method"], str(c), f"`{name[:60]}`"]
            cells += [f"{a:.3f}", f"{b:.3f}", f"{b - a:+.3f}", f"{na:g} / {nb:g}"]
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def report(rows: list[dict[str, Any]], acceptance_lengths: tuple[float, ...] = (2.8, 3.5)) -> str:
    """Markdown table + overhead ratios + modelled speedups from measured rows."""
    out = [
        "| run | model | runner | c | none ms/step | mtp ms/step | frozen ms/step | mtp overhead | "
        "frozen overhead | frozen/mtp overhead | mtp draft ms | frozen draft ms | "
        + " | ".join(f"modelled x @AL {a}" for a in acceptance_lengths)
        + " |",
        "|" + "---|" * (12 + len(acceptance_lengths)),
    ]
    key = {
        (r.get("run", ""), r["model"], r["runner"], r["method"], r["concurrency"]): r
        for r in rows
        if r["step_ms"]
    }
    combos = sorted(
        {
            (r.get("run", ""), r["model"], r["runner"], r["concurrency"])
            for r in rows
            if r["step_ms"]
        }
    )
    for run, model, runner, c in combos:
        get = {m: key.get((run, model, runner, m, c)) for m in METHODS}
        if not get["none"]:
            continue
        none = get["none"]["step_ms"]
        cells = [run or "-", model, runner, str(c), f"{none:.2f}"]
        over = {}
        for m in ("mtp", "frozen_kv_mtp"):
            r = get[m]
            cells.append(f"{r['step_ms']:.2f}" if r else "-")
            over[m] = r["step_ms"] - none if r else None
        for m in ("mtp", "frozen_kv_mtp"):
            cells.append("-" if over[m] is None else f"{over[m]:+.2f}")
        ratio = (
            f"{over['frozen_kv_mtp'] / over['mtp']:.2f}"
            if over["mtp"] and over["frozen_kv_mtp"] is not None and over["mtp"] > 0
            else "-"
        )
        cells.append(ratio)
        for m in ("mtp", "frozen_kv_mtp"):
            row = get[m]
            d = row["draft_round_ms"] if row else None
            cells.append("-" if d is None else f"{d:.2f}")
        fr = get["frozen_kv_mtp"]
        for a in acceptance_lengths:
            cells.append(f"{a * none / fr['step_ms']:.2f}" if fr else "-")
        out.append("| " + " | ".join(cells) + " |")
    variants = sorted(
        {(r.get("run", ""), r["model"], r["runner"], r["method"]) for r in rows}
        - {(r.get("run", ""), r["model"], r["runner"], m) for r in rows for m in METHODS}
    )
    if variants:
        out += [
            "",
            "| run | model | runner | method | c | ms/step | overhead | overhead / mtp's | "
            "draft ms |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for run, model, runner, method in variants:
            for r in sorted(
                (
                    r
                    for r in rows
                    if r["step_ms"]
                    and (r.get("run", ""), r["model"], r["runner"], r["method"])
                    == (run, model, runner, method)
                ),
                key=lambda r: r["concurrency"],
            ):
                c = r["concurrency"]
                base_row = key.get((run, model, runner, "none", c))
                mtp_row = key.get((run, model, runner, "mtp", c))
                extra = r["step_ms"] - base_row["step_ms"] if base_row else None
                mtp_extra = (
                    mtp_row["step_ms"] - base_row["step_ms"] if mtp_row and base_row else None
                )
                cells = [run or "-", model, runner, method, str(c), f"{r['step_ms']:.2f}"]
                cells.append("-" if extra is None else f"{extra:+.2f}")
                cells.append(f"{extra / mtp_extra:.2f}" if extra is not None and mtp_extra else "-")
                d = r["draft_round_ms"]
                cells.append("-" if d is None else f"{d:.2f}")
                out.append("| " + " | ".join(cells) + " |")
    profiled = [r for r in rows if r.get("profile")]
    if profiled:
        out += [
            "",
            "GPU kernel time per decode step (profiled window, summed kernels; wall under "
            "the profiler is not a timing):",
            "",
            "| run | model | runner | method | c | ms/step (timed) | kernel ms/step | "
            "kernel overhead | overhead / mtp's | GPU idle ms/step | draft host ms |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        kern = {
            (r.get("run", ""), r["model"], r["runner"], r["method"], r["concurrency"]): r[
                "profile"
            ]["kernel_ms"]
            for r in profiled
        }
        for r in sorted(
            profiled, key=lambda r: (r.get("run", ""), r["model"], r["concurrency"], r["method"])
        ):
            run, c = r.get("run", ""), r["concurrency"]
            k = r["profile"]["kernel_ms"]
            base_k = kern.get((run, r["model"], r["runner"], "none", c))
            mtp_k = kern.get((run, r["model"], r["runner"], "mtp", c))
            extra = k - base_k if base_k is not None and r["method"] != "none" else None
            mtp_extra = mtp_k - base_k if mtp_k is not None and base_k is not None else None
            cells = [run or "-", r["model"], r["runner"], r["method"], str(c)]
            cells += [f"{r['step_ms']:.2f}", f"{k:.2f}"]
            cells.append("-" if extra is None else f"{extra:+.2f}")
            cells.append(f"{extra / mtp_extra:.2f}" if extra is not None and mtp_extra else "-")
            # Timed step minus its kernel sum: time the GPU waited (on the host, mostly).
            cells.append(f"{r['step_ms'] - k:.2f}")
            host = r.get("draft_host_ms")
            cells.append("-" if host is None else f"{host:.2f}")
            out.append("| " + " | ".join(cells) + " |")
        out += kernel_differences(profiled)
    ttft = [r for r in rows if r["ttft_ms"] is not None]
    if ttft:
        out += [
            "",
            "| run | model | runner | prompt | none TTFT ms | mtp TTFT ms | frozen TTFT ms | "
            "frozen - mtp ms | TTFT samples (none / mtp / frozen) | mtp draft ms | "
            "frozen draft ms |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        tk = {
            (r.get("run", ""), r["model"], r["runner"], r["method"], r["prompt_len"]): r
            for r in ttft
        }
        runs = sorted({(r.get("run", ""), r["model"], r["runner"], r["prompt_len"]) for r in ttft})

        def spread(r: dict[str, Any] | None) -> str:
            xs = (r or {}).get("ttft_ms_samples")
            return f"{min(xs):.0f}-{max(xs):.0f}" if xs else "-"

        def draft(r: dict[str, Any] | None) -> str:
            d = (r or {}).get("ttft_draft_ms")
            return "-" if d is None else f"{d:.2f}"

        for run, model, runner, n in runs:
            g = {m: tk.get((run, model, runner, m, n)) for m in METHODS}
            v = {m: (g[m] or {}).get("ttft_ms") for m in METHODS}
            diff = (
                f"{v['frozen_kv_mtp'] - v['mtp']:+.2f}"
                if v["frozen_kv_mtp"] is not None and v["mtp"] is not None
                else "-"
            )
            cells = (
                [run or "-", model, runner, str(n)]
                + ["-" if v[m] is None else f"{v[m]:.2f}" for m in METHODS]
                + [diff, " / ".join(spread(g[m]) for m in METHODS)]
                + [draft(g["mtp"]), draft(g["frozen_kv_mtp"])]
            )
            out.append("| " + " | ".join(cells) + " |")
        timed = [r for r in ttft if r.get("ttft_propose_at_ms") is not None]
        if timed:
            out += [
                "",
                "Host side of the first token's draft call (medians over the TTFT samples):",
                "",
                "| run | model | runner | prompt | method | TTFT ms | propose began at ms | "
                "propose held the host ms |",
                "|---|---|---|---|---|---|---|---|",
            ]
            for r in sorted(timed, key=lambda r: (r.get("run", ""), r["model"], r["prompt_len"])):
                out.append(
                    f"| {r.get('run') or '-'} | {r['model']} | {r['runner']} | "
                    f"{r['prompt_len']} | {r['method']} | {r['ttft_ms']:.2f} | "
                    f"{r['ttft_propose_at_ms']:.2f} | {r['ttft_propose_host_ms']:.2f} |"
                )
    return "\n".join(out)


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, its method strings checked before any engine starts."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("run", "all"):
        p = sub.add_parser(name)
        if name == "run":
            p.add_argument("--model", default="E4B")
            p.add_argument(
                "--method",
                required=True,
                help="METHOD[:K][:OPTION=VALUE/...] (bench/method.py): none, mtp or "
                "frozen_kv_mtp, e.g. frozen_kv_mtp:centroid_head=dense",
            )
        else:
            p.add_argument("--models", default="E4B")
            p.add_argument("--methods", default=",".join(METHODS), help="comma-separated")
        p.add_argument("--k", type=int, default=3, help="k of a method string without K")
        p.add_argument("--tp", type=int, default=1)
        p.add_argument("--concurrency", default="1,8,32,128")
        p.add_argument("--prompt-len", type=int, default=128)
        p.add_argument("--tokens", type=int, default=128)
        p.add_argument("--ttft", default="1024,8192", help="prompt lengths for TTFT (c=1)")
        p.add_argument("--ttft-repeats", type=int, default=5)
        p.add_argument(
            "--repeats", type=int, default=5, help="timed decode runs per concurrency (median)"
        )
        p.add_argument(
            "--mode",
            choices=MODES,
            default="default",
            help="default: torch.compile + CUDA graphs; graphs: CUDA graphs only; eager: "
            "neither (CPU smoke runs)",
        )
        p.add_argument(
            "--profile-at",
            default="",
            help="concurrencies whose decode steps are also profiled (kernel vs wall ms)",
        )
        p.add_argument(
            "--profile-ttft", default="", help="TTFT prompt lengths also profiled end to end"
        )
        p.add_argument("--mem", type=float, default=0.85)
        p.add_argument("--shapes", default="models/shapes")
        p.add_argument("--dtype", default="bfloat16")
        # local smoke runs: a real small pair instead of the dummy shape
        p.add_argument("--target", help="a local target dir instead of the dummy shape")
        p.add_argument("--assistant", help="its assistant")
        p.add_argument("--out", default="bench/results/h200.jsonl")
        p.add_argument("--run", default="", help="label stored in each row (groups the report)")
    rp = sub.add_parser("report")
    rp.add_argument("jsonl")
    rp.add_argument("--json", help="write the rows as a JSON list here")
    args = ap.parse_args(argv)
    if args.cmd != "report" and (args.target is None) != (args.assistant is None):
        ap.error("--target and --assistant go together")
    if args.cmd != "report":  # every method string checked before the first engine starts
        for method in [args.method] if args.cmd == "run" else args.methods.split(","):
            parse_method(method)
    return args


def main() -> None:
    args = arguments()
    if args.cmd == "run":
        rows = run_one(args)
        with open(args.out, "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    elif args.cmd == "all":
        for model in args.models.split(","):
            for method in args.methods.split(","):
                cmd = [sys.executable, "-m", "bench.gpu", "run"]
                cmd += ["--model", model, "--method", method]
                for flag in (
                    "k",
                    "tp",
                    "concurrency",
                    "prompt_len",
                    "tokens",
                    "ttft",
                    "ttft_repeats",
                    "repeats",
                    "mode",
                    "profile_at",
                    "profile_ttft",
                    "mem",
                    "shapes",
                    "dtype",
                    "target",
                    "assistant",
                    "out",
                    "run",
                ):
                    if getattr(args, flag) is not None:
                        cmd += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
                print("+", " ".join(cmd), flush=True)
                subprocess.run(cmd, check=False)
    else:
        rows = [json.loads(line) for line in open(args.jsonl) if line.strip()]
        print(report(rows))
        if args.json:
            slim = [
                {k: r.get(k) for k in FIELDS}
                | {"run": r.get("run", ""), "k": r.get("k"), "mode": r.get("mode")}
                # rows typed in from a printed report say so
                | ({"source": r["source"]} if r.get("source") else {})
                for r in rows
            ]
            Path(args.json).write_text(json.dumps(slim, indent=1) + "\n")


if __name__ == "__main__":
    main()
