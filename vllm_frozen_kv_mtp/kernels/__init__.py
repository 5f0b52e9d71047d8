"""Triton kernels and the drafter heads/attention options built on them.

Each module says when its kernel wins and keeps a torch or vLLM fallback for hosts without
Triton and for launches that fail; every fallback is logged and counted in fallbacks.py."""
