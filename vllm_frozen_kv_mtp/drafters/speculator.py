"""``FrozenKVMTPSpeculator``, Model Runner V2's frozen-KV drafter, for the installed vLLM.

The version-neutral logic is ``seed_round.FrozenRound``; the class vLLM builds (patch 3,
``patches/drafter_dispatch.py``) binds it to one release's ``Gemma4Speculator`` in the
adapter.
"""

from vllm_frozen_kv_mtp.adapters import bound_drafters

FrozenKVMTPSpeculator = bound_drafters.speculator.FrozenKVMTPSpeculator

__all__ = ["FrozenKVMTPSpeculator"]
