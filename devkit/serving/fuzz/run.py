"""A seeded, bounded request fuzzer for vLLM's OpenAI server with ``frozen_kv_mtp``.

The run: the cases sent, each judged, greedy ones compared with the plain server, the
engine checked once idle; and the command line, which starts the pair of servers unless
given their URLs. (The first paragraph is the CLI's description.)
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests

from devkit.serving import client
from devkit.serving.fuzz.cases import Case, Limits, generate, greedy_comparable
from devkit.serving.fuzz.checks import PASSING, classify
from devkit.serving.fuzz.transport import Outcome, check_url, send


def run_cases(
    base_url: str,
    cases: Sequence[Case],
    *,
    concurrency: int = 8,
    deadline: float | None = None,
    timeout_s: float = 120.0,
) -> list[Outcome | None]:
    """Send ``cases`` (``concurrency`` in flight); None for those left when time ran out."""

    def one(case: Case) -> Outcome | None:
        if deadline is not None and time.monotonic() > deadline:
            return None
        return send(base_url, case, timeout_s)

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        return list(pool.map(one, cases))


def end_checks(base_url: str, model: str, idle_timeout_s: float = 60.0) -> dict[str, Any]:
    """/health, one plain request, and the KV cache gauge once idle."""
    res: dict[str, Any] = {}
    try:
        res["health"] = requests.get(base_url + "/health", timeout=10).status_code
    except requests.RequestException as e:
        res["health"] = f"{type(e).__name__}"
    final = Case(
        -1,
        False,
        False,
        {"model": model, "prompt": "def f(", "max_tokens": 4, "return_token_ids": True},
    )
    out = send(base_url, final, timeout_s=60)
    res["final_request"] = classify(final, out)[0]
    try:
        m = client.wait_idle(base_url, timeout=idle_timeout_s)
        res["kv_cache_usage_perc"] = m.sum("vllm:kv_cache_usage_perc")
        res["requests_running"] = m.sum("vllm:num_requests_running")
        res["requests_waiting"] = m.sum("vllm:num_requests_waiting")
    except OSError as e:
        res["kv_cache_usage_perc"] = None
        res["metrics_error"] = f"{type(e).__name__}: {e}"
    res["engine_alive"] = res["health"] == 200 and res["final_request"] == "ok"
    return res


def fuzz(
    spec_url: str,
    plain_url: str | None,
    model: str,
    *,
    n: int = 100,
    seed: int = 0,
    concurrency: int = 8,
    max_seconds: float = 600.0,
    limits: Limits | None = None,
) -> dict[str, Any]:
    """One run; returns the JSON summary (``passed`` says whether every check held)."""
    spec_url = check_url(spec_url)
    t0 = time.monotonic()
    cases = generate(n, model, seed=seed, limits=limits)
    outs = run_cases(spec_url, cases, concurrency=concurrency, deadline=t0 + max_seconds)
    outcomes: Counter[str] = Counter()
    per_mode: dict[str, Counter[str]] = defaultdict(Counter)
    failures = []
    refusals: Counter[str] = Counter()
    for case, out in zip(cases, outs, strict=True):
        kind, detail = ("not_sent", None) if out is None else classify(case, out)
        outcomes[kind] += 1
        if kind == "refused_4xx" and detail:
            refusals[re.sub(r"\d+", "N", detail.split("(parameter")[0])[:90].strip()] += 1
        per_mode[case.mode][kind] += 1
        if kind not in PASSING | {"not_sent"}:
            failures.append(
                {
                    "index": case.index,
                    "outcome": kind,
                    "detail": detail,
                    "tags": list(case.tags),
                    "payload": _short(case.payload),
                }
            )
    mismatches: list[dict[str, Any]] = []
    compared = 0
    if plain_url is not None:
        compared, mismatches = _compare_greedy(check_url(plain_url), cases, outs, concurrency)
    end = end_checks(spec_url, model)
    summary = {
        "requests": n,
        "seed": seed,
        "sent": n - outcomes["not_sent"],
        "elapsed_s": round(time.monotonic() - t0, 1),
        "outcomes": dict(sorted(outcomes.items())),
        "per_mode": {m: dict(sorted(c.items())) for m, c in sorted(per_mode.items())},
        "engine_deaths": 0 if end["engine_alive"] else 1,
        "server_errors_5xx": outcomes["server_error_5xx"],
        "tolerated_upstream": {k: v for k, v in outcomes.items() if k.startswith("upstream:")},
        "greedy_compared": compared,
        "mismatch_count": len(mismatches),
        "mismatches": mismatches[:5],
        "refusal_reasons": dict(refusals.most_common()),
        "failure_count": len(failures),
        "failures": failures[:10],
        "end": end,
    }
    summary["passed"] = passed(summary)
    return summary


def passed(summary: dict[str, Any]) -> bool:
    end = summary["end"]
    return (
        summary["engine_deaths"] == 0
        and summary["failure_count"] == 0
        and summary["mismatch_count"] == 0
        and set(summary["outcomes"]) <= PASSING | {"not_sent"}
        and end.get("kv_cache_usage_perc") == 0.0
    )


def _compare_greedy(
    plain_url: str, cases: Sequence[Case], outs: Sequence[Outcome | None], concurrency: int
) -> tuple[int, list[dict[str, Any]]]:
    picked = [i for i, c in enumerate(cases) if greedy_comparable(c) and outs[i] is not None]
    ref = run_cases(plain_url, [cases[i] for i in picked], concurrency=concurrency)
    mismatches = []
    for i, r in zip(picked, ref, strict=True):
        s = outs[i]
        assert s is not None and r is not None
        ks, kr = classify(cases[i], s)[0], classify(cases[i], r)[0]
        if ks != kr or (ks == "ok" and s.key() != r.key()):
            mismatches.append(
                {
                    "index": i,
                    "spec": [ks, s.key()[:1]],
                    "plain": [kr, r.key()[:1]],
                    "payload": _short(cases[i].payload),
                }
            )
    return len(picked), mismatches


def _short(payload: dict[str, Any]) -> dict[str, Any]:
    """The payload with long prompts elided, for reports."""
    out = dict(payload)
    for k in ("prompt", "messages"):
        v = json.dumps(out.get(k), ensure_ascii=False)
        if k in out and len(v) > 200:
            out[k] = v[:120] + f"... ({len(v)} chars)"
    return out


# ----------------------------------------------------------------------------- CLI


def _serve_pair(log_dir: Path, k: int) -> tuple[Any, Any, str]:
    """Start a speculating and a plain server on loopback with the committed trained pair."""
    from devkit.fixtures.trained import trained_pair_paths
    from devkit.serving.openai_server import start_server

    target, assistant = (str(p) for p in trained_pair_paths())
    template = Path(__file__).resolve().parents[3] / "configs" / "tiny-chat-template.jinja"
    common: dict[str, Any] = {"chat_template": str(template)} if template.is_file() else {}
    spec = {"method": "frozen_kv_mtp", "model": assistant, "num_speculative_tokens": k}
    s = start_server(target, log_path=log_dir / "spec.log", spec=spec, **common)
    p = start_server(target, log_path=log_dir / "plain.log", **common)
    for srv in (s, p):
        srv.wait_ready(timeout=600)
    return s, p, target


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m devkit.serving.fuzz", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--n", type=int, default=100, help="number of requests")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-seconds", type=float, default=600.0, help="stop sending after this")
    ap.add_argument("--spec-url", help="a running frozen_kv_mtp server (else one is started)")
    ap.add_argument("--plain-url", help="its no-speculation twin, for the greedy comparison")
    ap.add_argument("--model", help="served model name (with --spec-url)")
    ap.add_argument("--k", type=int, default=3, help="num_speculative_tokens of a started server")
    ap.add_argument("--log-dir", type=Path, help="server logs of a started pair")
    ap.add_argument("--out", type=Path, help="also write the summary here")
    a = ap.parse_args(argv)
    servers: tuple[Any, ...] = ()
    if a.spec_url:
        if not a.model:
            ap.error("--model is required with --spec-url")
        spec_url, plain_url, model = a.spec_url, a.plain_url, a.model
    else:
        log_dir = a.log_dir or Path(tempfile.mkdtemp(prefix="fuzz-"))
        s, p, model = _serve_pair(log_dir, a.k)
        servers, spec_url, plain_url = (s, p), s.url, p.url
    try:
        summary = fuzz(
            spec_url,
            plain_url,
            model,
            n=a.n,
            seed=a.seed,
            concurrency=a.concurrency,
            max_seconds=a.max_seconds,
        )
    finally:
        leftovers = [x for srv in servers for x in srv.stop()]
    if servers:
        summary["leftover_processes"] = leftovers
        summary["passed"] = summary["passed"] and not leftovers
    text = json.dumps(summary, indent=2, ensure_ascii=False)
    print(text)  # noqa: T201 - the CLI's output
    if a.out:
        a.out.write_text(text + "\n")
    return 0 if summary["passed"] else 1
