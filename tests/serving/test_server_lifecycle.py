"""Early exit on a bad speculative config, with the plugin's own error message and no
engine started. (The README's CPU server command and its clean shutdown:
test_readme_server.py.)"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from devkit.serving.openai_server import free_port, start_server
from tests.conftest import pair

pytestmark = pytest.mark.serving


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
