"""The Model Runner V2 Triton kernels compile for the H200 (sm_90) without a GPU.

The interpreter tests check what the kernels compute, but the interpreter accepts code
the compiler rejects (a variable whose type changes inside a runtime ``if``, say), and
device time is scarce. Triton's CUDA backend lowers a kernel through PTX to a cubin with
its bundled ``ptxas`` and no device, so each kernel is compiled here for
``GPUTarget("cuda", 90, 32)`` at the launch shapes the engine uses.
"""

from __future__ import annotations

import inspect
from typing import Any

from tests.unit.test_seed_rows import run_in_triton_interpreter


def compile_sm90(kernel: Any, types: dict[str, str], consts: dict[str, Any]) -> Any:
    """Compile ``kernel`` for sm_90: ``types`` maps each runtime parameter to a Triton
    type string ("*bf16", "i32", "fp32"), ``consts`` each constexpr to its value."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    signature, constexprs = {}, {}
    for i, name in enumerate(inspect.signature(kernel.fn).parameters):
        if name in consts:
            signature[name] = "constexpr"
            constexprs[(i,)] = consts[name]
        else:
            signature[name] = types[name]
    return triton.compile(
        ASTSource(kernel, signature, constexprs),
        target=GPUTarget("cuda", 90, 32),
        options={"num_warps": 4},
    )


def _split_types(dtype: str, kv_dtype: str) -> dict[str, str]:
    from vllm_frozen_kv_mtp.decode_attention_kernel import _decode_split_kernel

    types = {}
    for name in inspect.signature(_decode_split_kernel.fn).parameters:
        types[name] = "*fp32" if name.endswith("_ptr") else "i32"
    types.update(scale="fp32", softcap="fp32", block_table_ptr="*i32", seq_lens_ptr="*i32")
    types.update(q_ptr=f"*{dtype}", out_ptr=f"*{dtype}", k_ptr=f"*{kv_dtype}", v_ptr=f"*{kv_dtype}")
    return types


def check_decode_attention() -> None:
    """Run inside the subprocess: the split and merge kernels at the E4B drafter's shapes
    (sliding head 256, full head 512) in bf16, FP8 KV, softcap and fp32 variants."""
    from vllm_frozen_kv_mtp.decode_attention_kernel import (
        _decode_merge_kernel,
        _decode_split_kernel,
        tile_keys,
    )

    variants = [  # (dtype, head, direct, fp8 KV, softcap)
        ("bf16", 256, False, False, False),
        ("bf16", 512, True, False, False),
        ("bf16", 512, False, False, True),
        ("bf16", 256, False, True, False),
        ("fp32", 64, False, False, False),
    ]
    for dtype, head, direct, fp8, softcap in variants:
        consts = dict(
            GROUP=2, BLOCK_G=16, HEAD=head, HEAD_PAD=head, BLOCK_SIZE=16,
            TILE=tile_keys(head), SPLITS_PAD=4, USE_SOFTCAP=softcap, SCALED_KV=fp8,
            DIRECT=direct, IEEE=dtype == "fp32",
        )  # fmt: skip
        compile_sm90(_decode_split_kernel, _split_types(dtype, "fp8e4nv" if fp8 else dtype), consts)
    merge_types = {
        name: "*fp32" if name.endswith("_ptr") else "i32"
        for name in inspect.signature(_decode_merge_kernel.fn).parameters
    }
    merge_types["out_ptr"] = "*bf16"
    compile_sm90(_decode_merge_kernel, merge_types, dict(HEAD=512, HEAD_PAD=512, SPLITS_PAD=16))
    print("decode attention kernels compile for sm_90")


def test_decode_attention_kernels_compile_for_sm90() -> None:
    code = "from tests.unit.test_kernels_compile import check_decode_attention as c; c()"
    out = run_in_triton_interpreter(code, interpret=False)
    assert "decode attention kernels compile for sm_90" in out
