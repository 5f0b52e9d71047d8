"""Decode tokens/s at realistic acceptance: none vs upstream `mtp` vs `frozen_kv_mtp` (static k,
vLLM's schedule, and "auto"), on real Gemma 4 shapes with dummy weights (GPU).

    python -m bench.gpu_tokens all --model E4B --out bench/results/h200_tokens.jsonl
    python -m bench.gpu_tokens report bench/results/h200_tokens.jsonl \
        --json bench/results/h200_tokens.json
    python -m bench.gpu_tokens report rows.jsonl --metric full_batch_tok_s

decode tok/s is the tokens a closed batch commits after its last prefill step over the time
from that step's output to the last one, tail included (the last requests finish alone);
full_batch_tok_s counts only the steps that ran the whole batch, what a server at constant
concurrency sees. --tp N runs the engine at tensor parallel N.

Acceptance comes from vLLM's ``rejection_sample_method="synthetic"``: drafts are
accepted at the given unconditional per-position rates whatever the weights, so
tokens/s is what real traffic with that acceptance would get. Profiles (cut to the
k that runs): code (AL 5.37 at k = 7), chat, prose.

One engine per process and per method (``--method``, bench/method.py's syntax; engines
from bench/engine.py):
  none                   no speculation
  mtp:K                  upstream mtp, static k = K (the configs' k is 4)
  mtp:sweep              upstream mtp under a dynamic schedule over 0..k_max; each row pins
                         k for the whole run (vLLM's own per-step lookup), to find its best k
  frozen_kv_mtp:sweep    num_speculative_tokens="auto" (one CUDA graph per batch bucket and
                         k); rows pin k = 1..k_max as above, plus "auto" rows where the
                         goodput policy chooses, plus rows under a batch-size schedule, plus
                         rows that alternate two k (--pin 1/3): what changing k costs
  frozen_kv_mtp:K:OPT=V  static k = K with plugin options (e.g. target_softcap=vllm)
Synthetic rates are set in place between profiles (the rejection sampler's rate
tensor), so one engine serves every profile.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

from bench import thread_cpu
from bench.engine import ATTENTION, EngineSettings, build, draft_length
from bench.host_phases import PHASES, HostPhases, host_table, ms_per_step, profile_run
from bench.method import MethodError, parse, row_engine
from bench.request_timing import ChunkClock, DraftTimer, draft_fields, latency_fields
from bench.token_timing import Latencies

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

PROFILES: dict[str, list[float]] = {
    "code": [0.90, 0.80, 0.70, 0.60, 0.52, 0.45, 0.40],
    "chat": [0.84, 0.60, 0.39, 0.27, 0.18, 0.12, 0.08],
    "prose": [0.45, 0.20, 0.09, 0.04, 0.02, 0.01, 0.0],
}
#: ``all``'s engines
DEFAULT_METHODS = "none,mtp:4,mtp:sweep,frozen_kv_mtp:sweep"
#: the engine built for every k (its rows pin k, run vLLM's schedule or "auto")
SWEEP_ENGINE = "frozen_kv_mtp:sweep"
#: steps a fresh "auto" policy runs on a row's traffic before it is timed
AUTO_WARMUP_STEPS = 300
#: a batch-size schedule of the kind vLLM's docs suggest: deep drafts when the batch
#: is small, none at saturation
SCHEDULE = [[1, 4, 5], [5, 16, 4], [17, 64, 2], [65, 128, 1], [129, 4096, 0]]
#: an alternating row ("--pin 1/3") holds each of its two k this many steps, as long as
#: the "auto" policy holds a choice at the least (its min_dwell_steps)
ALTERNATE_STEPS = 4
FIELDS = (
    "model",
    "method",
    "k",
    "concurrency",
    "profile",
    "decode_tok_s",
    "mean_acceptance_length",
    "step_ms",
    "vllm_version",
)


def engine_settings(args: argparse.Namespace) -> EngineSettings:
    """The factory's settings of a ``run``: the method, the shape (or ``--target`` and
    ``--assistant``), synthetic acceptance at the chat profile unless ``--no-synthetic``
    (each profile's rates are set in place between runs), and in ``--mode graphs`` CUDA
    graphs of the batch sizes the runs use."""
    conc = [int(c) for c in args.concurrency.split(",")]
    settings = EngineSettings(
        parse(args.method),
        model=args.model,
        shapes=args.shapes,
        target=args.target,
        assistant=args.assistant,
        k_max=args.k_max,
        synthetic_rates=None if args.no_synthetic else tuple(PROFILES["chat"]),
        mode=args.mode,
        attention=args.attention,
        dtype=args.dtype,
        max_model_len=args.prompt_len + args.tokens + 64,
        max_num_seqs=max(conc),
        gpu_memory_utilization=args.mem,
        tensor_parallel_size=args.tp,
    )
    if args.mode == "graphs":
        # Only the sizes the runs use: c x (k + 1) tokens for every k a row can take.
        k_max = draft_length(settings)
        sizes = {c * (k + 1) for c in conc for k in range(k_max + 1)}
        settings = dataclasses.replace(settings, capture_sizes=tuple(sorted(sizes)))
    return settings


def without_flag(argv: list[str], name: str) -> list[str]:
    """``argv`` without ``name`` and its value (``--name V`` or ``--name=V``)."""
    out, skip = [], False
    for item in argv:
        if skip:
            skip = False
        elif item == name:
            skip = True
        elif not item.startswith(name + "="):
            out.append(item)
    return out


class Engine:
    """One in-process engine and the handles a run needs."""

    def __init__(self, args: argparse.Namespace) -> None:
        import torch
        import vllm

        self.vllm_version = vllm.__version__
        # the card: timings are compared only between rows of one device
        self.device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
        settings = engine_settings(args)
        built = build(settings)
        self.llm = built.llm
        spec = built.spec
        #: the method string in the one spelling (the row's "engine")
        self.kind = settings.method.text()
        self.method = settings.method.name
        self.options = settings.method.options_text
        self.sweep = settings.method.sweep
        self.k_max = built.k
        self.max_seqs = settings.max_num_seqs
        synthetic = settings.synthetic_rates is not None
        self.load_s = built.load_s
        self.started = time.perf_counter()
        self.core = self.llm.llm_engine.engine_core.engine_core
        self.scheduler = self.core.scheduler
        self.steps = 0
        #: per step: (when its output arrived, requests, tokens committed, decode only, k)
        self.step_log: list[StepRecord] = []
        original = self.scheduler.update_from_output

        def counted(so: Any, out: Any, *a: Any, **k: Any) -> Any:
            self.steps += 1
            spec = so.scheduled_spec_decode_tokens
            self.step_log.append(
                (
                    time.perf_counter(),
                    len(so.num_scheduled_tokens),
                    sum(len(t) for t in (out.sampled_token_ids or ())),
                    all(n == 1 + len(spec.get(r, ())) for r, n in so.num_scheduled_tokens.items()),
                    getattr(so, "num_spec_tokens_to_schedule", None),
                )
            )
            return original(so, out, *a, **k)

        self.scheduler.update_from_output = counted
        self.gc_pauses = GcPauses()
        gc.callbacks.append(self.gc_pauses)
        self.host_phases = self._time_host_phases()
        self.tp = args.tp
        # a wrapper in this process sees only an in-process worker's dispatches
        self.graph_modes = self._count_verify_graph_modes() if self.tp == 1 else Counter()
        self.synthetic = synthetic and spec is not None
        cfg = self.llm.llm_engine.vllm_config
        from devkit.instrument import uses_v2_model_runner

        self.runner = "v2" if uses_v2_model_runner(cfg) else "v1"
        self.async_ = bool(cfg.scheduler_config.async_scheduling)
        self.vocab = cfg.model_config.get_vocab_size()
        self.attention = self.llm.collective_rpc(attention_backends)[0]
        #: what a streaming client would see of each request, and the draft round's
        #: device time (in-process worker only)
        self.chunk_clock = ChunkClock()
        self.chunk_clock.wrap(self.llm.llm_engine.output_processor)
        self.draft_timer = DraftTimer()
        if self.tp == 1 and spec is not None:
            from devkit.instrument import drafter

            self.draft_timer.wrap(drafter(self.llm))

    def _time_host_phases(self) -> HostPhases:
        """Time each phase of this process's step loop (see bench/host_phases.py); a
        phase whose object this engine lacks (another executor) is left out."""
        from vllm.v1.executor import uniproc_executor

        engine = self.llm.llm_engine
        owners = {
            "llm_engine": engine,
            "scheduler": self.scheduler,
            "executor": self.core.model_executor,
            "async_output_future": getattr(uniproc_executor, "AsyncOutputFuture", None),
            "core": self.core,
            "output_processor": getattr(engine, "output_processor", None),
        }
        phases = HostPhases()
        for phase, owner, attr in PHASES:
            if hasattr(owners[owner], attr):
                phases.wrap(owners[owner], attr, phase)
        return phases

    def _count_verify_graph_modes(self) -> Counter[str]:
        """Counts of the CUDA-graph mode each target step dispatched to (Model Runner V2),
        keyed "tokens per request:mode": shows whether a k below an engine's ceiling
        still replays a FULL graph."""
        from devkit.instrument import model_runner

        counts: Counter[str] = Counter()
        manager = getattr(model_runner(self.llm), "cudagraph_manager", None)
        if manager is None or not hasattr(manager, "dispatch"):
            return counts
        original = manager.dispatch

        def dispatch(num_reqs: int, num_tokens: int, uniform: int | None, *a: Any, **k: Any) -> Any:
            desc = original(num_reqs, num_tokens, uniform, *a, **k)
            counts[f"{uniform}:{getattr(desc.cg_mode, 'name', desc.cg_mode)}"] += 1
            return desc

        manager.dispatch = dispatch
        return counts

    # ---- per-run settings -------------------------------------------------------

    def set_profile(self, profile: str) -> None:
        if not self.synthetic:
            return
        from vllm.v1.spec_decode.utils import unconditional_to_conditional_rates

        # what vLLM's sampler computes from synthetic_acceptance_rates at start-up
        rates = unconditional_to_conditional_rates(PROFILES[profile][: self.k_max])
        if not all(self.llm.collective_rpc(set_synthetic_rates, args=(rates,))):
            raise RuntimeError("a worker's rejection sampler has no synthetic acceptance rates")

    def set_k(self, k: int | str, policy: Any = None) -> None:
        """Pin k for every step (an int), vLLM's batch-size SCHEDULE, or "auto" with
        ``policy`` (the one this row's earlier runs left) or a fresh one. The scheduler
        feeds every step's acceptance to its current policy whatever decides k, so a
        pinned or scheduled run gets a throwaway policy: a kept one must learn only its
        own row's traffic (another profile's acceptance is not what a server has)."""
        if not self.sweep:
            return
        from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup

        if hasattr(self.scheduler, "reset_k_policy"):  # frozen_kv_mtp's "auto" engine
            self.scheduler.reset_k_policy(policy if k == "auto" else None)
        if k == "schedule":
            self.scheduler.dynamic_sd_lookup = build_dynamic_sd_schedule_lookup(
                SCHEDULE, self.max_seqs, self.k_max
            )
        elif isinstance(k, str) and "/" in k:
            a, b = _pin_ks(k)
            self.scheduler.dynamic_sd_lookup = Alternating(a, b, ALTERNATE_STEPS)
        elif k != "auto":
            self.scheduler.dynamic_sd_lookup = [int(k)] * (self.max_seqs + 1)

    def spec_counts(self) -> tuple[int, int]:
        from devkit.instrument import spec_metrics

        m = spec_metrics(self.llm)
        return int(m.get("num_drafts", 0) or 0), int(m.get("num_accepted_tokens", 0) or 0)


class Alternating:
    """Stands where vLLM keeps its batch-size -> k table: ``a`` for ``hold`` steps, then
    ``b`` for ``hold`` steps, and so on (vLLM's scheduler looks k up once a step)."""

    def __init__(self, a: int, b: int, hold: int) -> None:
        self.ks, self.hold, self.calls = (a, b), hold, 0

    def __getitem__(self, batch_size: int) -> int:
        k = self.ks[(self.calls // self.hold) % 2]
        self.calls += 1
        return k


class GcPauses:
    """Host time in Python's garbage collector, per generation, from ``gc.callbacks``: a
    host-bound step at high concurrency (async scheduling no longer hiding the host) may
    be a collector's pause, and a row says how much of its time went there."""

    def __init__(self) -> None:
        self.ms = [0.0, 0.0, 0.0]
        self.count = [0, 0, 0]
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
            return
        generation = min(max(int(info.get("generation", 0)), 0), 2)
        self.ms[generation] += 1000 * (time.perf_counter() - self._start)
        self.count[generation] += 1

    def snapshot(self) -> tuple[list[float], list[int]]:
        return list(self.ms), list(self.count)


def gc_since(pauses: GcPauses, before: tuple[list[float], list[int]]) -> tuple[float, int]:
    """(ms in every generation, full collections) since ``before``."""
    ms, count = pauses.snapshot()
    return sum(ms) - sum(before[0]), count[2] - before[1][2]


def interleaved(cells: list[Any], repeats: int) -> list[Any]:
    """The order of a concurrency's timed runs: every round runs each cell once, each
    round starting ``len(cells) // repeats`` cells further on. Step times drift over a
    concurrency's runs (clocks, caches, the host) by more than the gaps between the
    settings compared, so each row's runs spread over the whole span instead of sitting
    together where the drift happens to be kind or unkind."""
    n = len(cells)
    stride = max(1, n // max(1, repeats))
    return [cells[(r * stride + i) % n] for r in range(repeats) for i in range(n)]


def common_draw_seeds(concurrency: int, run: int) -> list[int]:
    """Request seeds of a row's ``run``-th timed run. Model Runner V2 draws a request's
    synthetic acceptance from (its seed, the token's position), so every row's n-th run
    meets the same draws: rows differ by their k and their engine, not by their luck,
    while a row's runs still draw apart."""
    return [run * concurrency + i for i in range(concurrency)]


#: (when a step's output arrived, requests in it, tokens it committed, no prefill in it,
#: the k it drafted: None where the engine has no per-step k lookup)
StepRecord = tuple[float, int, int, bool, int | None]


def full_batch_rate(log: list[StepRecord], batch: int) -> tuple[int, float]:
    """Tokens and seconds of a run's steady part: the decode steps that ran all ``batch``
    requests, each timed by the spacing of its output from the previous full decode
    step's (the engine runs them back to back). A closed batch ends in a tail where the
    unluckiest requests finish alone: a run at 128 requests takes 1.2-1.5x the steps its
    average request needs, while a server at constant concurrency refills its batch."""
    tokens, seconds = 0, 0.0
    for prev, cur in zip(log, log[1:], strict=False):
        if cur[3] and prev[3] and cur[1] == batch and prev[1] == batch:
            tokens += cur[2]
            seconds += cur[0] - prev[0]
    return tokens, seconds


def step_ms_by_k(log: list[StepRecord], batch: int) -> dict[str, list[float]]:
    """``"full:K"`` / ``"tail:K"`` -> [steps, median ms] of a run's back-to-back decode
    steps at k = K, with all ``batch`` requests or fewer: what an "auto" row's steps at
    each k cost, to set beside the pinned rows and the policy's own cost table."""
    times: dict[str, list[float]] = {}
    for i in range(1, len(log)):
        prev, cur = log[i - 1], log[i]
        if cur[3] and prev[3] and cur[4] is not None:
            part = "full" if cur[1] == batch else "tail"
            times.setdefault(f"{part}:{cur[4]}", []).append(1000 * (cur[0] - prev[0]))
    return {key: [len(v), round(statistics.median(v), 3)] for key, v in sorted(times.items())}


def decode_span(log: list[StepRecord]) -> tuple[int, float, int]:
    """Tokens, seconds and steps of a run's decode: from the output of its last step that
    held a prefill to its last output, tail included. Timing the run's wall clock instead
    needs a prefill time to subtract, and at c=1, where a run decodes for about 0.2 s, a
    few ms of error in that time, or in the run's start and end, move a row by several
    percent; the engine's own step outputs carry neither."""
    last_prefill = max((i for i, rec in enumerate(log) if not rec[3]), default=0)
    decode = log[last_prefill + 1 :]
    if not decode:
        return 0, 0.0, 0
    return sum(rec[2] for rec in decode), decode[-1][0] - log[last_prefill][0], len(decode)


def repeats_at(concurrency: int, repeats: int, min_tokens: int, tokens: int) -> int:
    """Timed runs per row at this concurrency. A run at low concurrency decodes few tokens:
    at c=1 it is about 30 draft rounds, so its acceptance (and a batch's run time, which
    ends with its unluckiest request) is a short random draw; ``--min-tokens`` adds runs
    there until a row holds that many output tokens."""
    per_run = concurrency * max(1, tokens - 1)
    return max(repeats, -(-min_tokens // per_run))


def prompt_batches(conc: list[int], vocab: int, prompt_len: int) -> dict[int, list[list[int]]]:
    """Each concurrency's prompts: random token ids from one ``random.Random(0)`` drawn
    concurrency by concurrency in the order given, so every engine and every peer run
    (``bench.sglang_tokens``) sees the same prompts."""
    rng = random.Random(0)
    return {
        c: [[rng.randrange(10, vocab) for _ in range(prompt_len)] for _ in range(c)] for c in conc
    }


def run_engine(args: argparse.Namespace) -> list[dict[str, Any]]:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from devkit.instrument import worker_drafter_info

    eng = Engine(args)

    temperature = 0.0

    def params(n: int, seeds: list[int] | None = None) -> Any:
        # Gemma 4's recommended sampling at T > 0; greedy at T = 0
        sampled = dict(top_p=0.95, top_k=64) if temperature > 0 else {}

        def one(seed: int | None) -> Any:
            return SamplingParams(
                temperature=temperature,
                max_tokens=n,
                ignore_eos=True,
                detokenize=False,
                seed=seed,
                **sampled,
            )

        # seeds only where they pick synthetic draws: sampled requests keep vLLM's own
        # (unseeded) sampling path, as users' traffic does
        if seeds is None or temperature > 0 or not eng.synthetic:
            return one(None)
        return [one(x) for x in seeds]

    settings: list[int | str] = [0]
    if eng.sweep:
        settings = [*range(1, eng.k_max + 1)]
        if args.pin:
            settings = list(args.pin)
        if eng.method == "frozen_kv_mtp":
            settings += [x for x in ("auto", "schedule") if x in args.policies.split(",")]
    elif eng.method != "none":
        settings = [eng.k_max]
    profiles = args.profiles.split(",") if eng.method != "none" else ["-"]
    cells = [(t, p, s) for t in args.temperatures for p in profiles for s in settings]
    rows: list[dict[str, Any]] = []
    n_prompt = args.prompt_len

    #: an "auto" row's policy between its interleaved runs, as a server serving this
    #: traffic would keep it
    policies: dict[Any, Any] = {}

    def apply(cell: tuple[float, str, int | str]) -> None:
        nonlocal temperature
        temperature, profile, setting = cell
        if profile != "-":
            eng.set_profile(profile)
        eng.set_k(setting, policies.get(cell))
        if setting == "auto" and cell not in policies:
            # the policy learns this traffic first, as a serving engine would have:
            # AUTO_WARMUP_STEPS steps from nothing known, once per row
            policies[cell] = eng.scheduler.k_policy
            s0 = eng.steps
            for _ in range(50):
                eng.llm.generate(batch, params(args.tokens), use_tqdm=False)
                if eng.steps - s0 >= AUTO_WARMUP_STEPS:
                    break

    conc = [int(x) for x in args.concurrency.split(",")]
    prompts = prompt_batches(conc, eng.vocab, n_prompt)
    for c in conc:
        batch = [TokensPrompt(prompt_token_ids=ids) for ids in prompts[c]]
        eng.llm.generate(batch, params(args.tokens), use_tqdm=False)  # warm-up
        #: per run: decode tok/s, decode seconds, decode steps, drafts, accepted
        samples: dict[Any, list[tuple[float, float, int, int, int]]] = {cell: [] for cell in cells}
        steady: dict[Any, list[tuple[int, float]]] = {cell: [] for cell in cells}
        chosen: dict[Any, Counter[int]] = {cell: Counter() for cell in cells}
        modes: dict[Any, Counter[str]] = {cell: Counter() for cell in cells}
        step_ms_runs: dict[Any, list[dict[str, list[float]]]] = {cell: [] for cell in cells}
        #: per cell over its timed runs: GC ms, full collections, engine steps
        pauses: dict[Any, list[float]] = {cell: [0.0, 0, 0] for cell in cells}
        #: per cell over its timed runs: host seconds in each phase of the step loop
        host_s: dict[Any, Counter[str]] = {cell: Counter() for cell in cells}
        #: per cell over its timed runs: ns on a core per thread (bench/thread_cpu.py)
        threads: dict[Any, Counter[str]] = {cell: Counter() for cell in cells}
        #: per cell: when each timed run started, seconds after the engine was ready
        starts: dict[Any, list[float]] = {cell: [] for cell in cells}
        #: per cell over its timed runs: TTFT and inter-chunk gaps (ms), the draft
        #: rounds' device ms and the steps they spread over
        lats: dict[Any, Latencies] = {cell: Latencies() for cell in cells}
        drafts_ms: dict[Any, list[float]] = {cell: [] for cell in cells}
        run_steps: dict[Any, int] = dict.fromkeys(cells, 0)
        max_batch: dict[Any, int] = dict.fromkeys(cells, 0)
        for cell in interleaved(cells, repeats_at(c, args.repeats, args.min_tokens, args.tokens)):
            apply(cell)
            policy = getattr(eng.scheduler, "k_policy", None)
            chosen0 = Counter(policy.chosen) if policy is not None else Counter()
            eng.graph_modes.clear()
            d0, a0 = eng.spec_counts()
            eng.step_log.clear()
            seeds = common_draw_seeds(c, len(samples[cell]))
            gc0 = eng.gc_pauses.snapshot()
            h0 = eng.host_phases.snapshot()
            t0 = thread_cpu.snapshot()
            eng.chunk_clock.clear()
            eng.draft_timer.collect()  # rounds of the warm-up and of apply(): not this run's
            submitted = time.perf_counter()
            starts[cell].append(round(submitted - eng.started, 2))
            eng.llm.generate(batch, params(args.tokens, seeds), use_tqdm=False)
            lats[cell].extend(eng.chunk_clock.latencies(submitted))
            drafts_ms[cell] += eng.draft_timer.collect()
            run_steps[cell] += len(eng.step_log)
            max_batch[cell] = max(max_batch[cell], max((r[1] for r in eng.step_log), default=0))
            threads[cell] += thread_cpu.delta(t0)
            gc_ms, gc_full = gc_since(eng.gc_pauses, gc0)
            host_s[cell].update({p: v - h0[p] for p, v in eng.host_phases.snapshot().items()})
            pauses[cell][0] += gc_ms
            pauses[cell][1] += gc_full
            pauses[cell][2] += len(eng.step_log)
            tokens, seconds, steps = decode_span(eng.step_log)
            d1, a1 = eng.spec_counts()
            rate = tokens / seconds if seconds > 0 else 0.0
            samples[cell].append((rate, seconds, max(steps, 1), d1 - d0, a1 - a0))
            steady[cell].append(full_batch_rate(eng.step_log, c))
            if policy is not None and cell[2] == "auto":
                chosen[cell] += Counter(policy.chosen) - chosen0
            step_ms_runs[cell].append(step_ms_by_k(eng.step_log, c))
            modes[cell] += eng.graph_modes
        for cell in cells:
            temperature, profile, setting = cell
            rate, decode, steps, _, _ = sorted(samples[cell])[len(samples[cell]) // 2]
            # acceptance pooled over every run: one run at low concurrency is a short draw
            drafts = sum(x[3] for x in samples[cell])
            accepted = sum(x[4] for x in samples[cell])
            full_tokens = sum(x[0] for x in steady[cell])
            full_s = sum(x[1] for x in steady[cell])
            alternate = _pin_ks(setting) if isinstance(setting, str) and "/" in setting else None
            row: dict[str, Any] = {
                "model": args.model,
                "method": eng.method
                + (":auto" if setting == "auto" else "")
                + (":schedule" if setting == "schedule" else "")
                + (":alternate" if alternate else ""),
                "k": max(alternate)
                if alternate
                else eng.k_max
                if isinstance(setting, str)
                else setting,
                "concurrency": c,
                "profile": profile,
                "temperature": temperature,
                "decode_tok_s": round(rate, 1),
                "mean_acceptance_length": round(1 + accepted / drafts, 3) if drafts else 1.0,
                "step_ms": round(1000 * decode / steps, 3),
                # pooled over the runs; None where no two full decode steps ran back to back
                "full_batch_tok_s": round(full_tokens / full_s, 1) if full_s else None,
                "vllm_version": eng.vllm_version,
                "device": eng.device,
                "engine": eng.kind,
                "pinned": eng.sweep and isinstance(setting, int),
                "options": eng.options,
                "runner": eng.runner,
                "async": eng.async_,
                "mode": args.mode,
                "attention": eng.attention,
                "tp": eng.tp,
                "tokens": args.tokens,
                "prompt_len": args.prompt_len,
                # fewer than c where the KV cache cannot hold c requests at this context
                "max_batch": max_batch[cell],
                **latency_fields(lats[cell]),
                # device ms of the draft rounds per engine step (all steps of the timed
                # runs, prefill included) and its share of a decode step
                **draft_fields(drafts_ms[cell], run_steps[cell], 1000 * decode / steps),
                "load_s": round(eng.load_s, 1),
                "decode_timing": "step_outputs",
                "decode_s_samples": [round(x[1], 4) for x in samples[cell]],
                # when each of them started: a host that slows for a while slows every row
                # run then, which sets rows' runs side by side in time
                "run_started_s": starts[cell],
                # host time in the garbage collector over the timed runs, per engine step
                "gc_ms_per_step": round(pauses[cell][0] / max(pauses[cell][2], 1), 4),
                "gc_full_collections": int(pauses[cell][1]),
                # host ms per step in each phase of the step loop: which one sets the pace
                "host_ms_per_step": ms_per_step({}, dict(host_s[cell]), int(pauses[cell][2])),
                # per run: [steps, median ms] of its decode steps by k, full batch or tail
                "step_ms_by_k": step_ms_runs[cell],
                # the main thread's CPU and wait for a core, and the other threads' CPU:
                # whether a slow host phase waited or ran slower
                "thread_cpu_ms_per_step": thread_cpu.ms_per_step(
                    threads[cell], int(pauses[cell][2])
                ),
                "interleaved": True,
                "common_draws": eng.synthetic and not temperature,
            }
            if args.label:
                row["label"] = args.label
            if setting == "auto" and chosen[cell]:
                counts = dict(sorted(chosen[cell].items()))
                row["k_counts"] = counts
                total = sum(counts.values())
                row["mean_k"] = round(sum(k * n for k, n in counts.items()) / total, 2)
                # why it chose so: its relative costs and acceptance after the row's runs,
                # and the step times behind them
                row["k_policy"] = policies[cell].summary()
                row["k_policy_cost_samples"] = cost_samples(policies[cell])
            if alternate:
                row["alternate"] = alternate
                row["alternate_steps"] = ALTERNATE_STEPS
            if modes[cell]:
                row["verify_graph_modes"] = dict(sorted(modes[cell].items()))
            if args.trace:
                apply(cell)
                try:
                    seeds = common_draw_seeds(c, len(samples[cell]))
                    row["trace"] = trace_one_run(eng, batch, params(args.tokens, seeds))
                except Exception as e:  # a diagnostic: the row stands without it
                    row["trace"] = {"error": repr(e)[:300]}
            if args.host_profile:
                apply(cell)
                seeds = common_draw_seeds(c, len(samples[cell]))
                row["host_profile"] = profile_run(
                    partial(eng.llm.generate, batch, params(args.tokens, seeds), use_tqdm=False),
                    lambda: eng.steps,
                )
            stats = eng.llm.collective_rpc(worker_drafter_info)[0]["stats"]
            if stats is not None:
                row["graph_misses"] = stats["graph_misses"]
            print("ROW", json.dumps(row), flush=True)
            rows.append(row)
            with open(args.out, "a") as f:  # concurrency by concurrency: a cut run keeps its rows
                f.write(json.dumps(row) + "\n")
        # the next concurrency's warm-up runs unpinned: "auto", or upstream's full k;
        # its "auto" rows start from nothing known
        policies.clear()
        eng.set_k("auto" if eng.method == "frozen_kv_mtp" else eng.k_max)
    return rows


#: CPU ops that block the host until the device catches up
HOST_WAITS = ("aten::_local_scalar_dense", "aten::item", "aten::nonzero", "aten::equal")
#: the calls whose host time is a wait for the device (``aten::item`` contains
#: ``_local_scalar_dense``, so only the inner op counts; on a CPU tensor that op reads a
#: host value and its time is next to nothing)
SYNC_CALLS = (
    "cudaEventSynchronize",
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "aten::_local_scalar_dense",
)


def trace_one_run(eng: Engine, batch: Any, params: Any, top: int = 12) -> dict[str, Any]:
    """One more run of the row under the torch profiler: GPU kernel time per step (what
    the device did) next to the step time (what the host waited), kernel and graph
    launches per step (eager or replayed), and the kernels that took the most time."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    s0 = eng.steps
    t = time.perf_counter()
    cuda = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        eng.llm.generate(batch, params, use_tqdm=False)
        if cuda:
            torch.cuda.synchronize()
    wall = time.perf_counter() - t
    steps = max(eng.steps - s0, 1)
    kernels: Counter[str] = Counter()
    launches: Counter[str] = Counter()
    waits: Counter[str] = Counter()
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            kernels[ev.name[:90]] += (
                ev.device_time_total if hasattr(ev, "device_time_total") else ev.cuda_time_total
            )
        elif ev.name.startswith("cu") or ev.name in HOST_WAITS:
            launches[ev.name] += 1  # runtime calls and the ops that wait for the device
            if ev.name in SYNC_CALLS:
                waits[ev.name] += ev.cpu_time_total  # host time blocked on the device
    gpu_us = sum(kernels.values())
    return {
        "steps": steps,
        "wall_ms_per_step": round(1000 * wall / steps, 3),
        "gpu_ms_per_step": round(gpu_us / 1000 / steps, 3),
        "calls_per_step": {k: round(v / steps, 1) for k, v in sorted(launches.items())},
        # near zero: the host never waited, so it set the pace (a host-bound step)
        "host_wait_ms_per_step": {k: round(v / 1000 / steps, 3) for k, v in sorted(waits.items())},
        "top_kernels_ms_per_step": [
            [name, round(us / 1000 / steps, 4)] for name, us in kernels.most_common(top)
        ],
    }


# ---- run on every worker (``LLM.collective_rpc``): under tensor parallelism each rank
# has its own model runner, in its own process


def attention_backends(worker: Any) -> str:
    """The attention backends the engine's layers were built with (e.g. FLASH_ATTN for
    FA4 on Hopper, TRITON_ATTN without it), so rows say what they measured."""
    from vllm.config import get_layers_from_vllm_config
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase

    cfg = worker.model_runner.vllm_config
    layers = get_layers_from_vllm_config(cfg, AttentionLayerBase)  # type: ignore[type-abstract]
    return ",".join(sorted({layer.get_attn_backend().get_name() for layer in layers.values()}))


def set_synthetic_rates(worker: Any, rates: list[float]) -> bool:
    """A profile's conditional rates into the rank's rejection sampler (every rank draws
    its own synthetic acceptance); False where the sampler has none."""
    import torch

    table = getattr(worker.model_runner.rejection_sampler, "synthetic_conditional_rates", None)
    if table is None:
        return False
    table.copy_(torch.tensor(rates, dtype=torch.float32))
    return True


# ---- the report ------------------------------------------------------------------


def best_static(rows: list[dict[str, Any]], method: str) -> dict[tuple[str, str, int], Any]:
    """(model, profile, c) -> the row of ``method``'s best fixed k: a k pinned in a sweep
    engine, or a static engine without options (upstream's sweep engine runs some steps
    without their CUDA graph, so its static k=4 engine can beat its pinned k=4)."""
    best: dict[tuple[str, str, int], Any] = {}
    for r in rows:
        static = not r.get("options") and row_engine(r) == f"{method}:{r['k']}"
        if r["method"] != method or not (r.get("pinned") or static):
            continue
        key = (r["model"], r["profile"], r["concurrency"])
        if key not in best or r["decode_tok_s"] > best[key]["decode_tok_s"]:
            best[key] = r
    return best


#: the rates a table can show: the whole run's (the issue's decode tok/s), or its
#: full-batch steps' (``full_batch_rate``)
METRICS = ("decode_tok_s", "full_batch_tok_s")


def report(rows: list[dict[str, Any]], metric: str = "decode_tok_s") -> str:
    # greedy requests; rows without the rate asked for (timed before it existed) are left out
    rows = [
        {**r, "decode_tok_s": r[metric]} for r in rows if not r.get("temperature") and r.get(metric)
    ]
    none = {(r["model"], r["concurrency"]): r for r in rows if r["method"] == "none"}
    mtp4 = {
        (r["model"], r["profile"], r["concurrency"]): r
        for r in rows
        if r["method"] == "mtp" and not r.get("pinned") and r["k"] == 4
    }
    auto = {
        (r["model"], r["profile"], r["concurrency"]): r
        for r in rows
        if r["method"] == "frozen_kv_mtp:auto"
    }
    sched = {
        (r["model"], r["profile"], r["concurrency"]): r
        for r in rows
        if r["method"] == "frozen_kv_mtp:schedule"
    }
    best_f = best_static(rows, "frozen_kv_mtp")
    best_m = best_static(rows, "mtp")
    out = [
        "| model | profile | c | none | mtp k=4 | mtp best k | frozen best k | frozen schedule "
        "| frozen auto (mean k) | auto / none | auto / best frozen | auto / mtp k=4 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def cell(r: Any, k: bool = False) -> str:
        if r is None:
            return "-"
        text = f"{r['decode_tok_s']:.0f}"
        return text + (f" (k={r['k']})" if k else "")

    def ratio(a: Any, b: Any) -> str:
        return f"{a['decode_tok_s'] / b['decode_tok_s']:.2f}" if a and b else "-"

    for key in sorted({*auto, *best_f, *sched}):
        model, profile, c = key
        a, n = auto.get(key), none.get((model, c))
        auto_cell = f"{a['decode_tok_s']:.0f} ({a.get('mean_k', '?')})" if a else "-"
        out.append(
            f"| {model} | {profile} | {c} | {cell(n)} | {cell(mtp4.get(key))} | "
            f"{cell(best_m.get(key), True)} | {cell(best_f.get(key), True)} | "
            f"{cell(sched.get(key))} | {auto_cell} | {ratio(a, n)} | "
            f"{ratio(a, best_f.get(key))} | {ratio(a, mtp4.get(key))} |"
        )
    return "\n".join(out)


#: how a row's timed runs were taken; rows of one kind are compared with each other only
RUN_KINDS = {
    False: "each row's runs back to back, unseeded",
    True: "runs interleaved across a concurrency's rows, common synthetic draws",
}


#: the prompt length of the headline tables (rows timed before ``prompt_len`` existed)
SHORT_PROMPT = 128


def by_run_kind(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Rows split by how they were timed, by their ``label`` (one run on one host) and by
    their ``device`` (the card). Kinds, labels and cards differ by more than the settings
    compared, so a table never sets them side by side."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        kind = RUN_KINDS[bool(r.get("interleaved"))]
        if r.get("label"):
            kind += f", run {r['label']}"
        if r.get("device"):
            kind += f", {r['device']}"
        # a context length is its own table: a step at 32k reads far more KV than at 128
        if r.get("prompt_len", SHORT_PROMPT) != SHORT_PROMPT:
            kind += f", {r['prompt_len']}-token prompts"
        out.setdefault(kind, []).append(r)
    return out


def draft_share_table(rows: list[dict[str, Any]]) -> str:
    """Markdown: where the step goes for the speculating rows that time their draft
    rounds: step ms, the draft round's device ms per step and its share of the step.
    Empty where no row carries ``draft_share``."""
    rows = [
        r
        for r in rows
        if r.get("draft_share") is not None and not r.get("temperature") and r["method"] != "none"
    ]
    if not rows:
        return ""
    out = [
        "| model | profile | c | method | k | step ms | draft ms / step | draft share |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(
        rows, key=lambda r: (r["model"], r["profile"], r["concurrency"], r["method"], r["k"])
    ):
        out.append(
            f"| {r['model']} | {r['profile']} | {r['concurrency']} | {r['method']} | {r['k']} | "
            f"{r['step_ms']:.2f} | {r['draft_ms_per_step']:.2f} | {100 * r['draft_share']:.0f}% |"
        )
    return "\n".join(out)


def full_step_ms(row: dict[str, Any], k: int) -> float | None:
    """Median over a row's runs of its full-batch decode steps' median ms at k."""
    runs = row.get("step_ms_by_k") or row.get("auto_step_ms") or []
    ms = [run[f"full:{k}"][1] for run in runs if f"full:{k}" in run]
    return statistics.median(ms) if ms else None


def switching_table(rows: list[dict[str, Any]]) -> str:
    """What changing k costs: the full-batch step of each k in a row that alternates two
    k next to the same k pinned for whole runs in the same engine."""
    pinned = {
        (r["model"], r["profile"], r["concurrency"], r["k"]): r
        for r in rows
        if r.get("pinned") and r["method"] == "frozen_kv_mtp" and not r.get("temperature")
    }
    out = []
    for r in rows:
        if not r.get("alternate") or r.get("temperature"):
            continue
        key = (r["model"], r["profile"], r["concurrency"])
        for k in r["alternate"]:
            alt, pin = full_step_ms(r, k), pinned.get((*key, k))
            pin_ms = full_step_ms(pin, k) if pin else None
            if alt is None or pin_ms is None:
                continue
            pair = "/".join(map(str, r["alternate"]))
            out.append(
                f"| {key[0]} | {key[1]} | {key[2]} | {pair} | {k} | {pin_ms:.2f} | "
                f"{alt:.2f} ({alt / pin_ms:.2f}x) |"
            )
    if not out:
        return ""
    head = [
        "Full-batch step (ms, median of runs) of a k alternated with another every "
        f"{ALTERNATE_STEPS} steps, next to the same k pinned:",
        "",
        "| model | profile | c | pair | k | pinned | alternating |",
        "|---|---|---|---|---|---|---|",
    ]
    return "\n".join(head + out)


def variable_k_tax(rows: list[dict[str, Any]]) -> str:
    """Step time of a static k=4 engine (frozen_kv_mtp's if measured, else upstream mtp's)
    next to k=4 and k=k_max pinned in the engine built for every k (frozen_kv_mtp:sweep): what an
    engine that may change k pays."""
    rows = [r for r in rows if not r.get("temperature")]

    def index(engine: str, k: int) -> dict[tuple[str, str, int], Any]:
        return {
            (r["model"], r["profile"], r["concurrency"]): r
            for r in rows
            if row_engine(r) == engine
            and r["k"] == k
            and r.get("pinned") == (engine == SWEEP_ENGINE)
        }

    static_engine = "frozen_kv_mtp:4" if index("frozen_kv_mtp:4", 4) else "mtp:4"
    static = index(static_engine, 4)
    k_max = max((r["k"] for r in rows if row_engine(r) == SWEEP_ENGINE), default=0)
    pinned4, pinned_max = index(SWEEP_ENGINE, 4), index(SWEEP_ENGINE, k_max)
    out = [
        f"| model | profile | c | {static_engine}, static engine | frozen k=4, variable-k engine "
        f"| frozen k={k_max}, variable-k engine |",
        "|---|---|---|---|---|---|",
    ]
    for key in sorted(static):
        if key in pinned4 and key in pinned_max:
            a, b, m = static[key]["step_ms"], pinned4[key]["step_ms"], pinned_max[key]["step_ms"]
            out.append(
                f"| {key[0]} | {key[1]} | {key[2]} | {a:.2f} | {b:.2f} ({b / a:.2f}x) "
                f"| {m:.2f} ({m / a:.2f}x) |"
            )
    return "\n".join(out)


def _pin_ks(entry: str) -> list[int]:
    """The k of one ``--pin`` entry: "3", or "1/3" (alternate 1 and 3)."""
    return [int(x) for x in entry.split("/")]


def _ks(text: str) -> list[int | str]:
    """``--pin``: comma-separated draft lengths, each >= 0; "A/B" alternates A and B
    every ALTERNATE_STEPS steps."""
    out: list[int | str] = []
    for entry in text.split(","):
        try:
            ks = _pin_ks(entry)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a comma-separated list of k (or A/B pairs)"
            ) from None
        if min(ks) < 0 or len(ks) > 2 or (len(ks) == 2 and ks[0] == ks[1]):
            raise argparse.ArgumentTypeError(
                f"{entry!r}: a k is >= 0, and a pair A/B names two different k"
            )
        out.append(ks[0] if len(ks) == 1 else entry)
    return out


def pin_max(pins: list[int | str]) -> int:
    return max(k for p in pins for k in (_pin_ks(p) if isinstance(p, str) else [p]))


def cost_samples(policy: Any) -> dict[int, dict[int, dict[int, list[list[float]]]]]:
    """The latest step-time samples of an ``auto`` row, per batch bucket, context bucket
    and k, as [policy step, ms]: what the log's step times are medians of. The choice
    rests on the relative costs (``k_policy["relative_cost"]``), compared around each
    change of k; the samples show the step times behind them and when in the run they
    were taken."""
    out: dict[int, dict[int, dict[int, list[list[float]]]]] = {}
    for ((b, ctx), k), window in sorted(policy.cost.recent.items()):
        samples = [[step, round(1000 * t, 2)] for step, t in window]
        out.setdefault(b, {}).setdefault(ctx, {})[k] = samples
    return out


def _temperatures(text: str) -> list[float]:
    """``--temperatures``: comma-separated request temperatures, each >= 0."""
    try:
        ts = [float(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list") from None
    if min(ts) < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: temperatures must be >= 0")
    return ts


def add_workload_args(p: argparse.ArgumentParser, concurrency: str) -> None:
    """The workload flags every engine's driver shares (this one and the SGLang peer's):
    the same names and defaults, so one command line describes both engines' runs."""
    p.add_argument("--model", default="E4B", help="Gemma 4 shape: E2B, E4B, 26B-A4B, 31B")
    p.add_argument("--concurrency", default=concurrency)
    p.add_argument("--profiles", default="code,chat,prose")
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3, help="timed runs per row (median)")
    p.add_argument(
        "--min-tokens",
        type=int,
        default=1024,
        help="more timed runs at low concurrency: at least this many output tokens per row",
    )


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, checked as far as it can be before any engine starts (a bad
    method, --pin, counts): argparse's exit with the fix otherwise."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("run", "all"):
        p = sub.add_parser(name)
        if name == "run":
            p.add_argument(
                "--method",
                "--engine",  # its older name
                dest="method",
                required=True,
                help="METHOD:K or METHOD:sweep[:OPTION=VALUE/...] (bench/method.py): none, "
                "mtp:4, mtp:sweep, frozen_kv_mtp:sweep, frozen_kv_mtp:4:target_softcap=vllm",
            )
        else:
            p.add_argument(
                "--methods",
                "--engines",  # its older name
                dest="methods",
                default=DEFAULT_METHODS,
                help="comma-separated",
            )
        add_workload_args(p, concurrency="1,8,32,128,256")
        p.add_argument("--k-max", type=int, default=7)
        p.add_argument(
            "--policies",
            default="auto,schedule",
            help="frozen_kv_mtp:sweep rows besides pinned k",
        )
        p.add_argument("--mode", choices=["graphs", "eager"], default="graphs")
        p.add_argument("--dtype", default="bfloat16")
        p.add_argument(
            "--attention",
            choices=ATTENTION,
            default="default",
            help="attention backend: vLLM's choice, FA4 (FLASH_ATTN version 4) or TRITON_ATTN",
        )
        p.add_argument("--mem", type=float, default=0.85)
        p.add_argument("--tp", type=int, default=1, help="tensor parallel size (GPUs)")
        p.add_argument("--shapes", default="models/shapes")
        p.add_argument("--out", default="bench/results/h200_tokens.jsonl")
        p.add_argument(
            "--label",
            default="",
            help="tag the rows of one run on one host (e.g. h200-2026-12-03-1708): the "
            "report tables each label apart, since hosts differ by more than the settings",
        )
        p.add_argument("--timeout", type=int, default=540, help="seconds per engine (all)")
        # local smoke runs: a real small pair on the CPU, no synthetic acceptance
        p.add_argument("--target", help="a local target dir instead of the dummy shape")
        p.add_argument("--assistant", help="its assistant")
        p.add_argument("--no-synthetic", action="store_true")
        p.add_argument(
            "--temperatures",
            default="0",
            type=_temperatures,
            help="request temperatures, e.g. 0,1 (T > 0 adds top_p 0.95, top_k 64)",
        )
        p.add_argument(
            "--pin",
            type=_ks,
            help="sweep engines: the k to pin, e.g. 0,4,7 (default 1..k_max); A/B alternates "
            f"A and B every {ALTERNATE_STEPS} steps, e.g. 1,3,1/3",
        )
        p.add_argument(
            "--trace", action="store_true", help="profile one more run per row (kernel times)"
        )
        p.add_argument(
            "--host-profile",
            action="store_true",
            help="cProfile one more run per row (the host's Python functions per step)",
        )
    rp = sub.add_parser("report")
    rp.add_argument("jsonl", help="rows: JSON lines, or a JSON list")
    rp.add_argument("--json", help="also write the rows as a JSON list here")
    rp.add_argument(
        "--metric",
        choices=METRICS,
        default="decode_tok_s",
        help="tok/s of whole runs, or of their steps that ran the full batch",
    )
    args = ap.parse_args(argv)
    if args.cmd != "report" and args.pin and pin_max(args.pin) > args.k_max:
        ap.error(f"--pin {pin_max(args.pin)} is above --k-max {args.k_max}")
    if args.cmd != "report" and (args.repeats < 1 or args.min_tokens < 0):
        ap.error("--repeats must be >= 1 and --min-tokens >= 0")
    if args.cmd != "report" and args.tp < 1:
        ap.error("--tp must be >= 1")
    if args.cmd != "report" and (args.target is None) != (args.assistant is None):
        ap.error("--target and --assistant go together")
    if args.cmd != "report":  # every method string checked before the first engine starts
        for method in [args.method] if args.cmd == "run" else args.methods.split(","):
            try:
                draft_length(EngineSettings(parse(method), k_max=args.k_max))
            except MethodError as e:
                ap.error(f"--method: {e}")
    return args


def main() -> None:
    args = arguments()
    if args.cmd == "run":
        run_engine(args)
    elif args.cmd == "all":
        flags = list(sys.argv[2:])
        for name in ("--methods", "--engines"):
            flags = without_flag(flags, name)
        for method in args.methods.split(","):
            cmd = [sys.executable, "-m", "bench.gpu_tokens", "run", "--method", method, *flags]
            print("+", " ".join(cmd), flush=True)
            try:
                subprocess.run(cmd, check=False, timeout=args.timeout)
            except subprocess.TimeoutExpired:
                print(f"engine {method} ran past {args.timeout} s", flush=True)
    else:
        text = Path(args.jsonl).read_text()
        rows = (
            json.loads(text)
            if text.lstrip().startswith("[")
            else [json.loads(line) for line in text.splitlines() if line]
        )
        for kind, group in by_run_kind(rows).items():
            print(f"## {kind}\n")
            print(report(group, args.metric))
            print()
            print(variable_k_tax(group))
            print()
            switching = switching_table(group)
            if switching:
                print(switching)
                print()
            share = draft_share_table(group)
            if share:
                print(share)
                print()
            host = host_table(group)
            if host:
                print(host)
                print()
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
