"""CPU preflight of the SGLang bundle: what can go wrong on the GPU host before a kernel
runs, checked on a machine without a GPU (prep_sglang.sh runs it).

Run with a Python that has the host's torch (2.11.0, CUDA 13 build), the bundle's site
folder and the project root on PYTHONPATH, and a stub libcuda.so.1 on LD_LIBRARY_PATH.
fake_hopper makes torch report one sm_90 GPU, so SGLang takes its CUDA import branches.

Checks: sgl_kernel's sm90 library loads on this torch (its ABI) without the dropped
libraries and registers the ops FROZEN_KV_MTP verifies with; every module on the
Engine -> scheduler -> Gemma 4 -> FROZEN_KV_MTP -> triton path imports; the shape
configs parse with the bundled transformers and resolve to SGLang's Gemma 4 classes;
ServerArgs accepts every engine bench.sglang_tokens plans (every model, chain steps
1-7, the tree) and builds their target and draft model configs; the benchmark's plugin
is found by a spawned process and its RPC moves the global EAGLE's verify reads; the
patched TokenizerManager hook attaches.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import multiprocessing as mp
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import fake_hopper  # noqa: E402,F401

PATH_MODULES = (
    "sglang.srt.entrypoints.engine",
    "sglang.srt.managers.scheduler",
    "sglang.srt.managers.tokenizer_manager",
    "sglang.srt.managers.detokenizer_manager",
    "sglang.srt.model_executor.model_runner",
    "sglang.srt.models.gemma4_causal",
    "sglang.srt.models.gemma4_mtp",
    "sglang.srt.speculative.frozen_kv_mtp_worker_v2",
    "sglang.srt.speculative.frozen_kv_mtp_cuda_graph_runner",
    "sglang.srt.speculative.eagle_utils",
    "sglang.srt.layers.attention.triton_backend",
    "sglang.srt.layers.sampler",
    "sglang.srt.layers.moe.fused_moe_triton",
    "flashinfer.sampling",
)
SGL_KERNEL_OPS = (
    "verify_tree_greedy",
    "build_tree_kernel_efficient",
    "tree_speculative_sampling_target_only",
    "top_k_renorm_probs",
    "gelu_tanh_and_mul",
    "moe_align_block_size",
    "topk_softmax",
)
failures: list[str] = []


def check(what: str, fn, *args) -> object:
    t = time.time()
    try:
        out = fn(*args)
        print(f"ok    {what} ({time.time() - t:.1f} s)", flush=True)
        return out
    except BaseException as e:
        failures.append(what)
        print(f"FAIL  {what}: {type(e).__name__}: {str(e)[:800]}", flush=True)
        traceback.print_exc(limit=-4)
        return None


def sgl_kernel_ops() -> None:
    import sgl_kernel  # noqa: F401
    import torch

    missing = [op for op in SGL_KERNEL_OPS if not hasattr(torch.ops.sgl_kernel, op)]
    assert not missing, f"ops not registered: {missing}"
    lib = Path(sgl_kernel.common_ops.__file__)
    assert lib.parent.name == "sm90", f"loaded {lib}, expected sm90/common_ops"


def cuda_branches() -> None:
    from sglang.srt.layers import sampler
    from sglang.srt.utils.common import is_cuda

    assert is_cuda(), "SGLang does not see the faked CUDA device"
    assert hasattr(sampler, "top_k_top_p_sampling_from_probs"), "sampler took no CUDA branch"


def verify_reads_global() -> None:
    """The RPC works only if EAGLE's verify imports SIMULATE_ACC_LEN at call time and
    FROZEN_KV_MTP verifies through it."""
    from sglang.srt.speculative import eagle_utils, eagle_worker_common
    from sglang.srt.speculative.frozen_kv_mtp_worker_v2 import FrozenKVMTPWorkerV2

    src = inspect.getsource(eagle_utils.eagle_sample)
    assert "import (" in src and "SIMULATE_ACC_LEN," in src, "eagle_sample no longer imports it"
    assert "eagle_sample(" in inspect.getsource(eagle_worker_common.run_eagle_verify)
    assert "verify" not in FrozenKVMTPWorkerV2.__dict__, "FROZEN_KV_MTP overrides verify"


def configs(shapes: Path) -> None:
    from sglang.srt.models.registry import ModelRegistry
    from sglang.srt.utils.hf_transformers_utils import get_config

    from vllm_frozen_kv_mtp.frontend.published_sizes import ensure_shape_pair

    for size in ("E4B", "31B", "26B-A4B"):
        for d in ensure_shape_pair(size, shapes):
            cfg = get_config(str(d), trust_remote_code=False)
            cls, _ = ModelRegistry.resolve_model_cls(cfg.architectures)
            print(f"      {size} {d.name}: {type(cfg).__name__} -> {cls.__name__}")


def server_args(shapes: Path) -> None:
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.server_args import ServerArgs

    from bench import sglang_tokens as st

    settings = "none,tree:3:12:5," + ",".join(f"chain:{k}" for k in range(1, 8))
    for size in ("E4B", "31B", "26B-A4B"):
        args = st.main_parser().parse_args(
            ["all", "--model", size, "--shapes", str(shapes), "--settings", settings]
        )
        for e in st.plan(args):
            sa = ServerArgs(**e["engine"])
            got = (
                sa.attention_backend,
                sa.speculative_algorithm,
                sa.speculative_num_steps,
                sa.speculative_eagle_topk,
                sa.speculative_num_draft_tokens,
                sa.max_running_requests,
                sa.enable_mixed_chunk,
            )
            want = e["engine"]
            assert sa.max_running_requests == want["max_running_requests"], got
            assert sa.speculative_num_draft_tokens == want.get("speculative_num_draft_tokens")
            assert not sa.enable_mixed_chunk and sa.attention_backend == "triton", got
            # the scheduler's model configs: the target, and the assistant as a draft
            ModelConfig.from_server_args(sa)
            if sa.speculative_draft_model_path:
                ModelConfig.from_server_args(
                    sa, model_path=sa.speculative_draft_model_path, is_draft_model=True
                )
        print(f"      {size}: ServerArgs accepts {len(st.plan(args))} engines")


def _models_child(q, shapes: str) -> None:  # type: ignore[no-untyped-def]
    """Build each target and assistant with SGLang's own classes on the meta device (no
    memory, no kernels) and map the assistant's layers onto the target's KV owners, as
    FROZEN_KV_MTP does at start. Runs in a process of its own: it sets up a one-rank
    gloo "TP group", whose buffers SGLang would put on the (faked) GPU, so the tensor
    factories are pointed at the CPU while it does."""
    import os

    import torch
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.distributed import parallel_state as ps
    from sglang.srt.model_loader.loader import _initialize_model
    from sglang.srt.model_loader.utils import get_model_architecture
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    from bench import sglang_tokens as st

    factories = {n: getattr(torch, n) for n in ("ones", "zeros", "empty", "tensor", "full")}

    def on_cpu(fn):  # type: ignore[no-untyped-def]
        def f(*a, device=None, **k):  # type: ignore[no-untyped-def]
            return fn(
                *a, device="cpu" if device is not None and "cuda" in str(device) else device, **k
            )

        return f

    out = []
    for i, size in enumerate(("E4B", "31B", "26B-A4B")):
        args = st.main_parser().parse_args(
            ["all", "--model", size, "--shapes", shapes, "--settings", "chain:4"]
        )
        sa = ServerArgs(**st.plan(args)[0]["engine"])
        set_global_server_args_for_scheduler(sa)
        if i == 0:
            for n, fn in factories.items():
                setattr(torch, n, on_cpu(fn))
            port = 29500 + os.getpid() % 1000
            ps.init_distributed_environment(
                backend="gloo",
                world_size=1,
                rank=0,
                local_rank=0,
                distributed_init_method=f"tcp://127.0.0.1:{port}",
            )
            ps.initialize_model_parallel(tensor_model_parallel_size=1)
            for n, fn in factories.items():
                setattr(torch, n, fn)
        target_cfg = ModelConfig.from_server_args(sa)
        draft_cfg = ModelConfig.from_server_args(
            sa, model_path=sa.speculative_draft_model_path, is_draft_model=True
        )
        get_model_architecture(target_cfg)  # imports every model module, off the meta device
        with torch.device("meta"):
            target = _initialize_model(target_cfg, LoadConfig(load_format="dummy"))
            assistant = _initialize_model(draft_cfg, LoadConfig(load_format="dummy"))
        ctx = assistant.build_frozen_kv_mtp_context(target, None)
        params = sum(p.numel() for p in target.parameters()) / 1e9
        out.append(
            f"{size}: {type(target).__name__} {params:.2f}B params, "
            f"{type(assistant).__name__} reads target layers {ctx.physical_layer_ids}"
        )
    q.put(out)


def models(shapes: Path) -> None:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_models_child, args=(q, str(shapes)))
    p.start()
    lines = q.get(timeout=900)
    p.join()
    for line in lines:
        print(f"      {line}")


def _plugin_child(q) -> None:  # type: ignore[no-untyped-def]
    # spawn re-imports this file first, so the fake GPU is installed here too
    from sglang.srt.plugins import load_plugins

    load_plugins()
    from sglang.srt.managers.scheduler import Scheduler

    from bench.sglang_hooks import RPC_SET_ACC_LEN

    getattr(Scheduler, RPC_SET_ACC_LEN)(object(), value=2.34)
    from sglang.srt.speculative.spec_utils import SIMULATE_ACC_LEN

    q.put(SIMULATE_ACC_LEN)


def plugin() -> None:
    from bench.sglang_hooks import write_entry_point

    folder = tempfile.mkdtemp(prefix="sglang-bench-hooks-")
    write_entry_point(folder)
    sys.path.insert(0, folder)
    ctx = mp.get_context("spawn")  # as SGLang starts its scheduler
    q = ctx.Queue()
    p = ctx.Process(target=_plugin_child, args=(q,))
    p.start()
    value = q.get(timeout=600)
    p.join()
    assert value == 2.34, f"the RPC left SIMULATE_ACC_LEN at {value}"


def recorder() -> None:
    from bench.sglang_tokens import _Recorder

    _Recorder.install()
    from sglang.srt.managers.tokenizer_manager import TokenizerManager

    assert getattr(TokenizerManager._handle_batch_output, "_bench_recorder", False)
    assert inspect.iscoroutinefunction(TokenizerManager._handle_batch_output)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--shapes", default=tempfile.mkdtemp(prefix="shapes-"))
    args = ap.parse_args()
    shapes = Path(args.shapes)
    check("sgl_kernel sm90 library on this torch, ops registered", sgl_kernel_ops)
    for m in PATH_MODULES:
        check(f"import {m}", importlib.import_module, m)
    check("SGLang takes its CUDA branches", cuda_branches)
    check(
        "EAGLE verify reads SIMULATE_ACC_LEN per call; FROZEN_KV_MTP uses it", verify_reads_global
    )
    check("shape configs parse and resolve to SGLang's Gemma 4 classes", configs, shapes)
    check("ServerArgs and the model configs of every planned engine", server_args, shapes)
    check("SGLang's Gemma 4 classes build every target and assistant (meta device)", models, shapes)
    check("plugin found by a spawned process; its RPC sets the simulated AL", plugin)
    check("output recorder attaches to TokenizerManager", recorder)
    print(f"preflight: {len(failures)} failure(s)" + (f": {failures}" if failures else ""))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
