"""Serving helpers: an OpenAI-server launcher, an HTTP load generator and Ray Serve builders.

Nothing here is imported by the plugin itself; tests, ``bench.serving`` and users
import these modules explicitly. All traffic they generate goes to the URL they are
given (127.0.0.1 in tests and benchmarks).
"""
