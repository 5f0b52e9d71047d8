"""Triton kernels and the drafter heads/attention options built on them.

Each module says when its kernel wins and keeps a torch fallback for hosts without Triton."""
