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
* ``speculator.py``: Model Runner V2's ``FrozenKVMTPSpeculator``, the version-neutral
  ``drafters/seed_round.FrozenRound`` bound to that release's ``Gemma4Speculator``: every
  override by an upstream name, the copies of upstream's control flow, the graph
  manager's constructor, the DP and graph helpers;
* ``proposer.py``: the V1 runner's ``FrozenKVMTPProposer``, ``drafters/seed_proposer``'s
  ``FrozenSeedProposer`` bound to ``Gemma4Proposer`` the same way;
* ``proposer_helpers.py``: vLLM helpers the V1 drafter's own modules call (its sampler's,
  the FP8 KV-scale copy), apart from ``proposer.py`` so that no import runs in a circle.

:data:`ADAPTERS` maps each supported vLLM minor release to its package, and is the
supported window: ``vllm_frozen_kv_mtp.SUPPORTED_VLLM_MIN`` and
``SUPPORTED_VLLM_MAX_EXCLUSIVE``, which ``register()`` checks, are derived from its keys.
The rest of the package takes vLLM's names from ``adapters/active.py`` (``active.frontend``,
``active.scheduler``, ...), which imports each role module of the package :func:`current`
picks when it is first read, never from ``vllm`` or a ``vllm_<major>_<minor>`` package by
name. ``drafters/speculator.py`` and ``drafters/proposer.py`` re-export the concrete
classes there, under the paths patches 2 and 3 (and vLLM's dispatch) build them from.

``vllm_0_32`` serves vLLM 0.32 and 0.33, whose Gemma 4 drafter code is identical.

Porting to a new release (docs/upstream.md, "The adapter seam"): add ``vllm_<new>/``,
whose modules take from the previous package what did not change and whose
``speculator.py`` class overrides what the release changed (no V1 runner from 0.34), fix
its imports until ``make check-vllm VLLM=<new>`` passes, and add one line to
:data:`ADAPTERS`. The patch registry's targets and bodies (``patches/``) are not in the
adapter yet.
"""

from __future__ import annotations

import functools

#: vLLM minor release -> the package here that serves it. Consecutive minors of one major:
#: the supported window is exactly these releases (tests/unit/test_adapters.py).
ADAPTERS: dict[str, str] = {
    "0.32": "vllm_0_32",
    "0.33": "vllm_0_32",
}


def _minor(release: str) -> tuple[int, int]:
    major, minor = release.split(".")
    return int(major), int(minor)


def supported_window() -> tuple[str, str]:
    """``(first release served, first release past the window)`` from :data:`ADAPTERS`'
    keys, e.g. ``("0.32.0", "0.34")``."""
    releases = sorted(_minor(r) for r in ADAPTERS)
    (major, first), (_, last) = releases[0], releases[-1]
    return f"{major}.{first}.0", f"{major}.{last + 1}"


def adapter_for(version: str) -> str:
    """The package here serving vLLM ``version`` (a dev or local build of a release is
    that release); :class:`vllm_frozen_kv_mtp.UnsupportedVLLMVersion`, naming the
    supported window, for any other."""
    from packaging.version import Version

    from vllm_frozen_kv_mtp import check_vllm_version

    check_vllm_version(version)
    major, minor = Version(version).release[:2]
    return ADAPTERS[f"{major}.{minor}"]


@functools.cache
def current() -> str:
    """The package serving the installed vLLM (read as ``register()`` reads it: this
    imports ``vllm.version``, so only code about to use vLLM calls it)."""
    from vllm_frozen_kv_mtp import _installed_vllm_version

    return adapter_for(_installed_vllm_version())
