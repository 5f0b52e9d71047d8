"""The seam between this plugin and one vLLM release's private names.

vLLM gives out-of-tree drafters no stable interface: the plugin subclasses vLLM's drafters
and schedulers, calls their private helpers and reads module paths that move between
releases (docs/upstream.md lists them, release by release). Each ``vllm_<major>_<minor>``
package here holds what is bound to the releases it serves, one module per process role,
and the rest of the package takes vLLM's names from there, never from ``vllm`` directly:

* ``frontend.py``: what the front end reads, and the few names every process reads
  (attention layers, the logits processor, the Triton attention impl), each imported
  inside its function, so that importing it imports no vLLM (``check-config`` relies
  on that);
* ``scheduler.py``: the engine core's scheduler classes (``draft_length/scheduler.py``);
* ``speculator.py``: Model Runner V2's ``FrozenKVMTPSpeculator``, the version-neutral
  ``drafters/seed_round.FrozenRound`` bound to that release's ``Gemma4Speculator``: every
  override by an upstream name, the copies of upstream's control flow, the graph
  manager's constructor, the DP and graph helpers;
* ``proposer.py``: the V1 runner's ``FrozenKVMTPProposer``, ``drafters/seed_proposer``'s
  ``FrozenSeedProposer`` bound to ``Gemma4Proposer`` the same way;
* ``proposer_helpers.py``: vLLM helpers the V1 drafter's own modules call (its sampler's,
  the FP8 KV-scale copy), apart from ``proposer.py`` so that no import runs in a circle.

``vllm_0_32`` serves vLLM 0.32 and 0.33 (the window ``vllm_frozen_kv_mtp.__init__``
checks at ``register()``), whose Gemma 4 drafter code is identical. ``drafters/speculator.py``
and ``drafters/proposer.py`` name the concrete classes the rest of the package (and
patches 2 and 3) builds.

Porting to a new release (docs/upstream.md, "The adapter seam"): add ``vllm_<new>/`` with
a ``speculator.py`` whose class overrides what the release changed (no V1 runner from
0.34), fix its imports until ``make check-vllm VLLM=<new>`` passes, and point the
package's ``adapters.vllm_...`` imports at it. The patch registry's targets and bodies
(``patches/``) are not in the adapter yet.
"""
