"""vLLM's names for the installed release: ``active.frontend``, ``active.scheduler``,
``active.metrics`` and ``active.proposer_helpers`` are the role modules of the package
``adapters.current()`` picks from ``adapters.ADAPTERS``. The drafter classes built on this
package's drafters are read through ``bound_drafters`` instead (``adapters/__init__.py``
says why).

Each is imported when first read, not when this module is: importing it imports no vLLM,
so the front end (and ``check-config``) pays nothing until a function that needs vLLM
runs, and a module that reads a role at import (a class over ``active.scheduler``'s
``Scheduler``) imports vLLM then, as it would by naming vLLM directly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vllm_frozen_kv_mtp.adapters import lazy_roles

if TYPE_CHECKING:  # mypy reads one adapter for all: every package has the same roles
    from vllm_frozen_kv_mtp.adapters.vllm_0_32 import (
        frontend,
        metrics,
        proposer_helpers,
        scheduler,
    )

__all__ = ["frontend", "metrics", "proposer_helpers", "scheduler"]


__getattr__ = lazy_roles(globals(), __all__)
