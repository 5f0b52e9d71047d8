"""Process state the patches share: the guard mark and which engine runs frozen_kv_mtp."""

from __future__ import annotations

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
