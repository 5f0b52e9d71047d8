"""``FrozenKVMTPProposer``, the V1 runner's frozen-KV drafter, for the installed vLLM.

The version-neutral logic is ``seed_proposer.FrozenSeedProposer``; the class vLLM builds
(patch 2, ``patches/drafter_dispatch.py``) binds it to one release's ``Gemma4Proposer``
in the adapter.
"""

from vllm_frozen_kv_mtp.adapters import bound_drafters

FrozenKVMTPProposer = bound_drafters.proposer.FrozenKVMTPProposer

__all__ = ["FrozenKVMTPProposer"]
