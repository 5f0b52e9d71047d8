"""Leaf code: Triton kernels and their torch fallbacks, and the fallback record.

Nothing here imports vLLM or changes a vLLM object (``patches/`` does, and the drafters
call these). Each kernel keeps a torch fallback for hosts without Triton and for launches
that fail; every fallback is logged and counted in ``fallbacks.py``.
"""
