"""The config check of ``make check-vllm`` (``tools/release_config.py``, started by
``tools.check_vllm.run_config_check``) over the installed vLLM: the release's own
EngineArgs build ``frozen_kv_mtp``'s engine config at k=4 and ``"auto"``, and its classes
build the adapter's Model Runner V2 speculator and graph managers on the CPU, so the check
cannot rot between ports."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.check_vllm import TRITON_DIR, run_config_check


def test_the_config_check_passes_on_the_installed_vllm(capsys: pytest.CaptureFixture[str]) -> None:
    import vllm

    if not TRITON_DIR.is_dir():
        pytest.skip("no Triton beside the venv (make install-test): the speculator is not built")
    rc = run_config_check(Path(vllm.__file__).resolve().parent.parent)
    out = capsys.readouterr().out
    assert rc == 0, out
    lines = [line.strip() for line in out.splitlines()]
    assert "adapter: vllm_0_32" in lines
    assert "k=4: method 'mtp', k 4, dynamic False" in lines
    assert '"auto": k_max 7, scheduler GoodputScheduler' in lines
    assert "config check passed" in lines
    assert any(
        line.startswith("speculator: vllm_frozen_kv_mtp.adapters.vllm_0_32.speculator.")
        and "built by vLLM's init_speculator" in line  # patch 3 picked the class
        and "greedy_cudagraph_manager" in line
        for line in lines
    ), out
    assert "sampling states: handed over at load (patch 7)" in lines
    assert lines[-1] == "speculator check passed"
