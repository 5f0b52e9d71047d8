"""The installed release's drafter classes: ``bound_drafters.proposer`` and
``bound_drafters.speculator`` are the role modules that bind this package's version-neutral
drafters (``drafters/seed_proposer.py``, ``drafters/seed_round.py``) to that release's
``Gemma4Proposer`` and ``Gemma4Speculator``. They sit above the drafters, which read vLLM
through ``active``; one module for both would run the imports in a circle.

Imported when first read, like ``active``'s roles.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vllm_frozen_kv_mtp.adapters import lazy_roles

if TYPE_CHECKING:  # mypy reads one adapter for all: every package has the same roles
    from vllm_frozen_kv_mtp.adapters.vllm_0_32 import proposer, speculator

__all__ = ["proposer", "speculator"]


__getattr__ = lazy_roles(globals(), __all__)
