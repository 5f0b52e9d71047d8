"""CPU preflight of the SGLang bundle: what can go wrong on the GPU host before a kernel
runs, checked on a machine without a GPU (prep_sglang.sh runs it).

Run with a Python that has the host's torch (2.11.0, CUDA 13 build), the bundle's site
folder and the project root on PYTHONPATH, and a stub libcuda.so.1 on LD_LIBRARY_PATH.
fake_hopper makes torch report one sm_90 GPU, so SGLang takes its CUDA import branches.

Checks: sgl_kernel's sm90 library loads on this torch (its ABI) without the dropped
libraries and registers the ops FROZEN_KV_MTP verifies with; every module on the
Engine -> scheduler -> Gemma 4 -> FROZEN_KV_MTP -> triton path imports; sgl_kernel keeps off
FlashInfer's kernels (not bundled); the shape configs parse with the bundled transformers,
resolve to SGLang's Gemma 4 classes, and the targets' SGLang copies read as SGLang renames
a hub checkpoint's config; ServerArgs accepts every engine bench.sglang_tokens plans (every
model, chain steps 1-7, the tree) and builds their target and draft model configs; the
scheduler of each engine in ENGINES starts on a faked H100 (engine_check.py: model load,
KV pools, FROZEN_KV_MTP's KV binding, attention backends, the warm-up forwards of every
CUDA graph capture; each layer's KV buffer fits it; no FlashInfer kernel, no default taken
for a Gemma 4 config key, and with ``--jit`` every JIT kernel prebuilt); the benchmark's
plugin is found by a spawned process and its RPC moves the global EAGLE's verify reads; the
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


def no_flashinfer_kernels() -> None:
    """sgl_kernel sends its norms and sampling to FlashInfer's JIT kernels when FlashInfer
    imports; the bundle has no FlashInfer kernel sources (prep_sglang.sh patches that off)."""
    from sgl_kernel import elementwise, sampling

    on = [m.__name__ for m in (elementwise, sampling) if m._has_flashinfer]
    assert not on, f"{on} would build FlashInfer kernels, whose sources are not bundled"


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
    import json

    from sglang.srt.models.registry import ModelRegistry
    from sglang.srt.utils.hf_transformers_utils import get_config

    from bench.sglang_tokens import for_sglang
    from vllm_frozen_kv_mtp.frontend.published_sizes import ensure_shape_pair, shape

    keys = (
        "head_dim",
        "v_head_dim",
        "num_key_value_heads",
        "swa_head_dim",
        "swa_v_head_dim",
        "swa_num_key_value_heads",
    )
    for size in ("E4B", "31B", "26B-A4B"):
        for d in map(for_sglang, ensure_shape_pair(size, shapes)):
            cfg = get_config(str(d), trust_remote_code=False)
            cls, _ = ModelRegistry.resolve_model_cls(cfg.architectures)
            print(f"      {size} {d.name}: {type(cfg).__name__} -> {cls.__name__}")
        # SGLang renames a hub checkpoint's (wrapped) text config on load; the target's
        # SGLang copy must read as that renamed config does
        hub = shapes / f"hub-{size}"
        hub.mkdir(exist_ok=True)
        text = dict(shape(size).target, architectures=None)
        wrapped = dict(
            architectures=["Gemma4ForConditionalGeneration"], model_type="gemma4", text_config=text
        )
        (hub / "config.json").write_text(json.dumps(wrapped))
        want = get_config(str(hub), trust_remote_code=False).text_config
        got = get_config(str(for_sglang(ensure_shape_pair(size, shapes)[0])), False)
        diff = {k: (getattr(got, k, None), getattr(want, k)) for k in keys}
        diff = {k: v for k, v in diff.items() if v[0] != v[1]}
        assert not diff, f"{size}: the SGLang copy differs from SGLang's renaming: {diff}"


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


#: the engine starts checked: every setting kind on E4B (chain:1 captures no draft graph),
#: the planned ones on the larger targets
ENGINES = (
    ("E4B", "none,chain:1,chain:4,chain:7,tree:3:12:5"),
    ("31B", "chain:4,tree:3:12:5"),
    ("26B-A4B", "chain:4,tree:3:12:5"),
)


def _engine_child(q, size: str, engine: dict, env: dict, jit: str | None) -> None:  # type: ignore[type-arg]
    import os

    import engine_check

    q.put(engine_check.start(size, engine, env, jit))
    q.close()
    q.join_thread()
    os._exit(0)  # the scheduler's threads and sockets need no orderly shutdown here


def _result(q, p, timeout: float = 900.0):  # type: ignore[no-untyped-def]
    """The child's report, or None once it has died without one."""
    import queue

    end = time.time() + timeout
    while time.time() < end:
        try:
            r = q.get(timeout=5)
            p.join()
            return r
        except queue.Empty:
            if not p.is_alive():
                return None
    p.kill()
    return None


def engines(shapes: Path, jit: str | None) -> None:
    """Each planned engine's scheduler start on the faked GPU (engine_check.py), one
    process each."""
    from bench import sglang_tokens as st

    ctx = mp.get_context("spawn")
    problems = []
    for size, settings in ENGINES:
        args = st.main_parser().parse_args(
            ["all", "--model", size, "--shapes", str(shapes), "--settings", settings]
        )
        for e in st.plan(args):
            q = ctx.Queue()
            p = ctx.Process(target=_engine_child, args=(q, size, e["engine"], e["env"], jit))
            p.start()
            name = f"{size} {e['setting']}"
            r = _result(q, p)
            if r is None:
                problems.append(f"{name}: the process died (exit code {p.exitcode})")
                continue
            weights = [
                ln.split("mem usage=")[1].rstrip(".") for ln in r["log"] if "Load weight end" in ln
            ]
            pool = next((ln for ln in r["log"] if "full_layer_tokens" in ln), "")
            jit_names = sorted(k.removeprefix("sgl_kernel_jit_") for k in r["jit"])
            print(
                f"      {name}: {r['seconds']:.0f} s, weights {' + '.join(weights)}, "
                f"{pool.split('. ', 1)[-1]}, KV owners {r.get('owners', '-')}, "
                f"JIT {jit_names}",
                flush=True,
            )
            if r["error"]:
                problems.append(f"{name}: {r['error']}")
            problems += [f"{name}: {k}" for k in r["kv"]]
            problems += [f"{name}: FlashInfer kernel {k} (not bundled)" for k in r["flashinfer"]]
            problems += [f"{name}: SGLang took a default for {k}" for k in r["defaulted"]]
            if jit is not None:
                problems += [
                    f"{name}: JIT kernel {k} not prebuilt" for k, ok in r["jit"].items() if not ok
                ]
            if r["ops"]:
                print(f"        stood in for (no meta kernel): {', '.join(r['ops'])}")
    assert not problems, "\n".join(problems)


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
    ap.add_argument(
        "--jit",
        help="the prebuilt JIT kernels (prebuild_jit.py's OUT_DIR): every kernel an engine "
        "asks for must be there (default: list them only)",
    )
    args = ap.parse_args()
    shapes = Path(args.shapes)
    check("sgl_kernel sm90 library on this torch, ops registered", sgl_kernel_ops)
    for m in PATH_MODULES:
        check(f"import {m}", importlib.import_module, m)
    check("SGLang takes its CUDA branches", cuda_branches)
    check(
        "sgl_kernel uses its own norm and sampling kernels, not FlashInfer's", no_flashinfer_kernels
    )
    check(
        "EAGLE verify reads SIMULATE_ACC_LEN per call; FROZEN_KV_MTP uses it", verify_reads_global
    )
    check("shape configs parse and resolve to SGLang's Gemma 4 classes", configs, shapes)
    check("ServerArgs and the model configs of every planned engine", server_args, shapes)
    check(
        "every planned engine's scheduler starts on a faked H100 (meta tensors, stub kernels)",
        engines,
        shapes,
        args.jit,
    )
    check("plugin found by a spawned process; its RPC sets the simulated AL", plugin)
    check("output recorder attaches to TokenizerManager", recorder)
    print(f"preflight: {len(failures)} failure(s)" + (f": {failures}" if failures else ""))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
