"""The lab beside the plugin: what tests, benchmarks and the demo need, not what vLLM runs.

It lives in the repository, not in the wheel (``setup.py`` packages
``vllm_frozen_kv_mtp`` only), and nothing in ``vllm_frozen_kv_mtp`` imports it
(tests/unit/test_layout.py). Run it from a clone's root:

* ``fixtures/``: the tiny Gemma 4 pairs (random, oracle, multimodal), the committed
  trained pair (``fixtures/data/trained``) and its training recipe, the CPU reference
  drafter, the prompts;
* ``serving/``: the OpenAI-server launcher, the load generator, the Ray Serve builders and
  the seeded request fuzzer (``python -m devkit.serving.fuzz``, ``make fuzz``);
* ``demo.py``: ``make demo``; ``instrument.py``: the drafter's counters and vLLM's
  speculative metrics of an in-process engine, for tests and benchmarks.
"""
