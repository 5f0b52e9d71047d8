"""CPU machine only: make torch report one Hopper GPU (sm_90, like H100/H200), so that
SGLang's CUDA import branches, sgl_kernel's sm90 library and the JIT kernels' target
selection run as they will on the GPU host. Nothing here touches a device: kernels
cannot run. Import it before sglang. sgl_kernel's library also needs a ``libcuda.so.1``
to load: prep_sglang.sh builds a stub with the driver symbols it references."""

from __future__ import annotations

import types

import torch

NAME = "NVIDIA H100 80GB HBM3 (faked on CPU)"
_PROPS = types.SimpleNamespace(
    major=9,
    minor=0,
    name=NAME,
    total_memory=80 << 30,
    multi_processor_count=132,
    gcnArchName="",
    L2_cache_size=50 << 20,
    warp_size=32,
    uuid="fake",
    is_integrated=False,
)


def install() -> None:
    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: 1
    torch.cuda.current_device = lambda: 0
    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
    torch.cuda.get_device_name = lambda *a, **k: NAME
    torch.cuda.get_device_properties = lambda *a, **k: _PROPS
    torch.cuda.set_device = lambda *a, **k: None
    torch.cuda.mem_get_info = lambda *a, **k: (78 << 30, 80 << 30)


install()
