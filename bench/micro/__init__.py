"""Timing of single kernels and parts of a draft round (python -m bench.micro.<name>)."""
