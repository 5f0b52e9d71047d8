"""The seam between this plugin and one vLLM release's private names.

vLLM gives out-of-tree drafters no stable interface: the plugin subclasses vLLM's drafters
and schedulers, calls their private helpers and reads module paths that move between
releases (docs/upstream.md lists them, release by release). Each ``vllm_<major>_<minor>``
package here imports those names for the releases it serves, one module per process
role, and the rest of the package takes them from there, never from ``vllm`` directly:

* ``frontend.py``: what the front end reads, and the few names every process reads
  (attention layers, the logits processor, the Triton attention impl), each imported
  inside its function, so that importing it imports no vLLM (``check-config`` relies
  on that);
* ``scheduler.py``: the engine core's scheduler classes (``draft_length/scheduler.py``);
* ``proposer.py``: the V1 runner's drafter and samplers (``drafters/proposer.py``);
* ``speculator.py``: Model Runner V2's (``drafters/speculator.py``).

``vllm_0_32`` serves vLLM 0.32 and 0.33 (the window ``vllm_frozen_kv_mtp.__init__``
checks at ``register()``), whose Gemma 4 drafter code is identical.

Porting to a new release (docs/upstream.md, "The adapter seam"): copy the newest adapter
to ``vllm_<new>/``, fix its imports until ``make check-vllm VLLM=<new>`` passes, and
point the package's ``adapters.vllm_...`` imports at it. The names of upstream methods
the drafters override or call on ``self`` still live in the drafter classes; moving the
concrete classes here, over version-neutral mixins, is the next step of the seam.
"""
