"""SGLang check on the GPU host (setup_sglang.sh runs it; env_sglang.sh sourced): versions
and where they come from, sgl_kernel's sm90 library on the image's torch, the modules the
FROZEN_KV_MTP benchmark path imports, sgl_kernel kept off FlashInfer's kernels, the JIT
kernels (prebuilt or compilable), and (SGL_SMOKE=1, default) two sgl_kernel ops (gelu-and-mul,
RMSNorm) and one JIT op on the GPU against PyTorch."""

from __future__ import annotations

import importlib
import importlib.metadata as md
import importlib.util
import os
import shutil
import sys
import time
from pathlib import Path

t0 = time.time()
import torch  # noqa: E402

PATH_MODULES = (
    "sglang.srt.entrypoints.engine",
    "sglang.srt.managers.scheduler",
    "sglang.srt.model_executor.model_runner",
    "sglang.srt.models.gemma4_causal",
    "sglang.srt.models.gemma4_mtp",
    "sglang.srt.speculative.frozen_kv_mtp_worker_v2",
    "sglang.srt.speculative.frozen_kv_mtp_cuda_graph_runner",
    "sglang.srt.speculative.eagle_utils",
    "sglang.srt.layers.attention.triton_backend",
    "sglang.srt.layers.sampler",
    "flashinfer.sampling",
)
problems: list[str] = []


def ver(name: str) -> str:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return "-"


def where(module: str) -> str:
    spec = importlib.util.find_spec(module)
    return str(Path(spec.origin).parent) if spec and spec.origin else "not importable"


print(
    f"python {sys.version.split()[0]}, torch {torch.__version__}, "
    f"{torch.cuda.get_device_name(0)} sm_{''.join(map(str, torch.cuda.get_device_capability()))}"
)
for n in ("sglang", "sglang-kernel", "flashinfer-python", "transformers", "tokenizers", "xgrammar"):
    print(f"  {n} {ver(n)}")
print(f"  transformers from {where('transformers')}")
if ver("transformers") != "5.12.1":
    problems.append(
        f"transformers {ver('transformers')} (SGLang pins 5.12.1): is env_sglang.sh sourced?"
    )
if importlib.util.find_spec("vllm") is not None:
    problems.append("vllm is importable here: take /tmp/site off PYTHONPATH (env_sglang.sh does)")

import sgl_kernel  # noqa: E402

lib = Path(sgl_kernel.common_ops.__file__)
print(f"sgl_kernel {sgl_kernel.__version__}: {lib.parent.name}/{lib.name}")
if lib.parent.name != "sm90":
    problems.append(f"sgl_kernel loaded {lib}, expected sm90/common_ops (a Hopper GPU)")
from sgl_kernel import elementwise as _sgl_elementwise  # noqa: E402

if _sgl_elementwise._has_flashinfer:
    problems.append(
        "sgl_kernel sends RMSNorm to FlashInfer's JIT kernels, whose sources are not bundled: "
        "this bundle predates the patch in prep_sglang.sh; build it again"
    )

for m in PATH_MODULES:
    try:
        importlib.import_module(m)
    except Exception as e:
        problems.append(f"import {m}: {type(e).__name__}: {e}")
print(f"imports done in {time.time() - t0:.1f} s")

cache = Path(os.environ.get("TVM_FFI_CACHE_DIR", "~/.cache/tvm-ffi")).expanduser()
prebuilt = sorted(cache.glob("*/*.so"))
nvcc = shutil.which("nvcc") or (
    "/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None
)
cxx = shutil.which("c++") or shutil.which("g++")
print(
    f"JIT kernels: {len(prebuilt)} prebuilt in {cache}; nvcc: {nvcc or 'none'}; "
    f"c++: {cxx or 'none'}"
    + ("" if nvcc and cxx else " (a kernel missing from the prebuilt set cannot be built here)")
)

if os.environ.get("SGL_SMOKE", "1") != "0":
    x = torch.randn(64, 2 * 2560, device="cuda", dtype=torch.bfloat16)
    ref = torch.nn.functional.gelu(x[:, :2560].float(), approximate="tanh") * x[:, 2560:].float()
    out = sgl_kernel.gelu_tanh_and_mul(x)
    err = ((out.float() - ref).norm() / ref.norm()).item()
    print(f"sgl_kernel gelu_tanh_and_mul: rel err {err:.1e}")
    if err > 2e-2:
        problems.append(f"sgl_kernel gelu_tanh_and_mul rel err {err}")
    # RMSNorm as every Gemma 4 layer calls it (sgl_kernel's own kernel, not FlashInfer's)
    h = torch.randn(64, 2560, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(2560, device="cuda", dtype=torch.bfloat16)
    hf = h.float()
    ref_norm = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()
    out = sgl_kernel.rmsnorm(h, w, 1e-6)
    err = ((out.float() - ref_norm).norm() / ref_norm.norm()).item()
    print(f"sgl_kernel rmsnorm: rel err {err:.1e}")
    if err > 2e-2:
        problems.append(f"sgl_kernel rmsnorm rel err {err}")
    from sglang.srt.layers.activation import gelu_tanh_and_mul  # the JIT kernel when aligned

    t = time.time()
    out = gelu_tanh_and_mul(x)
    torch.cuda.synchronize()
    err = ((out.float() - ref).norm() / ref.norm()).item()
    print(f"SGLang JIT gelu_tanh_and_mul: rel err {err:.1e}, first call {time.time() - t:.1f} s")
    if err > 2e-2:
        problems.append(f"JIT gelu_tanh_and_mul rel err {err}")

if problems:
    print("PROBLEMS:\n  " + "\n  ".join(problems))
    sys.exit(1)
print("SGLang ready")
