"""Process state the patches share: the guard mark, which engine runs frozen_kv_mtp,
and the one way a patch wraps a vLLM function."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

#: attribute set on every function a patch installs; applying a patch twice is a no-op
MARK = "_frozen_kv_mtp_patch"

#: set by our drafters: CPU-sampling fixes act only in processes that run frozen_kv_mtp
FROZEN_ENGINE_IN_PROCESS = False

#: set on a target's LogitsProcessor by our drafters to the option target_softcap:
#: the soft-cap patch acts on that engine's target only
TARGET_SOFTCAP_ATTR = "_frozen_kv_mtp_target_softcap"


def enable_frozen_runtime_fixes() -> None:
    """Called by our drafters at construction: this process runs a frozen_kv_mtp engine."""
    global FROZEN_ENGINE_IN_PROCESS
    FROZEN_ENGINE_IN_PROCESS = True


def wrap_once(owner: Any, name: str, make_wrapper: Callable[[Any], Any]) -> bool:
    """Replace ``owner.name`` (a class's method or a module's function) by
    ``make_wrapper(original)``, marked and carrying the original's name and docstring;
    a no-op if ours is already there, so applying a patch twice changes nothing.
    Returns whether it wrapped."""
    original = getattr(owner, name)
    if getattr(original, MARK, False):
        return False
    wrapper = functools.wraps(original)(make_wrapper(original))
    setattr(wrapper, MARK, True)
    setattr(owner, name, wrapper)
    return True
