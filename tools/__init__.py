"""Repository tools, run from a clone's root; none of them ships in the wheel.

* ``check_vllm.py``, ``plugin_surface.py``, ``vllm_source.py``: the plugin's vLLM surface
  against a release or a source tree (``make check-vllm VLLM=<version>``);
* ``patch_docs.py``: the patch bodies' docstrings, generated from the registry;
* ``remote_gpu_session.sh`` (with ``plan_estimate.py``, its ``dry`` wall-time estimate) and
  ``gpu_queue.sh`` (with ``plans/``): benchmark and test plans on a remote GPU host;
* ``offline_gpu/``: recipes that prepare an offline GPU host (FlashAttention 4, SGLang).
"""
