"""Build SGLang's JIT CUDA kernels for Hopper (sm_90a) on a CPU machine with nvcc, so the
GPU host loads them instead of compiling them (it may have no nvcc, and each build
takes 20-40 s of device time).

SGLang 0.5.x compiles many of its CUDA kernels on first use (``sglang.kernels.jit``,
through tvm-ffi and nvcc) into ``$TVM_FFI_CACHE_DIR/<module>__arch_9.0a__tvmffi_<ver>/``,
and loads ``<module>.so`` from there when it exists. A module's name holds its template
arguments and a hash of its sources, so a build here is used on the host only if the
sglang and tvm-ffi versions, the arch and the arguments match.

GRID lists the modules the Gemma 4 path (bf16, triton attention, FROZEN_KV_MTP) can
reach, with arguments covering E4B, 31B and 26B-A4B at TP 1 and 2; a module the host
still needs is compiled there (and named in the engine's log by bench.sglang_hooks).

    python prebuild_jit.py OUT_DIR [--jobs N]   # with fake_hopper importable, sglang on the path
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

# (module, builder, arguments[, keyword arguments]); dtypes by name, resolved in the worker
GRID: list[tuple[Any, ...]] = [
    # gelu_tanh_and_mul (Gemma 4 MLP and MoE experts), fast-math and rounded variants
    ("sglang.kernels.ops.activation.activation", "activation_module", ("bfloat16",)),
    (
        "sglang.kernels.ops.activation.activation",
        "activation_module",
        ("bfloat16",),
        {"fast_math": False},
    ),
    # positions = seq_lens - 1 (forward batch preparation), both index dtypes
    ("sglang.kernels.ops.attention.clamp_position", "_jit_clamp_position_module", ("int64",)),
    ("sglang.kernels.ops.attention.clamp_position", "_jit_clamp_position_module", ("int32",)),
    # RoPE: sliding layers rotate 256 dims, global layers 512 (proportional, zero-padded)
    ("sglang.kernels.ops.attention.rope", "_jit_rotary_embedding_module", ()),
    *[
        (
            "sglang.kernels.ops.attention.rope",
            "_jit_fused_rope_module",
            (True, d, "bfloat16", "bfloat16"),
        )
        for d in (128, 256, 512)
    ],
    # KV-cache store: row bytes = KV heads x head dim x 2 (sliding 256, global 512) per TP rank
    *[
        ("sglang.kernels.ops.kvcache.kvcache", "_jit_kvcache_module", (b, b))
        for b in (512, 1024, 2048, 4096, 8192)
    ],
    # RMSNorm over hidden sizes (targets, assistants, per-layer inputs, head dims)
    *[
        ("sglang.kernels.ops.layernorm.norm", "_jit_rmsnorm_module", (h, "bfloat16"))
        for h in (256, 512, 1024, 2560, 2816, 5376)
    ],
    ("sglang.kernels.ops.layernorm.norm", "_jit_fused_add_rmsnorm_module", ("bfloat16", False)),
    ("sglang.kernels.ops.layernorm.norm", "_jit_fused_add_rmsnorm_module", ("bfloat16", True)),
    ("sglang.kernels.ops.layernorm.norm", "_jit_qknorm_module", (256, "bfloat16")),
    ("sglang.kernels.ops.layernorm.norm", "_jit_qknorm_module", (512, "bfloat16")),
    ("sglang.kernels.ops.layernorm.norm", "_jit_qknorm_across_heads_module", ("bfloat16",)),
    *[
        ("sglang.kernels.ops.layernorm.rmsnorm_hf", "_jit_rmsnorm_hf_module", (h, "bfloat16"))
        for h in (256, 512, 1024, 2560)
    ],
    # probed by MoE routing set-up (Gemma 4 routes with its own Triton kernel)
    ("sglang.kernels.ops.moe.moe_fused_gate", "_jit_moe_fused_gate_module", ()),
    # TP 2 (31B and 26B-A4B on two GPUs): SGLang's custom all-reduce
    ("sglang.kernels.ops.communication.all_reduce", "get_all_reduce_module", ("bfloat16", 2)),
]


def _resolve(arg: Any) -> Any:
    import torch

    return getattr(torch, arg) if isinstance(arg, str) and hasattr(torch, arg) else arg


def build(entry: tuple[Any, ...]) -> tuple[str, float, str]:
    """Build one module (in a worker process); (what, seconds, error or "")."""
    here = str(Path(__file__).resolve().parent)
    if here not in sys.path:
        sys.path.insert(0, here)
    import fake_hopper  # noqa: F401

    module, fn, args, kwargs = (*entry, {})[:4]
    what = f"{module.rsplit('.', 1)[1]}.{fn}{args}{kwargs or ''}"
    t = time.time()
    try:
        getattr(importlib.import_module(module), fn)(*map(_resolve, args), **kwargs)
        return what, time.time() - t, ""
    except Exception as e:  # reported, and the host compiles it if it can
        return what, time.time() - t, f"{type(e).__name__}: {str(e)[-300:]}"


def export(cache: Path, out: Path) -> list[Path]:
    """Copy each build's ``<module>.so`` (all the host's loader looks for) to ``out``."""
    copied = []
    for so in sorted(cache.glob("*/*.so")):
        if so.stem != so.parent.name.split("__arch_")[0]:
            continue
        dst = out / so.parent.name / so.name
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(so, dst)
        copied.append(dst)
    return copied


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("out", help="folder for the .so files (one sub-folder per module)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    cache = Path(os.environ.setdefault("TVM_FFI_CACHE_DIR", args.out.rstrip("/") + ".build"))
    failed = 0
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for what, seconds, err in pool.map(build, GRID):
            print(f"{'FAILED' if err else 'built '} {what} ({seconds:.0f} s) {err}", flush=True)
            failed += bool(err)
    copied = export(cache, Path(args.out))
    print(f"{len(copied)} JIT modules in {args.out}; {failed} of {len(GRID)} builds failed")
    sys.exit(1 if failed == len(GRID) else 0)


if __name__ == "__main__":
    main()
