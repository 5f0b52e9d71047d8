"""GPU tests run on the offline H200 from the working tree, where the plugin is not
pip-installed: register it by hand (vLLM would otherwise find it via its entry point)."""

import vllm_frozen_kv_mtp

vllm_frozen_kv_mtp.register()
