"""Decode tokens/s of SGLang (no speculation, and its FROZEN_KV_MTP as chains and as a
tree) on the Gemma 4 shapes with dummy weights, at the acceptance of our profiles: the
peer that ``bench.gpu_tokens`` rows are compared with (GPU).

    python -m bench.sglang_tokens all --model E4B --out bench/results/sglang_tokens.jsonl
    python -m bench.sglang_tokens all --model E4B --dry-run        # the plan, no GPU
    python -m bench.sglang_tokens peers bench/results/sglang_tokens.jsonl \
        bench/results/h200_tokens.jsonl --out bench/results/peers.json
    python -m bench.sglang_tokens report bench/results/peers.json

Settings (``--settings``, one engine each; ``--steps`` adds a chain engine per step count,
and the peers table keeps the best chain per concurrency and profile):
  none          no speculation
  chain:K       FROZEN_KV_MTP, topk 1, K steps (K + 1 draft tokens)
  tree:T:N:K    FROZEN_KV_MTP, topk T, N draft tokens, K steps (SGLang's recipe: 3:12:5)

Why SGLang's offline Engine and not its server: the same closed batches at concurrency c
as ``bench.gpu_tokens`` (whose LLM.generate is offline too), no HTTP client in the timed
path, and in-process access to the outputs as SGLang's front end receives them. Requests
stream (``stream=True``), so every engine step sends each running request its tokens; a
patched ``TokenizerManager._handle_batch_output`` timestamps each of those output
batches. Decode tok/s, ITL and TTFT come from that log (``bench.token_timing``).

Matched acceptance (``bench.peers``): ``SGLANG_SIMULATE_ACC_LEN`` = the profile's mean AL
at the steps that run (method ``match-expected``); the tree gets 1.16x the chain's AL at
the same depth. SGLang reads that variable once per process, so a plugin
(``bench.sglang_hooks``) adds a scheduler RPC that sets it between profiles: one engine
per setting serves every profile and concurrency. SGLang draws the simulated length once
per step for the whole batch (floor or ceiling of the mean), where our synthetic rates
draw per request and position: SGLang's requests advance in lockstep and a closed batch
ends without the tail of unlucky requests that ours has. Rows keep ``full_batch_tok_s``
(the steps that ran the whole batch) beside decode tok/s for that reason.

Engine arguments set explicitly (SGLang's FROZEN_KV_MTP otherwise caps
max_running_requests at 48): max_running_requests = the largest c, enable_mixed_chunk
off (SGLang forces it off for this method anyway), attention_backend triton (SGLang's
only Gemma 4 backend on Hopper), sampling_backend pytorch, decode CUDA graphs for the
concurrencies run, prefill CUDA graphs off unless ``--prefill-graphs`` (their capture of
58 sizes costs start-up time and touches only TTFT).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.gpu_tokens import (
    PROFILES,
    add_workload_args,
    interleaved,
    prompt_batches,
    repeats_at,
)
from bench.peers import (
    TREE_AL_SOURCE,
    chain_al,
    read_rows,
    report,
    sglang_peers,
    tree_al,
    vllm_peers,
)
from bench.token_timing import (
    Latencies,
    OutputLog,
    decode_span,
    full_batch_span,
    latencies,
    percentile,
)

DEFAULT_SETTINGS = "none,chain:4,tree:3:12:5"


@dataclass(frozen=True)
class Setting:
    """One SGLang engine configuration."""

    name: str
    topk: int = 0
    steps: int = 0
    draft_tokens: int = 0

    @property
    def method(self) -> str:
        return "none" if self.steps == 0 else "frozen_kv_mtp"

    def acc_len(self, profile: str) -> float | None:
        """The mean AL SGLang simulates for ``profile`` (None: no speculation)."""
        if self.steps == 0:
            return None
        if self.topk == 1:
            return chain_al(profile, self.steps)
        return tree_al(profile, self.steps)


def parse_setting(text: str) -> Setting:
    """``none``, ``chain:K`` or ``tree:T:N:K`` (see the module doc)."""
    parts = text.strip().split(":")
    try:
        nums = [int(p) for p in parts[1:]]
    except ValueError:
        raise ValueError(f"setting {text!r}: the numbers after the kind must be integers") from None
    max_k = min(len(r) for r in PROFILES.values())
    if parts[0] == "none" and not nums:
        return Setting("none")
    if parts[0] == "chain" and len(nums) == 1 and 1 <= nums[0] <= max_k:
        return Setting(text.strip(), topk=1, steps=nums[0], draft_tokens=nums[0] + 1)
    if parts[0] == "tree" and len(nums) == 3:
        topk, draft, steps = nums
        if topk >= 2 and 1 <= steps <= max_k and steps + 1 <= draft <= topk * steps + 1:
            return Setting(text.strip(), topk=topk, steps=steps, draft_tokens=draft)
    raise ValueError(
        f"setting {text!r}: expected none, chain:K (1 <= K <= {max_k}) or tree:T:N:K "
        f"(T >= 2, 1 <= K <= {max_k}, K + 1 <= N <= T*K + 1), e.g. tree:3:12:5"
    )


def settings_from(settings: str, steps: str = "") -> list[Setting]:
    """The engines to run: ``--settings`` plus a chain per ``--steps`` entry, in order,
    without repeats."""
    names = [s for s in settings.split(",") if s.strip()]
    names += [f"chain:{s.strip()}" for s in steps.split(",") if s.strip()]
    out: list[Setting] = []
    for name in names:
        s = parse_setting(name)
        if s not in out:
            out.append(s)
    return out


def engine_kwargs(
    setting: Setting, args: argparse.Namespace, target: str, assistant: str
) -> dict[str, Any]:
    """SGLang Engine (ServerArgs) fields of one engine."""
    conc = concurrencies(args.concurrency)
    kw: dict[str, Any] = dict(
        model_path=target,
        load_format="dummy",
        dtype=args.dtype,
        skip_tokenizer_init=True,
        attention_backend="triton",
        sampling_backend="pytorch",
        context_length=args.prompt_len + args.tokens + 64,
        max_running_requests=max(conc),
        enable_mixed_chunk=False,
        cuda_graph_bs_decode=conc,
        disable_prefill_cuda_graph=not args.prefill_graphs,
        mem_fraction_static=args.mem,
        tp_size=args.tp,
        random_seed=0,
        log_level=args.log_level,
    )
    if setting.steps:
        kw.update(
            speculative_algorithm="FROZEN_KV_MTP",
            speculative_draft_model_path=assistant,
            speculative_num_steps=setting.steps,
            speculative_eagle_topk=setting.topk,
            speculative_num_draft_tokens=setting.draft_tokens,
        )
    return kw


def engine_env(setting: Setting, profiles: list[str]) -> dict[str, str | None]:
    """Environment the driver sets for an engine's processes (None: unset): the first
    profile's simulated AL (the RPC sets the others); no simulation without speculation."""
    if not setting.steps:
        return {"SGLANG_SIMULATE_ACC_LEN": None}
    return {
        "SGLANG_SIMULATE_ACC_LEN": str(setting.acc_len(profiles[0])),
        "SGLANG_SIMULATE_ACC_METHOD": "match-expected",
    }


def concurrencies(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def profiles_of(setting: Setting, text: str) -> list[str]:
    return ["-"] if setting.steps == 0 else [p for p in text.split(",") if p.strip()]


def shape_dirs(args: argparse.Namespace) -> tuple[str, str]:
    """(target, assistant) config-only directories of ``--model`` (written if missing),
    as SGLang reads them (``for_sglang``)."""
    from vllm_frozen_kv_mtp.frontend.published_sizes import ensure_shape_pair

    t, a = ensure_shape_pair(args.model, args.shapes)
    return str(for_sglang(Path(t))), str(for_sglang(Path(a)))


def sglang_text_config(text: dict[str, Any]) -> dict[str, Any]:
    """A Gemma 4 text config in SGLang's naming: base keys for the full-attention layers,
    ``swa_*`` keys for the sliding ones. transformers (and the hub) name it the other way
    round (base keys sliding, ``global_*`` full). SGLang 0.5.17 renames on load only for the
    hub's wrapped configs (``model_type`` gemma4 or gemma4_assistant, in
    ``HfModelConfigParser``); a text-only ``gemma4_text`` config reaches its KV-cache
    configurator and ``Gemma4ForCausalLM`` unrenamed. This is the same renaming."""
    out = dict(text)
    out["swa_head_dim"] = out["swa_v_head_dim"] = text["head_dim"]
    out["swa_num_key_value_heads"] = text["num_key_value_heads"]
    out["head_dim"] = out["v_head_dim"] = text["global_head_dim"]
    if text.get("num_global_key_value_heads") is not None:
        out["num_key_value_heads"] = text["num_global_key_value_heads"]
    return out


def for_sglang(src: Path) -> Path:
    """The directory SGLang loads for a shape directory. A text-only target
    (``Gemma4ForCausalLM``, ``gemma4_text``) gets a copy beside it (``<dir>-sglang``) whose
    config is in SGLang's naming (``sglang_text_config``). Unrenamed, SGLang builds the
    full-attention layers and their KV cache with the sliding layers' head size and KV heads
    (256 and 16 on 31B where the checkpoint has 512 and 4), the assistant (which SGLang
    does rename) then reads that cache with the real sizes, and building the sliding-window
    KV pool fails on the missing ``swa_num_key_value_heads``. A wrapped config (the assistant's
    ``text_config``) is returned as it is: SGLang renames it itself."""
    cfg = json.loads((src / "config.json").read_text())
    if "text_config" in cfg:
        return src
    dst = src.with_name(src.name + "-sglang")
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and f.name != "config.json":
            (dst / f.name).write_bytes(f.read_bytes())
    (dst / "config.json").write_text(json.dumps(sglang_text_config(cfg), indent=1) + "\n")
    return dst


def plan(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Per engine: its setting, environment, Engine arguments, and what it runs."""
    target, assistant = shape_dirs(args)
    out = []
    conc = concurrencies(args.concurrency)
    for s in settings_from(args.settings, args.steps):
        profiles = profiles_of(s, args.profiles)
        runs = sum(
            len(profiles) * (1 + repeats_at(c, args.repeats, args.min_tokens, args.tokens))
            for c in conc
        )
        out.append(
            {
                "setting": s.name,
                "env": engine_env(s, profiles),
                "engine": engine_kwargs(s, args, target, assistant),
                "profiles": {p: s.acc_len(p) for p in profiles},
                "concurrency": conc,
                "batch_runs": runs,
            }
        )
    return out


def format_plan(engines: list[dict[str, Any]]) -> str:
    """The plan as text: one block per engine start."""
    out = []
    for i, e in enumerate(engines, 1):
        als = ", ".join(f"{p} AL {v}" if v is not None else p for p, v in e["profiles"].items())
        env = " ".join(f"{k}={'(unset)' if v is None else v}" for k, v in e["env"].items())
        kw = ", ".join(f"{k}={v!r}" for k, v in e["engine"].items())
        out += [
            f"engine {i}/{len(engines)}: {e['setting']} (profiles: {als}; "
            f"c={','.join(map(str, e['concurrency']))}; {e['batch_runs']} batches incl. warm-up)",
            f"  env: {env}",
            f"  sglang.Engine({kw})",
        ]
    runs = sum(e["batch_runs"] for e in engines)
    out.append(f"{len(engines)} engine starts, {runs} closed batches")
    return "\n".join(out)


# ---- the engine (GPU) -------------------------------------------------------------


class _Recorder:
    """Output batches as SGLang's TokenizerManager receives them (in this process)."""

    log: OutputLog | None = None

    @classmethod
    def install(cls) -> None:
        from sglang.srt.managers.tokenizer_manager import TokenizerManager

        original = TokenizerManager._handle_batch_output
        if getattr(original, "_bench_recorder", False):
            return

        async def recorded(self: Any, recv_obj: Any) -> Any:
            log = cls.log
            totals = getattr(recv_obj, "completion_tokens", None)
            if log is not None and totals is not None:
                log.add(time.perf_counter(), recv_obj.rids, totals)
            return await original(self, recv_obj)

        recorded._bench_recorder = True  # type: ignore[attr-defined]
        TokenizerManager._handle_batch_output = recorded  # type: ignore[method-assign]


class SGLangEngine:
    """One SGLang offline engine for one setting."""

    def __init__(self, setting: Setting, args: argparse.Namespace) -> None:
        from bench.sglang_hooks import write_entry_point

        self.setting = setting
        self.profiles = profiles_of(setting, args.profiles)
        target, assistant = shape_dirs(args)
        # the plugin's entry point, on the path of the processes SGLang spawns
        hooks = tempfile.mkdtemp(prefix="sglang-bench-hooks-")
        write_entry_point(hooks)
        repo = str(Path(__file__).resolve().parents[1])
        for p in (hooks, repo):
            if p not in sys.path:
                sys.path.insert(0, p)
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [hooks, repo, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        )
        for key, value in engine_env(setting, self.profiles).items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        import sglang
        import torch
        from sglang.srt.entrypoints.engine import Engine

        _Recorder.install()
        self.version = sglang.__version__
        self.device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
        self.kwargs = engine_kwargs(setting, args, target, assistant)
        self.vocab = int(json.loads(Path(target, "config.json").read_text())["vocab_size"])
        t0 = time.time()
        self.engine = Engine(**self.kwargs)
        self.load_s = time.time() - t0
        sa = self.engine.server_args
        self.attention = ",".join(
            sorted(
                {
                    str(b)
                    for b in (
                        sa.attention_backend,
                        getattr(sa, "decode_attention_backend", None),
                        getattr(sa, "prefill_attention_backend", None),
                        getattr(sa, "speculative_draft_attention_backend", None),
                    )
                    if b
                }
            )
        )
        self.resolved = {
            k: _jsonable(getattr(sa, k, None))
            for k in (
                "speculative_algorithm",
                "speculative_num_steps",
                "speculative_eagle_topk",
                "speculative_num_draft_tokens",
                "max_running_requests",
                "enable_mixed_chunk",
                "disable_overlap_schedule",
                "chunked_prefill_size",
                "page_size",
                "mem_fraction_static",
                "sampling_backend",
                "disable_radix_cache",
                "disable_prefill_cuda_graph",
                "cuda_graph_bs_decode",
            )
        }
        self._rid = 0
        # KV capacity: a closed batch that does not fit would run below its concurrency
        info = self.engine.get_server_info()
        self.max_total_tokens = int(info.get("max_total_num_tokens") or 0)
        need = max(concurrencies(args.concurrency)) * (
            args.prompt_len + args.tokens + setting.draft_tokens
        )
        if self.max_total_tokens and self.max_total_tokens < need:
            self.engine.shutdown()
            raise RuntimeError(
                f"the KV cache holds {self.max_total_tokens} tokens, the largest batch needs "
                f"{need}: lower --concurrency, raise --mem, or use --tp 2 / a larger GPU"
            )

    def set_profile(self, profile: str) -> None:
        from bench.sglang_hooks import RPC_SET_ACC_LEN

        value = self.setting.acc_len(profile)
        # one profile: the environment set it at start, and no RPC is needed (the fallback
        # if the plugin cannot load: one engine per profile)
        if value is not None and len(self.profiles) > 1:
            self.engine.collective_rpc(RPC_SET_ACC_LEN, value=value)

    def run_batch(
        self, batch: list[list[int]], tokens: int
    ) -> tuple[OutputLog, float, list[dict[str, Any]]]:
        """One closed batch: every request submitted at once, streamed to the end.
        Returns the output log, the submission time and each request's meta_info."""
        import asyncio

        params = {"temperature": 0.0, "max_new_tokens": tokens, "ignore_eos": True}
        log = OutputLog()
        rids = [f"bench-{self._rid + i}" for i in range(len(batch))]
        self._rid += len(batch)

        async def one(ids: list[int], rid: str) -> dict[str, Any]:
            gen = await self.engine.async_generate(
                input_ids=ids, sampling_params=params, stream=True, rid=rid
            )
            last: dict[str, Any] = {}
            async for chunk in gen:
                last = chunk
            return dict(last.get("meta_info") or {})

        async def all_requests() -> list[dict[str, Any]]:
            return list(
                await asyncio.gather(*(one(i, r) for i, r in zip(batch, rids, strict=True)))
            )

        _Recorder.log = log
        submitted = time.perf_counter()
        try:
            metas = self.engine.loop.run_until_complete(all_requests())
        finally:
            _Recorder.log = None
        return log, submitted, metas

    def shutdown(self) -> None:
        self.engine.shutdown()


def _jsonable(v: Any) -> Any:
    return v if isinstance(v, str | int | float | bool | list | type(None)) else str(v)


def measured_al(metas: list[dict[str, Any]]) -> tuple[int, int]:
    """(tokens decoded by verify rounds, verify rounds) of a batch: a request's first
    token comes from its prefill, the rest from its rounds."""
    decoded = sum(max(int(m.get("completion_tokens", 0)) - 1, 0) for m in metas)
    rounds = sum(int(m.get("spec_verify_ct", 0) or 0) for m in metas)
    return decoded, rounds


def acceptance_length(decoded: int, rounds: int) -> float:
    """Tokens per verify round: a round commits its accepted drafts and the bonus token,
    so this is the AL itself, the quantity vLLM's ``1 + accepted / drafts`` counts and
    SGLang's SIMULATE_ACC_LEN sets (1.0: only the bonus token)."""
    return round(decoded / rounds, 3) if rounds else 1.0


def row_for(
    eng: SGLangEngine,
    args: argparse.Namespace,
    c: int,
    profile: str,
    runs: list[tuple[float, float, float, int, int]],
    lat: Latencies,
    sgl_al: list[float],
) -> dict[str, Any]:
    """A JSONL row: the median run's decode tok/s, latencies and acceptance pooled."""
    s = eng.setting
    rate = sorted(r[0] for r in runs)[len(runs) // 2]
    full_tokens = sum(r[1] for r in runs)
    full_s = sum(r[2] for r in runs)
    decoded = sum(r[3] for r in runs)
    rounds = sum(r[4] for r in runs)

    def ms(values: list[float], q: float) -> float | None:
        v = percentile(values, q)
        return round(v, 3) if v is not None else None

    row: dict[str, Any] = {
        "engine": "sglang",
        "engine_version": eng.version,
        "model": args.model,
        "method": s.method,
        "setting": s.name,
        "topk": s.topk,
        "k": s.steps,
        "num_draft_tokens": s.draft_tokens,
        "concurrency": c,
        "profile": profile,
        "acceptance_length_set": s.acc_len(profile) if profile != "-" else None,
        "mean_acceptance_length": acceptance_length(decoded, rounds),
        # SGLang's own per-request accept length (completion tokens / verify rounds)
        "sglang_accept_length": round(statistics.mean(sgl_al), 3) if sgl_al else None,
        "decode_tok_s": round(rate, 1),
        "full_batch_tok_s": round(full_tokens / full_s, 1) if full_s else None,
        "itl_p50_ms": ms(lat.itl_ms, 50),
        "itl_p90_ms": ms(lat.itl_ms, 90),
        "ttft_p50_ms": ms(lat.ttft_ms, 50),
        "tpot_p50_ms": ms(lat.tpot_ms, 50),
        "attention": eng.attention,
        "device": eng.device,
        "tp": args.tp,
        "tokens": args.tokens,
        "prompt_len": args.prompt_len,
        "runs": len(runs),
        "decode_tok_s_samples": [round(r[0], 1) for r in runs],
        "load_s": round(eng.load_s, 1),
        "max_total_num_tokens": eng.max_total_tokens,
        "server_args": eng.resolved,
        "decode_timing": "front-end output batches (streaming), see bench.token_timing",
    }
    if s.topk > 1:
        row["acceptance_assumption"] = TREE_AL_SOURCE
    if args.label:
        row["label"] = args.label
    return row


def run_engine(args: argparse.Namespace) -> list[dict[str, Any]]:
    setting = parse_setting(args.setting)
    eng = SGLangEngine(setting, args)
    rows: list[dict[str, Any]] = []
    try:
        conc = concurrencies(args.concurrency)
        batches = prompt_batches(conc, eng.vocab, args.prompt_len)
        for c in conc:
            batch = batches[c]
            eng.set_profile(eng.profiles[0])
            eng.run_batch(batch, args.tokens)  # warm-up
            runs: dict[str, list[tuple[float, float, float, int, int]]] = {
                p: [] for p in eng.profiles
            }
            lat = {p: Latencies() for p in eng.profiles}
            sgl_al: dict[str, list[float]] = {p: [] for p in eng.profiles}
            below = {p: 0 for p in eng.profiles}
            n = repeats_at(c, args.repeats, args.min_tokens, args.tokens)
            for profile in interleaved(eng.profiles, n):
                eng.set_profile(profile)
                log, submitted, metas = eng.run_batch(batch, args.tokens)
                widest = max((len(g) for _, g in log.events), default=0)
                retracted = sum(int(m.get("num_retractions") or 0) for m in metas)
                if widest < c or retracted:
                    print(
                        f"WARNING c={c} {profile}: at most {widest} requests in one step, "
                        f"{retracted} retractions (the batch did not run at its concurrency)",
                        flush=True,
                    )
                    below[profile] += 1
                tokens, seconds = decode_span(log.events)
                ft, fs = full_batch_span(log.events, c)
                decoded, rounds = measured_al(metas)
                runs[profile].append(
                    (tokens / seconds if seconds > 0 else 0.0, ft, fs, decoded, rounds)
                )
                lat[profile].extend(latencies(log.events, submitted))
                sgl_al[profile] += [
                    float(m["spec_accept_length"]) for m in metas if "spec_accept_length" in m
                ]
            for profile in eng.profiles:
                row = row_for(eng, args, c, profile, runs[profile], lat[profile], sgl_al[profile])
                row["runs_below_concurrency"] = below[profile]
                print("ROW", json.dumps(row), flush=True)
                rows.append(row)
                with open(args.out, "a") as f:  # concurrency by concurrency: a cut run keeps rows
                    f.write(json.dumps(row) + "\n")
    finally:
        eng.shutdown()
    return rows


# ---- command line -------------------------------------------------------------------


def _common(p: argparse.ArgumentParser) -> None:
    add_workload_args(p, concurrency="1,8,32,128")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--mem", type=float, default=0.80, help="SGLang mem_fraction_static")
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--shapes", default="models/shapes")
    p.add_argument("--out", default="bench/results/sglang_tokens.jsonl")
    p.add_argument(
        "--label", default="", help="names the run (one host, one sitting): tables keep runs apart"
    )
    p.add_argument("--log-level", default="info")
    p.add_argument(
        "--prefill-graphs",
        action="store_true",
        help="keep SGLang's prefill CUDA graphs (stock; slower start, TTFT only)",
    )
    p.add_argument("--dry-run", action="store_true", help="print the plan and exit")


def run_group(cmd: list[str], timeout: float, what: str) -> int | None:
    """Run ``cmd`` in a process group of its own; past ``timeout`` kill the whole group:
    SGLang's scheduler and detokenizer processes hold the GPU's memory, and would outlive
    a killed engine process."""
    proc = subprocess.Popen(cmd, start_new_session=True)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"{what} ran past {timeout} s: killing its process group", flush=True)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return None


def all_flags(argv: list[str]) -> list[str]:
    """``all``'s flags that its ``run`` processes take (not --settings/--steps/--timeout)."""
    own = ("--settings", "--steps", "--timeout")
    out: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
        elif a in own:
            skip = True
        elif not a.startswith(tuple(f"{o}=" for o in own)):
            out.append(a)
    return out


def main_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="one engine (one setting), in this process")
    run.add_argument("--setting", required=True, help="none, chain:K or tree:T:N:K")
    _common(run)
    run.set_defaults(steps="")
    al = sub.add_parser("all", help="every setting, one engine process each")
    al.add_argument("--settings", default=DEFAULT_SETTINGS)
    al.add_argument(
        "--steps", default="", help="extra chain step counts, e.g. 3,5 (best kept per c)"
    )
    al.add_argument("--timeout", type=int, default=900, help="seconds per engine")
    _common(al)
    pe = sub.add_parser("peers", help="rows (SGLang JSONL and/or gpu_tokens) -> peers.json")
    pe.add_argument("rows", nargs="+", help="JSON lines or JSON lists")
    pe.add_argument("--out", default="bench/results/peers.json")
    rp = sub.add_parser("report", help="markdown table from peers.json")
    rp.add_argument("peers")
    return ap


def main(argv: list[str] | None = None) -> None:
    ap = main_parser()
    args = ap.parse_args(argv)

    if args.cmd in ("run", "all"):
        if args.cmd == "run":
            args.settings = args.setting
        try:
            settings_from(args.settings, args.steps)
        except ValueError as e:
            ap.error(str(e))
        bad = [p for p in args.profiles.split(",") if p not in PROFILES]
        if bad:
            ap.error(f"unknown profile(s) {bad}; known: {', '.join(PROFILES)}")
        if args.repeats < 1 or args.tp < 1 or not concurrencies(args.concurrency):
            ap.error("--repeats and --tp must be >= 1, and --concurrency must name a c")
        if args.dry_run:
            print(format_plan(plan(args)))
            return
    if args.cmd == "run":
        run_engine(args)
    elif args.cmd == "all":
        flags = all_flags((argv if argv is not None else sys.argv[1:])[1:])
        for s in settings_from(args.settings, args.steps):
            cmd = [sys.executable, "-m", "bench.sglang_tokens", "run", "--setting", s.name, *flags]
            print("+", " ".join(cmd), flush=True)
            run_group(cmd, args.timeout, f"setting {s.name}")
    elif args.cmd == "peers":
        rows = [r for path in args.rows for r in read_rows(path)]
        peers = sglang_peers(rows) + vllm_peers(r for r in rows if r.get("engine") != "sglang")
        Path(args.out).write_text(json.dumps(peers, indent=1) + "\n")
        missing = sum(1 for p in peers if p["engine"] == "vllm" and p["itl_p50_ms"] is None)
        print(
            f"{len(peers)} rows -> {args.out}"
            + (
                f" ({missing} vLLM rows without ITL/TTFT: bench.gpu_tokens does not record them)"
                if missing
                else ""
            )
        )
    else:
        print(report(read_rows(args.peers)))


if __name__ == "__main__":
    main()
