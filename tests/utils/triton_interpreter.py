"""Run Triton kernels on CPU: a subprocess with the interpreter-only Triton of `make install`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TRITON_DIR = Path(os.environ.get("FROZEN_KV_TRITON_DIR", Path(sys.prefix) / "triton-interpreter"))


def run_in_triton_interpreter(code: str, interpret: bool = True) -> str:
    """Run ``code`` in a subprocess that has Triton, in interpreter mode (CPU) unless
    ``interpret`` is false (compile-only checks); its stdout."""
    assert TRITON_DIR.is_dir(), f"{TRITON_DIR} is missing: run `make install`"
    env = dict(os.environ, TRITON_INTERPRET="1" if interpret else "0")
    env["PYTHONPATH"] = os.pathsep.join([str(TRITON_DIR), str(REPO), env.get("PYTHONPATH", "")])
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    return out.stdout
