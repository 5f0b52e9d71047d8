"""How many drafts each step: a fixed k, vLLM's batch-size schedule, or ``"auto"``.

A fixed k and vLLM's ``num_speculative_tokens_per_batch_size`` are vLLM's own: the front
end validates them (``request.py``) and vLLM's scheduler applies them. ``"auto"`` is the
goodput policy: each step the engine core's scheduler (``scheduler.py``) asks
``policy.py`` for the k in 0..k_max that commits the most tokens per second, learned from
the engine's own acceptance per position and step costs (``step_cost.py``,
``cost_fit.py``, ``cells.py``, tuned by ``settings.py``).

Upstream workarounds this package carries, and what would retire each
--------------------------------------------------------------------

vLLM has no way to be told "this engine may run any k in 0..k_max, chosen per step". It
learns the k's a step may run from a batch-size schedule only, and sizes its CUDA graphs
from that schedule. So ``"auto"`` hands vLLM a *stand-in schedule* and compensates for it
wherever vLLM reads the schedule for something else. All of it goes once vLLM lets a
scheduler name the k's it may pick (a list of k's in the speculative config).

1. The stand-in schedule (front end; ``stand_in.graph_capture_schedule``):
   ``[[1, 1, k_max], [2, 2, k_max - 1], ..., [k_max + 1, k_max + 1, 0]]`` turns on vLLM's
   per-step k (``uses_dynamic_speculative_decoding``: the scheduler reads a k per step
   and the workers take ``num_spec_tokens_to_schedule``) and puts every k in vLLM's
   table, so that Model Runner V2 captures verify graphs for each of them.
2. The scheduler's k lookup (engine core; ``scheduler.py``): vLLM's scheduler reads
   ``dynamic_sd_lookup[batch_size]``, the dense table built from the stand-in; the
   goodput scheduler replaces that table with a lookup that asks the policy. Also
   private: the two hooks it learns from (``make_spec_decoding_stats``,
   ``update_from_output``), and the choice of the async or sync parent in
   ``GoodputScheduler.__new__`` (vLLM picks ``AsyncScheduler`` only for its own class).
   Retired by: a scheduler hook that returns the step's k and receives verify results.
3. The verify graphs (workers; patch 6, ``patches/graph_candidates.py``): vLLM cuts the
   stand-in's dense table at ``max_num_seqs``, so an engine with fewer slots than
   k_max + 1 would lose the graphs of every k past its last slot; while
   ``CudaGraphManager._init_candidates`` runs, the table holds every k of
   ``stand_in.runnable_draft_lengths`` instead. On vLLM 0.34 this becomes a wrap of
   ``VllmConfig.get_decode_cudagraph_query_lens`` (docs/upstream.md, M1).
   Patch 6 also gives each token count the FULL graphs of every other query length
   (``add_uniform_fallbacks``), for ``"auto"`` and for vLLM's own schedules: vLLM 0.32
   and 0.33 look a uniform batch up by token count alone. Retired by vLLM 0.34's lookup
   per query length (docs/upstream.md, L2).
4. The draft-round graphs (workers; ``FrozenKVMTPSpeculator._specialize_capture_descs``
   in ``drafters/speculator.py``): vLLM's ``SpeculatorCudaGraphManager.capture`` takes
   the k's from the schedule and leaves k = 1 out (its k = 1 round has no decode step;
   ours does); the speculator writes one capture descriptor per k of
   ``runnable_draft_lengths``. Retired by ``capture(specialize_spec_tokens=True)``
   taking the k's from the speculator and keeping k = 1 when the loop has a step there.

``stand_in.runnable_draft_lengths`` is the one answer to "which k's can a step of this
engine run", read by 3 and 4, so the stand-in's shape is known in two places only: where
it is made (1) and where it is read back (``runnable_draft_lengths``).

Refused, because vLLM turns the per-step k off there: ``"auto"`` under data parallelism
(``request.py``). A k of 0 (no drafts) needs no workaround: a frozen-KV drafter owns no
KV to keep in sync, so both drafters skip the round.
"""
