"""GPU tests run on the offline H200 from the working tree, where the plugin is not
pip-installed: register it by hand (vLLM would otherwise find it via its entry point)."""

import os

import pytest

import vllm_frozen_kv_mtp

vllm_frozen_kv_mtp.register()


@pytest.fixture
def runner() -> str:
    """The runner under test, from VLLM_USE_V2_MODEL_RUNNER (vLLM caches its env
    vars, so run the suite once per runner: =0 for V1, =1 for Model Runner V2)."""
    return "v1" if os.environ.get("VLLM_USE_V2_MODEL_RUNNER") == "0" else "v2"
