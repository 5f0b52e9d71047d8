"""A seeded, bounded request fuzzer for vLLM's OpenAI server with ``frozen_kv_mtp``.

Random completions and chat requests (sampling knobs, output controls, odd prompts,
streams dropped mid-response) go to a speculating server, several in flight so that
mixed sampling parameters share batches (the shape of the past ``top_k`` crash). Pass:

* no engine death: ``/health`` and a final plain request answer after the run;
* no 5xx, no dropped connection but our own aborts, every refusal a 4xx with a message;
* each case's expectation holds: valid cases are served, deliberately invalid ones refused;
* greedy outputs equal a no-speculation server's for the same request (see
  :func:`greedy_comparable` for which requests are compared);
* ``vllm:kv_cache_usage_perc`` is back to 0 once the server is idle.

Only loopback URLs are accepted. ``python -m devkit.serving.fuzz --help``.
"""

from devkit.serving.fuzz.cases import (
    CHOICES,
    INVALID,
    JSON_SCHEMA,
    REGEX,
    UNICODE_PROMPTS,
    Case,
    Limits,
    generate,
    greedy_comparable,
    spec_refuses,
)
from devkit.serving.fuzz.checks import (
    PASSING,
    classify,
    grammar_stop_token_dead_end,
    prompt_text_leaks,
)
from devkit.serving.fuzz.run import end_checks, fuzz, main, passed, run_cases
from devkit.serving.fuzz.transport import Choice, Outcome, check_url, send

__all__ = [
    "CHOICES",
    "INVALID",
    "JSON_SCHEMA",
    "PASSING",
    "REGEX",
    "UNICODE_PROMPTS",
    "Case",
    "Choice",
    "Limits",
    "Outcome",
    "check_url",
    "classify",
    "end_checks",
    "fuzz",
    "generate",
    "grammar_stop_token_dead_end",
    "greedy_comparable",
    "main",
    "passed",
    "prompt_text_leaks",
    "run_cases",
    "send",
    "spec_refuses",
]
