"""vLLM 0.32 and 0.33: the private names this plugin reads (see ``adapters/__init__.py``)."""
