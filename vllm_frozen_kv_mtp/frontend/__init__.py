"""The front end: what runs before any engine starts, in the process the user talks to.

``translate.py`` validates a ``frozen_kv_mtp`` config and rewrites it for vLLM's
``"mtp"`` (patch 1 calls it from ``EngineArgs.create_speculative_config``), with the pair
checks (``pair.py``, ``layer_shapes.py``), the image-input refusal (``multimodal.py``)
and k (``draft_length/request.py``). ``cli.py`` is the ``frozen-kv-mtp`` command:
``options`` (``option_help.py``) and ``check-config`` (``check_config.py``, which checks
the published Gemma 4 sizes offline against ``published_sizes.py``). Nothing here
imports vLLM's model runners.
"""
