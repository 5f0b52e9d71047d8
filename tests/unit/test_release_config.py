"""``tools/release_config.py`` (the config half of ``make check-vllm``) on the installed
vLLM: the release's own EngineArgs build ``frozen_kv_mtp``'s engine config at k=4 and
``"auto"`` through the plugin, so the check cannot rot between ports."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_config_check_passes_on_the_installed_vllm() -> None:
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "ERROR", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    env.pop("VLLM_FROZEN_KV_MTP_ASSUME_VLLM_VERSION", None)
    proc = subprocess.run(
        [sys.executable, "-m", "tools.release_config"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert "adapter: vllm_0_32" in lines
    assert "k=4: method 'mtp', k 4, dynamic False" in lines
    assert '"auto": k_max 7, scheduler GoodputScheduler' in lines
    assert lines[-1] == "config check passed"
