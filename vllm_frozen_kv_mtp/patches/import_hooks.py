"""Run a callback right after a module is imported, without importing it ourselves.

The front end (API server, ``LLM``, a Ray Serve replica) must never pay for
importing vLLM's model runners just because the plugin was registered, so worker
patches are applied when vLLM imports the runner modules, or at once if they are
already imported.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import ModuleType

Callback = Callable[[ModuleType], None]

_callbacks: dict[str, list[Callback]] = {}


class _LoaderWrapper(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader, name: str) -> None:
        self._loader = loader
        self._name = name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        for cb in _callbacks.pop(self._name, []):
            cb(module)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _callbacks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _LoaderWrapper(spec.loader, fullname)  # type: ignore[arg-type]
                return spec
        return None


_finder = _PostImportFinder()


def when_imported(module_name: str, callback: Callback) -> None:
    """Call ``callback(module)`` once ``module_name`` is imported (now, if it already is)."""
    module = sys.modules.get(module_name)
    if module is not None:
        callback(module)
        return
    _callbacks.setdefault(module_name, []).append(callback)
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


def pending() -> list[str]:
    """Modules whose callbacks have not run yet (for diagnostics and tests)."""
    return sorted(_callbacks)
