"""Helpers shared by the test suites: engine drivers and the Triton interpreter runner."""
