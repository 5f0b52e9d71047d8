"""Rows of the engine comparison (``bench/results/peers.json``): one schema for vLLM rows
(from ``bench.gpu_tokens``) and SGLang rows (from ``bench.sglang_tokens``), the
acceptance each SGLang setting is matched to, and the comparison table.

Matched acceptance. Our rows draw synthetic acceptance at per-position rates
(``bench.gpu_tokens.PROFILES``); SGLang's ``SGLANG_SIMULATE_ACC_LEN`` forces a mean
acceptance length instead. A chain of k steps gets the profile's mean AL at k,
``1 + sum(rates[:k])`` (chat at k = 4: 3.10). SGLang's tree (topk > 1) gets
``TREE_AL_RATIO`` times the chain's AL at the same depth: the ratio SGLang published
for Gemma 4 E4B (3.80 at topk 3 against 3.28 at topk 1, GSM8K, 5 steps). That is an
assumption: it carries the published gain of the tree over the chain to every profile.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench.gpu_tokens import PROFILES
from bench.method import row_engine

#: the fields of a peers.json row, in order
FIELDS = (
    "engine",
    "engine_version",
    "model",
    "method",
    "topk",
    "k",
    "concurrency",
    "profile",
    "acceptance_length_set",
    "mean_acceptance_length",
    "decode_tok_s",
    "itl_p50_ms",
    "itl_p90_ms",
    "ttft_p50_ms",
    "attention",
    "device",
    "label",
)
ENGINES = ("vllm", "sglang")
METHODS = ("none", "mtp", "frozen_kv_mtp", "frozen_kv_mtp:auto")
#: SGLang's tree over chain acceptance for Gemma 4 E4B at 5 steps: 3.80 / 3.28
TREE_AL_RATIO = 1.16
TREE_AL_SOURCE = "tree AL = 1.16 x chain AL at the same depth (SGLang #25461: E4B 3.80 vs 3.28)"


def chain_al(profile: str, k: int) -> float:
    """Mean acceptance length of ``profile``'s rates cut to ``k`` draft positions."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; known: {', '.join(PROFILES)}")
    rates = PROFILES[profile]
    if not 0 <= k <= len(rates):
        raise ValueError(f"k={k} is outside 0..{len(rates)} for profile {profile!r}")
    return round(1 + sum(rates[:k]), 4)


def tree_al(profile: str, steps: int) -> float:
    """The tree's assumed AL: TREE_AL_RATIO x the chain's at ``steps``, at most steps + 1
    (a verify accepts at most one token per depth plus the bonus)."""
    return round(min(steps + 1.0, TREE_AL_RATIO * chain_al(profile, steps)), 4)


def peer_row(**values: Any) -> dict[str, Any]:
    """A peers.json row with exactly FIELDS; a missing or unknown field is an error."""
    missing = [f for f in FIELDS if f not in values]
    extra = sorted(set(values) - set(FIELDS))
    if missing or extra:
        raise ValueError(f"peer row: missing {missing}, unknown {extra}")
    if values["engine"] not in ENGINES:
        raise ValueError(f"engine {values['engine']!r} is not one of {ENGINES}")
    if values["method"] not in METHODS:
        raise ValueError(f"method {values['method']!r} is not one of {METHODS}")
    return {f: values[f] for f in FIELDS}


# ---- SGLang rows ------------------------------------------------------------------


def _label(row: dict[str, Any], what: str) -> str:
    return f"{row['label']}: {what}" if row.get("label") else what


def _sglang_peer(row: dict[str, Any], what: str) -> dict[str, Any]:
    return peer_row(
        engine="sglang",
        engine_version=row["engine_version"],
        model=row["model"],
        method=row["method"],
        topk=row["topk"],
        k=row["k"],
        concurrency=row["concurrency"],
        profile=row["profile"],
        acceptance_length_set=row["acceptance_length_set"],
        mean_acceptance_length=row["mean_acceptance_length"],
        decode_tok_s=row["decode_tok_s"],
        itl_p50_ms=row["itl_p50_ms"],
        itl_p90_ms=row["itl_p90_ms"],
        ttft_p50_ms=row["ttft_p50_ms"],
        attention=row["attention"],
        device=row["device"],
        label=_label(row, what),
    )


def sglang_peers(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """peers.json rows of a ``bench.sglang_tokens`` run: no speculation, the chain at 4
    steps, the best chain per (model, c, profile) over every step count run, and the
    tree (its label states the acceptance assumption)."""
    rows = [r for r in rows if r.get("engine") == "sglang"]
    out: list[dict[str, Any]] = []
    chains: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        if r["method"] == "none":
            out.append(_sglang_peer(r, "SGLang, no speculation"))
        elif r["topk"] > 1:
            out.append(_sglang_peer(r, f"SGLang tree topk {r['topk']}, {TREE_AL_SOURCE}"))
        else:
            key = (r.get("label"), r["model"], r["concurrency"], r["profile"])
            chains.setdefault(key, []).append(r)
    for group in chains.values():
        best = max(group, key=lambda r: r["decode_tok_s"])
        ks = ",".join(str(k) for k in sorted({r["k"] for r in group}))
        for r in group:
            if r["k"] == 4:
                best_of = f", the best of steps {ks}" if r is best and len(group) > 1 else ""
                out.append(_sglang_peer(r, f"SGLang chain, 4 steps{best_of}"))
        if best["k"] != 4:
            out.append(_sglang_peer(best, f"SGLang chain, best of steps {ks}"))
    return out


# ---- vLLM rows (bench.gpu_tokens) ------------------------------------------------------


def _vllm_method(row: dict[str, Any]) -> tuple[str, str] | None:
    """(peers method, what) for the gpu_tokens rows the comparison keeps: no
    speculation, upstream mtp k=4 (its static engine), frozen k=4 (the static engine,
    else k=4 pinned in the sweep engine) and frozen auto; None for the others."""
    method, engine = row.get("method"), row_engine(row)
    if row.get("temperature"):
        return None
    if method == "none":
        return "none", "vLLM, no speculation"
    if method == "mtp" and row.get("k") == 4 and not row.get("pinned"):
        return "mtp", "vLLM mtp, k=4"
    if method == "frozen_kv_mtp" and row.get("k") == 4 and not row.get("options"):
        if engine == "frozen_kv_mtp:4":
            return "frozen_kv_mtp", "frozen_kv_mtp, k=4"
        if row.get("pinned"):
            return "frozen_kv_mtp", "frozen_kv_mtp, k=4 pinned in the variable-k engine"
    if method == "frozen_kv_mtp:auto":
        return "frozen_kv_mtp:auto", "frozen_kv_mtp auto"
    return None


def vllm_peers(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """peers.json rows from ``bench.gpu_tokens`` rows (rows timed before it recorded ITL
    and TTFT leave them None). frozen k=4 comes from the static engine where one ran,
    else from the sweep's pinned k=4."""
    rows = list(rows)
    static4 = {
        (r.get("label"), r["model"], r["concurrency"], r["profile"])
        for r in rows
        if row_engine(r) == "frozen_kv_mtp:4" and not r.get("options")
    }
    out = []
    for r in rows:
        kept = _vllm_method(r)
        if kept is None:
            continue
        method, what = kept
        key = (r.get("label"), r["model"], r["concurrency"], r["profile"])
        if method == "frozen_kv_mtp" and r.get("pinned") and key in static4:
            continue
        spec = method != "none"
        k = r["k"] if spec else 0
        out.append(
            peer_row(
                engine="vllm",
                engine_version=r.get("vllm_version"),
                model=r["model"],
                method=method,
                topk=1 if spec else 0,
                k=k,
                concurrency=r["concurrency"],
                profile=r["profile"],
                # synthetic rates cut to the engine's k (auto: to its k_max)
                acceptance_length_set=chain_al(r["profile"], k) if spec else None,
                mean_acceptance_length=r.get("mean_acceptance_length"),
                decode_tok_s=r["decode_tok_s"],
                itl_p50_ms=r.get("itl_p50_ms"),
                itl_p90_ms=r.get("itl_p90_ms"),
                ttft_p50_ms=r.get("ttft_p50_ms"),
                attention=r.get("attention"),
                device=r.get("device"),
                label=_label(r, what),
            )
        )
    return out


# ---- the comparison table ----------------------------------------------------------------


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a JSON list or a JSON-lines file."""
    text = Path(path).read_text()
    if text.lstrip().startswith("["):
        return list(json.loads(text))
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _run(row: dict[str, Any]) -> str:
    """The run a row belongs to: its label before the setting description."""
    return str(row.get("label") or "").split(": ", 1)[0]


def report(peers: list[dict[str, Any]]) -> str:
    """Markdown: per (device, model, c, profile), our frozen_kv_mtp auto next to the
    best SGLang FROZEN_KV_MTP setting (chain or tree), and the ratio. Rows of different
    cards are never set side by side."""
    tables = []
    for device in sorted({str(p.get("device")) for p in peers}):
        rows = [p for p in peers if str(p.get("device")) == device]
        ours: dict[tuple[Any, ...], dict[str, Any]] = {}
        theirs: dict[tuple[Any, ...], dict[str, Any]] = {}
        none: dict[tuple[str, Any, Any], dict[str, Any]] = {}
        for p in rows:
            key = (p["model"], p["concurrency"], p["profile"])
            if p["method"] == "none":
                none[(p["engine"], p["model"], p["concurrency"])] = p
            elif p["engine"] == "vllm" and p["method"] == "frozen_kv_mtp:auto":
                ours[key] = p
            elif p["engine"] == "sglang" and p["method"] == "frozen_kv_mtp":
                if key not in theirs or p["decode_tok_s"] > theirs[key]["decode_tok_s"]:
                    theirs[key] = p
        out = [
            f"### {device}",
            "",
            "| model | c | profile | vLLM none | SGLang none | ours auto (AL) "
            "| best SGLang (setting, AL) | ours / SGLang |",
            "|---|---|---|---|---|---|---|---|",
        ]

        def tok(p: dict[str, Any] | None) -> str:
            return f"{p['decode_tok_s']:.0f}" if p else "-"

        for key in sorted({*ours, *theirs}, key=lambda x: (x[0], x[1], x[2])):
            model, c, profile = key
            a, b = ours.get(key), theirs.get(key)
            a_cell = f"{tok(a)} ({_al(a)})" if a else "-"
            b_cell = f"{tok(b)} (topk {b['topk']} k={b['k']}, {_al(b)})" if b else "-"
            ratio = f"{a['decode_tok_s'] / b['decode_tok_s']:.2f}" if a and b else "-"
            out.append(
                f"| {model} | {c} | {profile} | {tok(none.get(('vllm', model, c)))} | "
                f"{tok(none.get(('sglang', model, c)))} | {a_cell} | {b_cell} | {ratio} |"
            )
        out += ["", *same_chain(rows)]
        runs = sorted({_run(p) for p in rows} - {""})
        if runs:
            out += ["", "Runs: " + ", ".join(runs)]
        tables.append("\n".join(out))
    return "\n\n".join(tables)


def _al(p: dict[str, Any] | None) -> str:
    """A row's measured AL for a table cell: "-" without a row, "?" where it has none."""
    if p is None:
        return "-"
    m = p.get("mean_acceptance_length")
    return f"{m:.2f}" if isinstance(m, int | float) else "?"


#: (engine, method) -> the column of the like-for-like table
_CHAIN_COLUMNS = {
    ("vllm", "frozen_kv_mtp"): "ours",
    ("vllm", "mtp"): "mtp",
    ("sglang", "frozen_kv_mtp"): "sgl",
}


def _timing(p: dict[str, Any] | None) -> str:
    """ "tok/s · ITL p50/p90 · TTFT" of one peers row."""
    if p is None:
        return "-"

    def ms(v: Any) -> str:
        return f"{v:.1f}" if isinstance(v, int | float) else "?"

    return (
        f"{p['decode_tok_s']:.0f} · {ms(p.get('itl_p50_ms'))}/{ms(p.get('itl_p90_ms'))} · "
        f"{ms(p.get('ttft_p50_ms'))}"
    )


def same_chain(rows: list[dict[str, Any]], k: int = 4) -> list[str]:
    """Markdown lines: the three engines that draft one chain of ``k`` at the same
    acceptance (frozen_kv_mtp's static engine, vLLM's mtp, SGLang's FROZEN_KV_MTP at
    topk 1), with decode tok/s, inter-token latency p50/p90 and TTFT p50 (ms) each,
    and the measured AL; one card's rows only. Empty where no SGLang chain of k ran."""
    cells: dict[tuple[Any, ...], dict[str, dict[str, Any]]] = {}
    for p in rows:
        if p.get("k") != k or p.get("topk") != 1:
            continue
        name = _CHAIN_COLUMNS.get((p["engine"], p["method"]))
        if name:
            cells.setdefault((p["model"], p["concurrency"], p["profile"]), {})[name] = p
    if not any("sgl" in v for v in cells.values()):
        return []
    backends = sorted({str(p.get("attention")) for v in cells.values() for p in v.values()})
    out = [
        f"One chain of {k} at the same acceptance; each cell: decode tok/s · ITL p50/p90 (ms) "
        f"· TTFT p50 (ms); attention: {', '.join(backends)}.",
        "",
        f"| model | c | profile | AL (ours / SGLang) | frozen_kv_mtp k={k} | vLLM mtp k={k} "
        f"| SGLang chain k={k} | ours / SGLang |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key in sorted(cells, key=lambda x: (x[0], x[1], x[2])):
        v = cells[key]
        ours, sgl = v.get("ours"), v.get("sgl")

        ratio = f"{ours['decode_tok_s'] / sgl['decode_tok_s']:.2f}" if ours and sgl else "-"
        out.append(
            f"| {key[0]} | {key[1]} | {key[2]} | {_al(ours)} / {_al(sgl)} | {_timing(ours)} | "
            f"{_timing(v.get('mtp'))} | {_timing(sgl)} | {ratio} |"
        )
    return out
