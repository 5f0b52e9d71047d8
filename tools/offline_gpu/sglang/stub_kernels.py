"""CPU machine only: kernels that return without running, so that SGLang's forward passes
(the warm-up runs before each CUDA graph capture) go through on meta tensors (meta_gpu)
and show what they would launch. Nothing is computed; shapes, the Python around the
kernels and the kernels' loading are what gets checked.

``StubKernels()`` records, while active:
- ``jit``: SGLang's JIT CUDA modules (tvm-ffi) that were asked for, and whether a
  prebuilt copy was found (``$TVM_FFI_CACHE_DIR``, as on the host) or it would be
  compiled (on the host: nvcc and device time, or a failure without nvcc);
- ``flashinfer``: FlashInfer JIT modules that were asked for (the bundle drops FlashInfer's
  kernel sources, so on the host each one fails to build);
- ``ops``: custom ops (``torch.ops.sgl_kernel.*``, ...) with no meta kernel, stood in for.
Triton launches return at once."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map_only


class _NoOpModule:
    """A loaded kernel module whose every function returns None."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *a, **k: None


class _MetaOps(TorchDispatchMode):
    """Runs each op as it is. Where that fails on meta_gpu's tensors: a copy from a meta
    tensor into a CPU one is skipped (no values); an op mixing CPU and meta tensors runs on
    meta; an op with no kernel for them (a CUDA-only one) is stood in for when it returns
    nothing or only its mutated inputs, as kernel wrappers call them (outputs allocated by
    the caller). Any other failure is raised."""

    def __init__(self, seen: set[str]) -> None:
        super().__init__()
        self.seen = seen

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        try:
            return func(*args, **kwargs)
        except (NotImplementedError, RuntimeError) as e:
            tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
            if not any(t.is_meta for t in tensors):
                # a CUDA-only kernel (sgl_kernel, ...) on small tensors meta_gpu put on the CPU
                if isinstance(e, NotImplementedError) and func.namespace != "aten":
                    return self._stand_in(func, args, kwargs)
                raise
            if func is torch.ops.aten.copy_.default and not args[0].is_meta:
                return args[0]  # into a CPU tensor from a meta one: no values to copy
            if not all(t.is_meta for t in tensors):
                # small CPU tensors (meta_gpu keeps those on the CPU) meet meta ones
                args, kwargs = tree_map_only(torch.Tensor, _to_meta, (args, kwargs))
            try:
                return func(*args, **kwargs)
            except NotImplementedError:
                return self._stand_in(func, args, kwargs)

    def _stand_in(self, func, args, kwargs):  # type: ignore[no-untyped-def]
        """For an op with no meta kernel that returns nothing or its mutated inputs."""
        schema = func._schema
        outs = []
        for ret in schema.returns:
            alias = ret.alias_info
            if alias is None or not alias.is_write:
                raise NotImplementedError(f"{func}: no meta kernel, and it returns new tensors")
            for i, a in enumerate(schema.arguments):
                if a.alias_info is not None and a.alias_info.before_set == alias.before_set:
                    outs.append(args[i] if i < len(args) else kwargs[a.name])
                    break
        self.seen.add(str(func))
        return None if not outs else outs[0] if len(outs) == 1 else tuple(outs)


def _to_meta(t: torch.Tensor) -> torch.Tensor:
    return t if t.is_meta else t.to("meta")


class StubKernels:
    """The context (see the module doc)."""

    def __init__(self) -> None:
        self.jit: dict[str, bool] = {}  # module -> prebuilt
        self.flashinfer: list[str] = []
        self.ops: set[str] = set()
        self._undo: list[tuple[Any, str, Any]] = []

    def _patch(self, owner: Any, name: str, value: Any) -> None:
        self._undo.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    def __enter__(self) -> StubKernels:
        import flashinfer.jit.core as fi_core
        import tvm_ffi
        import tvm_ffi.cpp as tvm_cpp
        from triton.runtime import autotuner, jit

        def loaded(path: str, *a: Any, **k: Any) -> _NoOpModule:
            name = path.rsplit("/", 1)[-1].removesuffix(".so")
            self.jit[name] = True
            return _NoOpModule(name)

        def compiled(name: str, *a: Any, **k: Any) -> _NoOpModule:
            self.jit.setdefault(name, False)
            return _NoOpModule(name)

        def flashinfer_build(spec: Any) -> _NoOpModule:
            self.flashinfer.append(spec.name)
            return _NoOpModule(spec.name)

        self._patch(tvm_ffi, "load_module", loaded)
        self._patch(tvm_cpp, "load", compiled)
        self._patch(tvm_cpp, "load_inline", compiled)
        self._patch(fi_core.JitSpec, "build_and_load", flashinfer_build)
        self._patch(jit.JITFunction, "run", lambda *a, **k: None)
        self._patch(autotuner.Autotuner, "run", lambda *a, **k: None)
        self._mode = _MetaOps(self.ops)
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._mode.__exit__(*exc)
        for owner, name, value in reversed(self._undo):
            setattr(owner, name, value)
