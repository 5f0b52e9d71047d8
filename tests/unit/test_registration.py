"""Entry point, register() contract, version window and the patch registry."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import entry_points

import pytest

import vllm_frozen_kv_mtp
from vllm_frozen_kv_mtp import UnsupportedVLLMVersion, check_vllm_version, patches


def test_entry_point_is_declared() -> None:
    eps = {ep.name: ep.value for ep in entry_points(group="vllm.general_plugins")}
    assert eps.get("frozen_kv_mtp") == "vllm_frozen_kv_mtp:register"


@pytest.mark.parametrize("version", ["0.32.0", "0.32.1", "0.33.0", "0.32.0+cpu", "0.33.1.dev3"])
def test_version_window_accepts(version: str) -> None:
    check_vllm_version(version)


@pytest.mark.parametrize("version", ["0.31.9", "0.26.0", "0.34.0", "1.0.0", "garbage"])
def test_version_window_refuses_with_supported_versions(version: str) -> None:
    with pytest.raises(UnsupportedVLLMVersion) as e:
        check_vllm_version(version)
    msg = str(e.value)
    assert ">=0.32.0" in msg and "<0.34" in msg
    if version != "garbage":
        assert version in msg


def test_register_is_idempotent_and_schedules_each_patch_once() -> None:
    vllm_frozen_kv_mtp.register()
    first = patches.applied_targets()
    vllm_frozen_kv_mtp.register()
    assert patches.applied_targets() == first
    assert set(first) == {p.target for p in patches.PATCHES if p.apply is not None}


def test_load_time_changes_name_the_function_that_makes_them() -> None:
    import importlib

    load_time = [p for p in patches.PATCHES if p.apply is None]
    assert load_time, "the registry lists the drafter's load-time changes too"
    for p in load_time:
        module, _, name = p.applied_by.rpartition(".")
        assert callable(getattr(importlib.import_module(module), name)), p.applied_by


def test_every_patch_is_documented() -> None:
    doc = patches.__doc__ or ""
    for p in patches.PATCHES:
        assert p.why and p.upstream and p.remove_when
        assert p.symbol in doc, f"{p.target} missing from the registry docstring"
        assert "vllm" in p.upstream


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=300,
    )


def test_register_is_cheap_cuda_free_and_lazy() -> None:
    """register() imports no model runner, initialises no CUDA and takes well under a second."""
    code = """
import json, sys, time
import vllm  # vLLM is what calls register(); it is imported by then
t = time.perf_counter()
import vllm_frozen_kv_mtp
vllm_frozen_kv_mtp.register()
vllm_frozen_kv_mtp.register()
dt = time.perf_counter() - t
import torch
print(json.dumps({
    "seconds": dt,
    "runner_imported": "vllm.v1.worker.gpu_model_runner" in sys.modules,
    "proposer_imported": "vllm_frozen_kv_mtp.v1.proposer" in sys.modules,
    "cuda_initialized": torch.cuda.is_initialized(),
}))
"""
    r = _run(code)
    assert r.returncode == 0, r.stderr[-2000:]
    info = json.loads(r.stdout.strip().splitlines()[-1])
    assert info["seconds"] < 1.0
    assert not info["runner_imported"] and not info["proposer_imported"]
    assert not info["cuda_initialized"]


def test_patches_apply_when_vllm_imports_the_modules() -> None:
    code = """
import vllm_frozen_kv_mtp
vllm_frozen_kv_mtp.register()
from vllm.v1.spec_decode.gemma4 import Gemma4Proposer
from vllm.engine.arg_utils import EngineArgs
assert getattr(Gemma4Proposer.__dict__["__new__"], "_frozen_kv_mtp_patch", False)
assert getattr(EngineArgs.create_speculative_config, "_frozen_kv_mtp_patch", False)
print("ok")
"""
    r = _run(code)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]


def test_out_of_window_vllm_fails_engine_args_with_clear_error() -> None:
    """vLLM loads the plugin in EngineArgs; an unsupported version stops it there."""
    code = """
from vllm.engine.arg_utils import EngineArgs
EngineArgs(model="x")
"""
    r = _run(code, VLLM_FROZEN_KV_MTP_ASSUME_VLLM_VERSION="0.30.1")
    assert r.returncode != 0
    assert "supports vLLM >=0.32.0,<0.34 but vLLM 0.30.1 is installed" in r.stderr
