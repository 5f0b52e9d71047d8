"""CPU machine only: a faked H100 whose memory is the meta device, so that SGLang's engine
start (model load with dummy weights, KV-pool sizing and allocation, attention backends,
the warm-up forwards of its CUDA graph captures) runs on a machine without a GPU. Use after
fake_hopper (which makes torch report the GPU), with stub_kernels (kernels do not run).

Inside ``MetaGPU()``, a tensor that code puts on CUDA (``device="cuda"``, a
``torch.device("cuda")`` context) is made on the meta device if it has 16 MiB or more
(weights, KV buffers: a shape, a dtype, no storage), and on the CPU if smaller (index
tables, tensors made from Python values), so that the scheduler can still read those back
(``.item()``, ``.tolist()``). ``.cuda()`` and ``.to("cuda")`` leave a tensor where it is.
A meta tensor answers ``.device`` and ``.is_cuda`` as a CUDA tensor would, so code that
branches on them takes its CUDA path. Every such tensor's bytes are counted until its
storage is freed, and ``torch.cuda.mem_get_info`` reports an H100's free memory less that
count: SGLang sizes its KV pools from what its weights and buffers would take on the GPU
(for E4B it counted 14.00 GB of weights where the H100 showed 14.12 GB). Streams, events,
CUDA graphs and the caching allocator's queries are stand-ins."""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.overrides import TorchFunctionMode

#: free memory at engine start on the host's H100 (SGLang logged "avail mem=78.50 GB")
START_FREE = int(78.5 * (1 << 30))
TOTAL = 80 << 30
#: a CUDA tensor of this many bytes or more is made on meta, a smaller one on the CPU
BIG = 16 << 20


def _is_cuda(dev: Any) -> bool:
    if isinstance(dev, torch.device):
        return dev.type == "cuda"
    if isinstance(dev, str):
        return dev.startswith("cuda")
    return isinstance(dev, int) and not isinstance(dev, bool)


class _Stream:
    """torch.cuda.Stream / Event / CUDAGraph stand-in: every call is a no-op."""

    def __init__(self, *a: Any, **k: Any) -> None:
        self.device = torch.device("cuda", 0)
        self.cuda_stream = 0

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None

    def query(self) -> bool:
        return True

    def elapsed_time(self, other: Any) -> float:
        return 0.0


class MetaGPU(TorchFunctionMode):
    """The context: while active, CUDA tensors are meta tensors (see the module doc)."""

    def __init__(self) -> None:
        super().__init__()
        self._live: list[tuple[StorageWeakRef, int]] = []
        self.peak = 0
        self._saved: dict[str, Any] = {}

    # -- accounting ------------------------------------------------------------------
    def _count(self, t: torch.Tensor) -> None:
        # by storage, not by tensor object: nn.Parameter wraps a new object around it
        self._live.append((StorageWeakRef(t.untyped_storage()), t.untyped_storage().nbytes()))

    @property
    def used(self) -> int:
        self._live = [(ref, n) for ref, n in self._live if not ref.expired()]
        used = sum(n for _, n in self._live)
        self.peak = max(self.peak, used)  # as of the last query
        return used

    def free_bytes(self) -> int:
        return START_FREE - self.used

    # -- the redirect ----------------------------------------------------------------
    def __torch_function__(self, func, types_, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = dict(kwargs or {})
        if func in _DEVICE_GETTERS:
            # a meta tensor stands for a CUDA one: code that branches on it takes the
            # CUDA path (fused kernels, JIT modules) as on the GPU
            t = args[0]
            if t.is_meta:
                return torch.device("cuda", 0) if func == _DEVICE_GETTERS[0] else True
            return func(*args, **kwargs)
        moved = False
        if kwargs.get("pin_memory"):
            kwargs["pin_memory"] = False
        if func is torch.Tensor.pin_memory:
            return args[0]
        if func is torch.Tensor.cuda:
            return args[0]
        if func is torch.Tensor.to:
            # stays where it is: a meta tensor on meta, one with values on the CPU
            src = args[0]
            args = tuple(src.device if _is_cuda(a) else a for a in args)
            if _is_cuda(kwargs.get("device")):
                kwargs["device"] = src.device
        elif _is_cuda(kwargs.get("device")):
            # weights and KV buffers go to meta; small tensors (indices, tables, tensors
            # made from Python values) to the CPU, where code can read them back
            # (.item(), .tolist()) and combine them with each other
            moved = True
            kwargs["device"] = "meta"
            if func not in _FROM_VALUES:
                out = func(*args, **kwargs)
                if not isinstance(out, torch.Tensor) or out.untyped_storage().nbytes() >= BIG:
                    if isinstance(out, torch.Tensor):
                        self._count(out)
                    return out
            kwargs["device"] = "cpu"
        out = func(*args, **kwargs)
        if moved and isinstance(out, torch.Tensor):
            self._count(out)
        elif (
            isinstance(out, torch.Tensor)
            and out.is_meta
            and getattr(func, "__name__", "") in _ALLOCATING
        ):
            self._count(out)
        return out

    def __enter__(self):  # type: ignore[no-untyped-def]
        cuda = torch.cuda
        fakes: dict[str, Any] = dict(
            Stream=_Stream,
            Event=_Stream,
            ExternalStream=_Stream,
            current_stream=lambda *a, **k: _Stream(),
            default_stream=lambda *a, **k: _Stream(),
            stream=lambda *a, **k: contextlib.nullcontext(),
            set_stream=lambda *a, **k: None,
            synchronize=lambda *a, **k: None,
            empty_cache=lambda *a, **k: None,
            mem_get_info=lambda *a, **k: (self.free_bytes(), TOTAL),
            memory_allocated=lambda *a, **k: self.used,
            max_memory_allocated=lambda *a, **k: self.peak,
            memory_reserved=lambda *a, **k: self.used,
            max_memory_reserved=lambda *a, **k: self.peak,
            reset_peak_memory_stats=lambda *a, **k: None,
            CUDAGraph=_Stream,
            graph=lambda *a, **k: contextlib.nullcontext(),
            graph_pool_handle=lambda: 0,
        )
        for name, fake in fakes.items():
            self._saved[name] = getattr(cuda, name, None)
            setattr(cuda, name, fake)
        return super().__enter__()

    def __exit__(self, *exc):  # type: ignore[no-untyped-def]
        for name, orig in self._saved.items():
            setattr(torch.cuda, name, orig)
        return super().__exit__(*exc)


_DEVICE_GETTERS = (torch.Tensor.device.__get__, torch.Tensor.is_cuda.__get__)
#: factories whose result holds values given in Python
_FROM_VALUES = frozenset({torch.tensor, torch.as_tensor, torch.asarray})
#: functions that make a new tensor from meta inputs (their result is a fresh allocation)
_ALLOCATING = frozenset(
    {"empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like", "clone"}
)
