"""The Model Runner V2 Triton kernels compile for the H200 (sm_90) without a GPU.

Covered: the split decode attention (``decode_attention_kernel``), the dense head
(``dense_head``), the fused centroid head (``centroid_kernel``) and the
seed-row loader (``seed_rows``).

The interpreter tests check what the kernels compute, but they run in fp32 (the
interpreter's bf16 ``tl.dot`` is wrong), so bf16-only compile errors (a bf16 x fp32
``tl.dot``, say) would first show on the GPU, where device time is scarce. Triton's
CUDA backend lowers a kernel through PTX to a cubin with its bundled ``ptxas`` and no
device, so each kernel is compiled here for ``GPUTarget("cuda", 90, 32)`` at the launch
shapes the engine uses.
"""

from __future__ import annotations

import inspect
from typing import Any

from tests.utils.triton_interpreter import run_in_triton_interpreter


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


def _split_types(dtype: str, kv_dtype: str, q_dtype: str | None = None) -> dict[str, str]:
    from vllm_frozen_kv_mtp.kernels.decode_attention_kernel import _decode_split_kernel

    types = {}
    for name in inspect.signature(_decode_split_kernel.fn).parameters:
        types[name] = "*fp32" if name.endswith("_ptr") else "i32"
    types.update(scale="fp32", softcap="fp32", block_table_ptr="*i32", seq_lens_ptr="*i32")
    types.update(q_ptr=f"*{q_dtype or dtype}", out_ptr=f"*{dtype}")
    types.update(k_ptr=f"*{kv_dtype}", v_ptr=f"*{kv_dtype}")
    return types


def check_decode_attention() -> None:
    """Run inside the subprocess: the split and merge kernels at the E4B drafter's shapes
    (sliding head 256, full head 512) in bf16, FP8 KV, softcap and fp32 variants."""
    from vllm_frozen_kv_mtp.kernels.decode_attention_kernel import (
        _decode_merge_kernel,
        _decode_split_kernel,
        tile_keys,
    )

    variants = [  # (dtype, head, direct, fp8 KV (2: and an FP8 query), softcap, MMA)
        ("bf16", 256, False, 0, False, True),
        ("bf16", 512, True, 0, False, True),
        ("bf16", 512, False, 0, True, True),
        ("bf16", 256, False, 1, False, True),
        ("bf16", 256, False, 2, False, True),
        ("bf16", 512, True, 2, False, True),
        ("fp32", 64, False, 0, False, True),
        ("bf16", 256, False, 0, False, False),
        ("bf16", 512, True, 0, False, False),
    ]
    for dtype, head, direct, fp8, softcap, mma in variants:
        consts = dict(
            GROUP=2, BLOCK_G=16 if mma else 2, HEAD=head, HEAD_PAD=head, BLOCK_SIZE=16,
            TILE=tile_keys(head) if mma else 16, SPLITS_PAD=4, USE_SOFTCAP=softcap,
            SCALED_KV=fp8 > 0, SCALED_Q=fp8 == 2, DIRECT=direct, IEEE=dtype == "fp32",
            USE_DOT=mma,
        )  # fmt: skip
        kv = "fp8e4nv" if fp8 else dtype
        types = _split_types(dtype, kv, "fp8e4nv" if fp8 == 2 else None)
        compile_sm90(_decode_split_kernel, types, consts)
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


def _types(kernel: Any, pointer: str = "*i64", **override: str) -> dict[str, str]:
    """Every runtime parameter of ``kernel``: ``pointer`` for ``*_ptr``, i32 otherwise,
    then ``override``."""
    types = {
        name: pointer if name.endswith("_ptr") else "i32"
        for name in inspect.signature(kernel.fn).parameters
    }
    types.update(override)
    return types


def check_centroid_and_seed_kernels() -> None:
    """Run inside the subprocess: the E4B head's shapes (hidden 256, 128 tokens per
    centroid, top 32 of 2048 centroids) in bf16."""
    from vllm_frozen_kv_mtp.drafters.seed_rows import _load_seed_kernel
    from vllm_frozen_kv_mtp.kernels import centroid_kernel as ck

    head = dict(hidden_ptr="*bf16", weight_ptr="*bf16", part_score_ptr="*fp32")
    compile_sm90(
        ck._centroid_best_kernel,
        _types(ck._centroid_best_kernel, **head),
        dict(PER=128, BLOCK_D=ck.BEST_KERNEL_BLOCK_D, BIG=ck.BIG_ID),
    )
    compile_sm90(
        ck._centroid_topk_kernel,
        _types(ck._centroid_topk_kernel, scores_ptr="*bf16"),
        dict(K=32, K_POW2=32, BLOCK_C=2048),
    )
    compile_sm90(
        ck._row_best_kernel,
        _types(ck._row_best_kernel, part_score_ptr="*fp32"),
        dict(BLOCK_K=32, BIG=ck.BIG_ID),
    )
    seed = _types(
        _load_seed_kernel,
        "*i32",
        out_positions_ptr="*i64",
        positions_ptr="*i64",
        out_hidden_ptr="*bf16",
        hidden_ptr="*bf16",
        out_sample_src_ptr="*i64",
        idx_mapping_ptr="*i64",
        last_sampled_ptr="*i64",
    )
    compile_sm90(_load_seed_kernel, seed, dict(BLOCK_SIZE=1024))
    print("centroid and seed-row kernels compile for sm_90")


def test_centroid_and_seed_kernels_compile_for_sm90() -> None:
    code = "from tests.unit.test_kernels_compile import check_centroid_and_seed_kernels as c; c()"
    out = run_in_triton_interpreter(code, interpret=False)
    assert "centroid and seed-row kernels compile for sm_90" in out


def check_dense_head() -> None:
    """Run inside the subprocess: the dense head at 31B's head shape (hidden 1024), bf16
    hidden states over bf16 or FP8 rows (FP8 also in 128-wide hidden chunks, as small
    batches launch it), fp32 with IEEE dots, one and four row blocks."""
    from vllm_frozen_kv_mtp.kernels import dense_head as dh

    for hidden, weight, rows_block, block_k in (
        ("bf16", "bf16", 16, dh.BLOCK_K), ("bf16", "fp8e4nv", 64, dh.BLOCK_K),
        ("bf16", "fp8e4nv", 16, dh.FP8_WIDE_K), ("fp32", "fp32", 16, dh.BLOCK_K),
    ):  # fmt: skip
        types = _types(
            dh._dense_best_kernel,
            hidden_ptr=f"*{hidden}",
            weight_ptr=f"*{weight}",
            scale_ptr="*fp32",
            suppress_ptr="*i64",
            part_score_ptr="*fp32",
            part_id_ptr="*i64",
        )
        consts = dict(
            BLOCK_M=rows_block, BLOCK_N=dh.BLOCK_N, BLOCK_K=block_k,
            SCALED=weight == "fp8e4nv", IEEE=hidden == "fp32", BIG=dh.BIG_ID,
        )  # fmt: skip
        compile_sm90(dh._dense_best_kernel, types, consts)
    compile_sm90(  # the reduction over 2048 vocabulary blocks (262144 / BLOCK_N)
        dh._row_best_kernel,
        _types(dh._row_best_kernel, part_score_ptr="*fp32"),
        dict(BLOCK_K=2048, BIG=dh.BIG_ID),
    )
    print("dense head kernels compile for sm_90")


def test_dense_head_kernels_compile_for_sm90() -> None:
    code = "from tests.unit.test_kernels_compile import check_dense_head as c; c()"
    assert "dense head kernels compile for sm_90" in run_in_triton_interpreter(code, False)


def check_softcap() -> None:
    """Run inside the subprocess: the one-pass soft-cap over bf16, fp16 and fp32 logits
    (the target's dtype)."""
    from vllm_frozen_kv_mtp.kernels import softcap_kernel as sk

    for dtype in ("bf16", "fp16", "fp32"):
        types = _types(sk._softcap_kernel, x_ptr=f"*{dtype}", inv_cap="fp32", cap="fp32")
        ptx = compile_sm90(
            sk._softcap_kernel, types, dict(SMALL=sk.TANH_IS_IDENTITY_BELOW, BLOCK=sk.BLOCK)
        ).asm["ptx"]
        # bitwise vLLM's needs multiplies that keep subnormals (PyTorch's do)
        assert "mul.ftz" not in ptx and "mul.f32" in ptx, dtype
    print("soft-cap kernel compiles for sm_90")


def test_softcap_kernel_compiles_for_sm90() -> None:
    code = "from tests.unit.test_kernels_compile import check_softcap as c; c()"
    assert "soft-cap kernel compiles for sm_90" in run_in_triton_interpreter(code, False)
