"""Benchmarks of the plugin; run each as a module from the repository root (python -m bench.cpu)."""
