"""The README's CPU server command, run as documented; clean shutdown; early exit on a bad
speculative config with the plugin's own error message."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import MODELS, REPO, pair
from vllm_frozen_kv_mtp.serving.openai_server import free_port, start_server

pytestmark = pytest.mark.serving


def _readme_serving_lines() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text.split("<!-- serving:begin -->", 1)[1].split("<!-- serving:end -->", 1)[0]
    joined = re.sub(r"\\\n\s*", " ", section)  # fold shell line continuations
    return [line.strip() for line in joined.splitlines() if line.strip()]


def _localize(cmd: str, port: int) -> str:
    """The documented command with this test's port, interpreter and models directory."""
    cmd = cmd.replace("127.0.0.1:8000", f"127.0.0.1:{port}").replace(
        "--port 8000", f"--port {port}"
    )
    cmd = cmd.replace(".venv/bin/python", shlex.quote(sys.executable))
    if MODELS != REPO / "models":
        cmd = cmd.replace("models/", f"{MODELS}/")
    return cmd


def _run_documented(cmd: str, port: int, timeout: float) -> str:
    """Run a documented shell command against this test's server; its stdout."""
    return subprocess.run(
        _localize(cmd, port),
        shell=True,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    ).stdout


def test_readme_cpu_server_command(tmp_path: Path) -> None:
    pair("fp32")  # the README uses the tiny pair that `make fixtures` builds
    lines = _readme_serving_lines()
    server = [ln for ln in lines if "-m vllm.entrypoints.openai.api_server" in ln]
    curls = [ln for ln in lines if ln.startswith("curl ")]
    assert len(server) == 1 and len(curls) == 2, "README serving section changed shape"
    assert "frozen_kv_mtp" in server[0]

    port = free_port()
    argv = shlex.split(_localize(server[0], port))
    srv = start_server("", log_path=tmp_path / "readme.log", argv=argv, port=port, cwd=REPO)
    try:
        srv.wait_ready(timeout=600)
        completion = _run_documented(curls[0], port, timeout=120)
        data = json.loads(completion)
        assert data["usage"]["completion_tokens"] == 16
        assert data["choices"][0]["text"]
        metric = _run_documented(curls[1], port, timeout=60)
        assert float(metric.split()[-1]) > 0, metric  # draft tokens were proposed
        assert re.search(r"frozen_kv_mtp: .*proposer active", srv.log_text())
        # the server, its engine core and the worker: the shutdown check below means something
        assert len(srv.tree()) >= 3, [p.name() for p in srv.tree()]
    finally:
        leftovers = srv.stop(timeout=90)
    assert not leftovers, f"processes outlived the server: {leftovers}"
    assert srv.proc.returncode == 0, srv.log_tail()


@pytest.mark.parametrize(
    "spec, message",
    [
        (
            {"num_speculative_tokens": 2},
            'frozen_kv_mtp: the speculative config has no assistant "model"',
        ),
        (
            {"model": "ASSISTANT", "num_speculative_tokens": 2, "kv_cache_dtype": "fp8"},
            "frozen_kv_mtp: speculative-config key 'kv_cache_dtype' is not supported",
        ),
    ],
    ids=["missing-model", "unsupported-key"],
)
def test_bad_config_exits_before_the_engine_starts(
    tmp_path: Path, spec: dict[str, object], message: str
) -> None:
    target, assistant = pair("fp32")
    spec = {
        "method": "frozen_kv_mtp",
        **{k: assistant if v == "ASSISTANT" else v for k, v in spec.items()},
    }
    port = free_port()
    srv = start_server(target, log_path=tmp_path / "bad.log", spec=spec, port=port)
    t0 = time.monotonic()
    try:
        rc = srv.proc.wait(timeout=300)
    finally:
        leftovers = srv.stop(timeout=30)
    log = srv.log_text()
    assert rc != 0, log[-3000:]
    assert message in log and "Fix:" in log, log[-3000:]
    assert "EngineCore" not in log, "an engine started before the config was refused"
    assert not leftovers, leftovers
    print(f"exited with {rc} after {time.monotonic() - t0:.0f}s")  # noqa: T201 - shown with -s
