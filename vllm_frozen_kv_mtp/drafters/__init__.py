"""The frozen-KV drafter, on both of vLLM's model runners.

The drafter owns no KV. Its attention layers are Q-only and read the target's paged KV
for the committed prefix. So a draft round needs exactly one row per request: the seed
(the target's post-norm hidden state at the last accepted position, plus the bonus
token), queried at that constant position over keys <= position, for every one of the k
recurrent steps. That is a uniform decode batch whose attention metadata is the same for
all steps and is built once per round.

* ``seed_proposer.py``: ``FrozenSeedProposer``, the logic for vLLM's V1 runner (also
  vLLM's CPU runner), with ``seed_metadata.py`` (the seed rows' one-row metadata) and
  ``draft_q.py`` (sampled drafts' q cut like the target's p);
* ``seed_round.py``: ``FrozenRound``, the logic for Model Runner V2 (the GPU default), with
  ``seed_rows.py`` (the seed rows loaded into the round's CUDA-graph buffers) and
  ``heads.py`` (greedy drafts without a full-vocabulary logits tensor);
* ``proposer.py``, ``speculator.py``: the classes vLLM builds, ``FrozenKVMTPProposer`` and
  ``FrozenKVMTPSpeculator``, from the adapter (``adapters/``), which binds each mixin to
  one vLLM release's ``Gemma4Proposer`` / ``Gemma4Speculator``;
* both: ``kv_readonly.py`` (load-time checks that the drafter reads target KV and owns
  none), ``kv_guard.py`` (option ``kv_guard``) and ``stats.py`` (counters logged at
  exit).

vLLM builds these classes where it would build its own (patches 2 and 3,
``patches/drafter_dispatch.py``), only when the engine's options ask for frozen_kv_mtp.
"""
