"""The adapter for the installed vLLM: ``active.frontend``, ``active.scheduler``,
``active.speculator``, ``active.proposer`` and ``active.proposer_helpers`` are the role
modules of the package ``adapters.current()`` picks from ``adapters.ADAPTERS``.

Each is imported when first read, not when this module is: importing it imports no vLLM,
so the front end (and ``check-config``) pays nothing until a function that needs vLLM
runs, and a module that reads a role at import (a class over ``active.scheduler``'s
``Scheduler``) imports vLLM then, as it would by naming vLLM directly.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING

from vllm_frozen_kv_mtp.adapters import current

if TYPE_CHECKING:  # mypy reads one adapter for all: every package has the same roles
    from vllm_frozen_kv_mtp.adapters.vllm_0_32 import (
        frontend,
        proposer,
        proposer_helpers,
        scheduler,
        speculator,
    )

__all__ = ["frontend", "proposer", "proposer_helpers", "scheduler", "speculator"]


def __getattr__(name: str) -> ModuleType:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f"{__package__}.{current()}.{name}")
    globals()[name] = module  # later reads are plain module attributes
    return module
