"""FA4 check on the GPU host: imports, versions, vLLM's FA4 verdict, and (FA4_SMOKE=1, default)
one paged causal FA4 run per Gemma 4 head size (256 with a 512-token window, 512 global) against
PyTorch. Run with env_fa4.sh sourced (PYTHONPATH holds /tmp/site and
nvidia_cutlass_dsl/dsl_packages).

The imports are the entry points vLLM uses: flash_attn_interface imports _flash_attn_fwd for
fa_version=4 (and _make_compile_only_tensor_spec for its JIT warm-up); fa_utils and
vllm.vllm_flash_attn go through the bundle's patched vllm/vllm_flash_attn/__init__.py."""

import functools
import importlib.metadata as md
import itertools
import os
import sys
import time

import torch

t0 = time.time()
import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402,F401
import quack  # noqa: E402
import tvm_ffi  # noqa: E402
from vllm.v1.attention.backends.fa_utils import is_fa_version_supported  # noqa: E402
from vllm.vllm_flash_attn import flash_attn_varlen_func  # noqa: E402
from vllm.vllm_flash_attn.cute import flash_attn_varlen_func as cute_varlen  # noqa: E402,F401
from vllm.vllm_flash_attn.cute.interface import (  # noqa: E402,F401
    _flash_attn_fwd,
    _make_compile_only_tensor_spec,
)
from vllm.vllm_flash_attn.flash_attn_interface import (  # noqa: E402
    FA4_AVAILABLE,
    fa_version_unsupported_reason,
)

ir = sys.modules.get("cutlass._mlir._mlir_libs._cutlass_ir")


def ver(name: str) -> str:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return "-"


print(
    f"imports ok in {time.time() - t0:.1f} s; python {sys.version.split()[0]}, "
    f"torch {torch.__version__}, "
    f"{torch.cuda.get_device_name(0)} sm_{''.join(map(str, torch.cuda.get_device_capability()))}"
)
for n in (
    "vllm",
    "nvidia-cutlass-dsl",
    "nvidia-cutlass-dsl-libs-base",
    "nvidia-cutlass-dsl-libs-core",
    "nvidia-cutlass-dsl-libs-cu13",
    "nvidia-cutlass-dsl-libs-cu12",
    "quack-kernels",
    "apache-tvm-ffi",
    "torch-c-dlpack-ext",
    "cuda-bindings",
    "cuda-pathfinder",
    "protobuf",
):
    print(f"  {n} {ver(n)}")
print(f"  cutlass {getattr(cutlass, '__version__', '?')} from {os.path.dirname(cutlass.__file__)}")
print(
    f"  cutlass IR library: {os.path.basename(getattr(ir, '__file__', '?'))}; "
    f"quack {quack.__version__}, tvm_ffi {tvm_ffi.__version__}"
)
print(
    f"vLLM FA4: files present {FA4_AVAILABLE}, supported here {is_fa_version_supported(4)}"
    + ("" if is_fa_version_supported(4) else f" ({fa_version_unsupported_reason(4)})")
)
if not is_fa_version_supported(4):
    sys.exit(1)
if os.environ.get("FA4_SMOKE", "1") == "0":
    sys.exit(0)


def reference(q, kc, vc, bt, cu_q, seqused_k, scale, window_left):
    out = torch.empty_like(q)
    bs, hq, hkv = kc.shape[1], q.shape[1], kc.shape[2]
    for b in range(len(seqused_k)):
        qs, qe, lk = int(cu_q[b]), int(cu_q[b + 1]), int(seqused_k[b])
        nb = (lk + bs - 1) // bs
        k = (
            kc[bt[b, :nb]]
            .reshape(-1, hkv, kc.shape[-1])[:lk]
            .float()
            .repeat_interleave(hq // hkv, 1)
        )
        v = (
            vc[bt[b, :nb]]
            .reshape(-1, hkv, vc.shape[-1])[:lk]
            .float()
            .repeat_interleave(hq // hkv, 1)
        )
        qb = q[qs:qe].float()
        s = torch.einsum("qhd,khd->hqk", qb, k) * scale
        pos_q = torch.arange(lk - (qe - qs), lk, device=q.device)[:, None]
        pos_k = torch.arange(lk, device=q.device)[None, :]
        mask = pos_k <= pos_q
        if window_left >= 0:
            mask &= pos_k >= pos_q - window_left
        s = s.masked_fill(~mask, float("-inf"))
        out[qs:qe] = torch.einsum("hqk,khd->qhd", s.softmax(-1), v).to(q.dtype)
    return out


torch.manual_seed(0)
dev = "cuda"
# Gemma 4 E4B-like: 8 query heads, 2 KV heads; sliding layers d=256 (window 512), global d=512.
for d, window, block in ((256, 512, 16), (512, None, 64)):
    hq, hkv, q_lens, k_lens = 8, 2, [1, 4, 37], [700, 1030, 37]
    nblk = sum((lk + block - 1) // block for lk in k_lens) + 4
    kc = torch.randn(nblk, block, hkv, d, device=dev, dtype=torch.bfloat16)
    vc = torch.randn(nblk, block, hkv, d, device=dev, dtype=torch.bfloat16)
    perm = torch.randperm(nblk, device=dev, dtype=torch.int32)
    maxb = max((lk + block - 1) // block for lk in k_lens)
    bt = torch.zeros(len(k_lens), maxb, dtype=torch.int32, device=dev)
    o = 0
    for b, lk in enumerate(k_lens):
        nb = (lk + block - 1) // block
        bt[b, :nb] = perm[o : o + nb]
        o += nb
    q = torch.randn(sum(q_lens), hq, d, device=dev, dtype=torch.bfloat16)
    cu_q = torch.tensor([0, *itertools.accumulate(q_lens)], dtype=torch.int32, device=dev)
    seqused_k = torch.tensor(k_lens, dtype=torch.int32, device=dev)
    scale = d**-0.5
    wl = window - 1 if window else -1

    fa4 = functools.partial(
        flash_attn_varlen_func,
        q=q,
        k=kc,
        v=vc,
        max_seqlen_q=max(q_lens),
        cu_seqlens_q=cu_q,
        max_seqlen_k=max(k_lens),
        seqused_k=seqused_k,
        softmax_scale=scale,
        causal=True,
        window_size=[wl, 0] if window else None,
        block_table=bt,
        fa_version=4,
    )
    t = time.time()
    out = fa4()  # the first call compiles (JIT)
    torch.cuda.synchronize()
    first = time.time() - t
    t = time.time()
    fa4()
    torch.cuda.synchronize()
    again = time.time() - t
    ref = reference(q, kc, vc, bt, cu_q, seqused_k, scale, wl)
    err = (out.float() - ref.float()).abs().max().item()
    ok = err < 3e-2
    print(
        f"FA4 head_dim={d} window={window} page={block}: max abs err {err:.2e} "
        f"({'ok' if ok else 'MISMATCH'}); first call {first:.1f} s (JIT), "
        f"then {1e3 * again:.2f} ms"
    )
    if not ok:
        sys.exit(1)
print("FA4 ready")
