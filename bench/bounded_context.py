"""Acceptance cost of a bounded draft context on the committed trained pair (CPU).

    python -m bench.bounded_context --json bench/results/cpu_bounded_context.json

A bounded draft context lets the drafter's GLOBAL (full-attention) layers read only a
sink plus a recent window of the target's KV: keys ``[0, sink)`` and
``(p - window, p]`` for a draft query at position ``p`` (StreamingLLM's pattern, as
MagicDec, TriForce and LongSpec bound their drafters). Sliding layers are untouched.
Verification is unchanged, so output stays lossless; only acceptance can move, and
this measures by how much.

Greedy acceptance is measured exactly, without vLLM: every sequence is a prompt
followed by the target's own greedy continuation, so at any query ``p`` past the
prompt the bonus token and the tokens drafts must match are that continuation.
Step ``j`` reads token ``p + j`` and is accepted if its argmax equals token
``p + j + 1`` and every earlier step was accepted (the drafter's parallel, masked
forward of ``fixtures.train``, checked against the reference drafter's step by the
unit tests). The per-position rate ``a_j`` (vLLM's ``acceptance_rate_per_pos``) is
the fraction of rounds whose first ``j`` drafts were all accepted, so a round of
``k`` drafts commits ``AL(k) = 1 + a_1 + ... + a_k`` tokens on average.

Regimes (``--regimes``):

* ``document``: a long prompt, a short answer. Prompts are ``context`` tokens of the
  pair's held-out stdlib files (starting at a line), then ``--generate`` greedy tokens.
* ``recall``: a long prompt that quotes itself. Filler, a passage of another held-out
  file, more filler, then the passage's first 16 tokens again; a target that copies
  continues with the passage, about ``context / 2`` tokens back, out of any window
  below that. ``target_copy_rate`` says how much the target itself copies.
* ``generated``: a long answer. The pair's held-out eval prompts (24 to 96 tokens),
  greedily continued past ``context``.

A round is drafted at each position from the prompt's last token on that leaves ``k``
tokens of the ``--generate``-token answer to match (``generate - k`` rounds). Confidence
intervals are a bootstrap over sequences (rounds of one sequence are correlated) of
the paired difference against the unbounded drafter on the same rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# Before torch loads OpenMP: spinning OpenMP threads crawl on a shared 2-core machine.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

REGIMES = ("document", "recall", "generated")
NEG = -1e30  # additive mask value: every query keeps at least key p, so rows stay finite


@dataclass(frozen=True)
class Bound:
    """Keys a bounded global layer reads: the first ``sink`` and the last ``window``."""

    sink: int
    window: int

    def __post_init__(self) -> None:
        if self.sink < 0 or self.window < 1:
            raise ValueError(f"need sink >= 0 and window >= 1, got {self.sink}:{self.window}")

    @property
    def name(self) -> str:
        return f"{self.sink}+{self.window}"

    def keys_read(self, position: int) -> int:
        """How many keys a query at ``position`` reads (all ``position + 1`` when short)."""
        return min(position + 1, self.sink + self.window)


def parse_bounds(text: str) -> list[Bound | None]:
    """``"4:64,16:256,full"`` -> [Bound(4, 64), Bound(16, 256), None]; None is unbounded."""
    out: list[Bound | None] = []
    for item in (s.strip() for s in text.split(",") if s.strip()):
        if item == "full":
            out.append(None)
            continue
        sink, sep, window = item.partition(":")
        if not sep or not sink.isdigit() or not window.isdigit():
            raise ValueError(f"bad bound {item!r}: write SINK:WINDOW (e.g. 4:128) or 'full'")
        out.append(Bound(int(sink), int(window)))
    if None not in out:
        raise ValueError("--bounds must include 'full' (the unbounded baseline)")
    return out


def bound_name(bound: Bound | None) -> str:
    return "full" if bound is None else bound.name


def global_keys(queries: torch.Tensor, keys: int, bound: Bound | None) -> torch.Tensor:
    """[Q, keys] bool: key ``t`` is read by the query at ``queries[i]`` on a global layer."""
    key = torch.arange(keys)[None, :]
    q = queries[:, None]
    causal = key <= q
    if bound is None:
        return causal
    return causal & ((key < bound.sink) | (key > q - bound.window))


def sliding_keys(queries: torch.Tensor, keys: int, window: int) -> torch.Tensor:
    """[Q, keys] bool: the last ``window`` keys up to each query (sliding layers)."""
    key = torch.arange(keys)[None, :]
    q = queries[:, None]
    return (key <= q) & (key > q - window)


def kept_key_indices(position: int, bound: Bound | None) -> torch.Tensor:
    """Indices of the keys a query at ``position`` reads on a global layer, ascending:
    what a kernel given a cut block table would read."""
    return global_keys(torch.tensor([position]), position + 1, bound)[0].nonzero()[:, 0]


def draft_masks(
    queries: torch.Tensor, keys: int, sliding_window: int, bound: Bound | None
) -> dict[str, torch.Tensor]:
    """Additive [1, 1, Q, keys] masks per layer type, the global one bounded."""

    def additive(allowed: torch.Tensor) -> torch.Tensor:
        return torch.zeros(allowed.shape).masked_fill(~allowed, NEG)[None, None]

    return {
        "full_attention": additive(global_keys(queries, keys, bound)),
        "sliding_attention": additive(sliding_keys(queries, keys, sliding_window)),
    }


@torch.no_grad()
def draft_logits(
    target: Any,
    assistant: Any,
    ids: torch.Tensor,
    queries: torch.Tensor,
    k: int,
    bound: Bound | None,
    state: Any = None,
) -> list[torch.Tensor]:
    """Step ``j``'s draft logits [B, Q, vocab] at every query ``p`` (``j = 1..k``), all
    queries in one masked forward per step, teacher-forced on ``ids``: step ``j``
    reads token ``p + j`` and the previous step's ``post_projection`` output, over the
    target's KV of keys ``<= p`` (the sliding window on sliding layers, ``bound`` on
    global ones). ``state``: the target's :class:`TargetState` of ``ids``, if at hand."""
    from devkit.fixtures.reference import (
        assistant_layers,
        assistant_logits,
        target_state,
    )

    if state is None:
        state = target_state(target, ids)
    embeds = target.model.embed_tokens(ids)
    keys = int(queries[-1]) + 1
    kv = {t: (kk[:, :, :keys], vv[:, :, :keys]) for t, (kk, vv) in state.kv.items()}
    positions = queries[None].expand(ids.shape[0], -1)
    masks = draft_masks(queries, keys, target.config.sliding_window, bound)
    hidden = state.hidden[:, queries]
    out = []
    for j in range(1, k + 1):
        z = assistant.pre_projection(torch.cat([embeds[:, queries + j], hidden], dim=-1))
        h = assistant_layers(assistant, z, positions, kv, masks)
        out.append(assistant_logits(assistant, h))
        hidden = assistant.post_projection(h)
    return out


def draft_hits(
    target: Any,
    assistant: Any,
    ids: torch.Tensor,
    first_query: int,
    k: int,
    bounds: Sequence[Bound | None],
) -> dict[str, torch.Tensor]:
    """Per bound: [B, Q, k] bool, step ``j``'s greedy draft at query ``p`` equals
    ``ids[p + j + 1]`` (exact for chains of accepted drafts when ``ids`` continues
    greedily past ``first_query``). Queries: ``first_query .. T - k - 2``."""
    from devkit.fixtures.reference import target_state

    queries = torch.arange(first_query, ids.shape[1] - k - 1)
    state = target_state(target, ids)
    out = {}
    for bound in bounds:
        logits = draft_logits(target, assistant, ids, queries, k, bound, state)
        hits = [lg.argmax(-1) == ids[:, queries + j + 1] for j, lg in enumerate(logits, 1)]
        out[bound_name(bound)] = torch.stack(hits, dim=-1)
    return out


def chain(hits: torch.Tensor) -> torch.Tensor:
    """[..., k] hits -> [..., k] accepted: step j counts only if steps 1..j all hit."""
    return hits.to(torch.int64).cumprod(-1).bool()


def acceptance_length(rates: Sequence[float], k: int) -> float:
    """Mean tokens a round of ``k`` drafts commits: the bonus plus accepted drafts."""
    if not 1 <= k <= len(rates):
        raise ValueError(f"k={k} outside 1..{len(rates)}")
    return 1.0 + sum(rates[:k])


def per_sequence_al(accepted: torch.Tensor, k: int) -> torch.Tensor:
    """[B, Q, k_max] accepted -> [B] mean accepted length per sequence at ``k``."""
    return 1.0 + accepted[..., :k].float().sum(-1).mean(-1)


def bootstrap_ci(
    diffs: torch.Tensor, samples: int = 2000, seed: int = 0, level: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of ``diffs`` (one value per sequence)."""
    g = torch.Generator().manual_seed(seed)
    n = diffs.shape[0]
    idx = torch.randint(0, n, (samples, n), generator=g)
    means = diffs[idx].mean(-1).sort().values
    lo = means[int((1 - level) / 2 * samples)]
    hi = means[min(samples - 1, int((1 + level) / 2 * samples))]
    return float(lo), float(hi)


def far_copy_fraction(ids: torch.Tensor, first_query: int, k: int, near: int, n: int = 8) -> float:
    """Fraction of queries ``p`` whose next ``n`` tokens already occur in ``ids[: p + 1]``
    but only more than ``near`` tokens back: text a bounded drafter cannot copy from
    its window (a diagnostic for where acceptance can be lost)."""
    far = total = 0
    for row in ids.tolist():
        for p in range(first_query, len(row) - k - 1):
            want = row[p + 1 : p + 1 + n]
            if len(want) < n:
                continue
            total += 1
            last = -1
            for s in range(p + 1 - n, -1, -1):
                if row[s : s + n] == want:
                    last = s
                    break
            if last >= 0 and p - last > near:
                far += 1
    return far / max(1, total)


# ---- sequences --------------------------------------------------------------------


def document_sequences(
    target: Any, tok: Any, context: int, count: int, generate: int, seed: int
) -> torch.Tensor:
    """``count`` held-out stdlib windows of ``context`` tokens, each continued greedily."""
    from devkit.fixtures.train import (
        corpus_files,
        encode_files,
        greedy_generate,
        line_start_prompts,
    )

    _, held = corpus_files()
    docs = encode_files(tok, held)
    if not any(len(d) > 2 * context for d in docs):
        raise ValueError(f"no held-out file is longer than {2 * context} tokens")
    prompts = torch.tensor(
        line_start_prompts(docs, tok, (context,), count, torch.Generator().manual_seed(seed))
    )
    return greedy_generate(target, prompts, context + generate)


def recall_prompts(
    docs: list[torch.Tensor], context: int, count: int, passage: int, cue: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(prompts [count, context], the passages they quote [count, passage]).

    Each prompt is filler, a ``passage`` of another file, more filler, then the
    passage's first ``cue`` tokens again: a target that copies continues with the rest
    of the passage, which lies about ``context / 2`` tokens back (retrieval and code
    agents quote their context like this)."""
    g = torch.Generator().manual_seed(seed)
    fill = context - passage - cue
    if fill < 2:
        raise ValueError(f"context {context} too short for a {passage}-token passage")
    long_docs = [d for d in docs if len(d) > fill + passage]
    if len(long_docs) < 2:
        raise ValueError(f"need two held-out files longer than {fill + passage} tokens")

    def window(doc: torch.Tensor, n: int) -> torch.Tensor:
        start = int(torch.randint(0, len(doc) - n, (1,), generator=g))
        return doc[start : start + n]

    prompts, passages = [], []
    for _ in range(count):
        i, j = torch.randperm(len(long_docs), generator=g)[:2].tolist()
        quoted, filler = window(long_docs[i], passage), window(long_docs[j], fill)
        half = fill // 2
        prompts.append(torch.cat([filler[:half], quoted, filler[half:], quoted[:cue]]))
        passages.append(quoted)
    return torch.stack(prompts), torch.stack(passages)


def recall_sequences(
    target: Any, tok: Any, context: int, count: int, generate: int, seed: int
) -> tuple[torch.Tensor, float]:
    """Recall prompts continued greedily, and the fraction of continuation tokens that
    copy the quoted passage (how much the target itself recalls)."""
    from devkit.fixtures.train import corpus_files, encode_files, greedy_generate

    cue = 16
    passage = cue + generate + 16
    docs = encode_files(tok, corpus_files()[1])
    prompts, quoted = recall_prompts(docs, context, count, passage, cue, seed)
    seqs = greedy_generate(target, prompts, context + generate)
    copied = (seqs[:, context:] == quoted[:, cue : cue + generate]).float().mean()
    return seqs, float(copied)


def generated_sequences(target: Any, prompts: list[list[int]], total: int) -> list[torch.Tensor]:
    """Each eval prompt greedily continued to ``total`` tokens (grouped by length)."""
    from devkit.fixtures.train import greedy_generate

    out: list[torch.Tensor] = []
    for length in sorted({len(p) for p in prompts}):
        group = torch.tensor([p for p in prompts if len(p) == length])
        out.extend(greedy_generate(target, group, total))
    return out


# ---- measurement ------------------------------------------------------------------


def summarise(
    accepted: dict[str, torch.Tensor], ks: Sequence[int], bootstrap: int
) -> dict[str, dict[str, Any]]:
    """Per bound: per-position rates, AL(k), and the paired change against ``full``."""
    base = accepted["full"]
    out = {}
    for name, acc in accepted.items():
        rates = [round(float(acc[..., j].float().mean()), 4) for j in range(acc.shape[-1])]
        row: dict[str, Any] = {
            "acceptance_rate_per_pos": rates,
            "al": {str(k): round(acceptance_length(rates, k), 4) for k in ks},
        }
        if name != "full":
            full_rates = [float(base[..., j].float().mean()) for j in range(base.shape[-1])]
            row["al_ratio"] = {
                str(k): round(acceptance_length(rates, k) / acceptance_length(full_rates, k), 4)
                for k in ks
            }
            row["al_diff_ci95"] = {
                str(k): [
                    round(v, 4)
                    for v in bootstrap_ci(
                        per_sequence_al(acc, k) - per_sequence_al(base, k), bootstrap
                    )
                ]
                for k in ks
            }
            row["rounds_changed"] = round(float((acc != base).any(-1).float().mean()), 4)
        out[name] = row
    return out


def measure_context(
    target: Any,
    assistant: Any,
    seqs: torch.Tensor,
    context: int,
    k: int,
    bounds: Sequence[Bound | None],
    batch: int,
) -> dict[str, torch.Tensor]:
    """Accepted [B, Q, k] per bound for rounds after ``context`` committed tokens."""
    parts: dict[str, list[torch.Tensor]] = {}
    for i in range(0, len(seqs), batch):
        hits = draft_hits(target, assistant, seqs[i : i + batch], context - 1, k, bounds)
        for name, h in hits.items():
            parts.setdefault(name, []).append(chain(h))
    return {name: torch.cat(p) for name, p in parts.items()}


def label_agreement(target: Any, seqs: torch.Tensor, first: int, batch: int) -> float:
    """Fraction of continuation tokens equal to the no-cache forward's argmax (the
    greedy continuation was made with a KV cache; near ties may differ)."""
    from devkit.fixtures.reference import target_state

    same = total = 0
    with torch.no_grad():
        for i in range(0, len(seqs), batch):
            s = seqs[i : i + batch]
            pred = target.lm_head(target_state(target, s).hidden).argmax(-1)
            same += int((pred[:, first - 1 : -1] == s[:, first:]).sum())
            total += s[:, first:].numel()
    return same / max(1, total)


def print_table(rows: list[dict[str, Any]], ks: Sequence[int]) -> None:
    head = " | ".join(f"AL k={k}" for k in ks)
    print(f"| regime | context | bound | a_1..a_{max(ks)} | {head} | AL ratio k={max(ks)} |")
    print("|---|---|---|---|" + "---|" * len(ks) + "---|")
    for r in rows:
        rates = " ".join(f"{a:.2f}" for a in r["acceptance_rate_per_pos"])
        als = " | ".join(f"{r['al'][str(k)]:.3f}" for k in ks)
        ratio = r.get("al_ratio", {}).get(str(max(ks)), 1.0)
        print(f"| {r['regime']} | {r['context']} | {r['bound']} | {rates} | {als} | {ratio:.3f} |")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--contexts", default="256,512,1024,2000")
    ap.add_argument(
        "--bounds",
        default="0:1,4:32,4:64,4:128,16:256,64:512,full",
        help="SINK:WINDOW list; 'full' is the baseline, 0:1 (the query's own key only) "
        "a control for how much the global layer matters at all",
    )
    ap.add_argument("--regimes", default=",".join(REGIMES))
    ap.add_argument("--assistant", default="greedy-distilled", help="greedy-distilled or kl")
    ap.add_argument("--k", type=int, default=7, help="longest draft chain scored")
    ap.add_argument("--generate", type=int, default=48, help="greedy tokens after the prompt")
    ap.add_argument(
        "--documents", type=int, default=32, help="document and recall sequences per context"
    )
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--bootstrap", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    bounds = parse_bounds(args.bounds)
    contexts = [int(c) for c in args.contexts.split(",")]
    regimes = [r for r in args.regimes.split(",") if r]
    if bad := set(regimes) - set(REGIMES):
        ap.error(f"unknown regime(s) {sorted(bad)}: {', '.join(REGIMES)}")
    if args.k < 1 or args.generate < args.k + 2:
        ap.error("need k >= 1 and --generate >= k + 2")

    from transformers import AutoTokenizer

    from devkit.fixtures.reference import load_pair
    from devkit.fixtures.trained import eval_prompts, metrics, trained_pair_paths

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    tdir, adir = trained_pair_paths(assistant=args.assistant)
    target, assistant = load_pair(tdir, adir)
    limit = target.config.max_position_embeddings
    if max(contexts) + args.generate > limit:
        ap.error(f"context + generate must stay within the pair's {limit} positions")
    tok = AutoTokenizer.from_pretrained(str(tdir))
    ks = list(range(min(4, args.k), args.k + 1))
    rows: list[dict[str, Any]] = []
    t0 = time.time()
    generated: list[torch.Tensor] = []
    if "generated" in regimes:
        longest = max(map(len, eval_prompts()))
        if min(contexts) < longest:
            # rounds must start past the prompt, inside the greedy continuation
            ap.error(f"the generated regime needs contexts >= {longest} (the longest prompt)")
        generated = generated_sequences(target, eval_prompts(), max(contexts) + args.generate)
        print(f"generated {len(generated)} continuations in {time.time() - t0:.0f}s", flush=True)
    for regime in regimes:
        for context in contexts:
            t1 = time.time()
            copy_rate = None
            if regime == "document":
                seqs = document_sequences(
                    target, tok, context, args.documents, args.generate, args.seed + context
                )
            elif regime == "recall":
                seqs, copy_rate = recall_sequences(
                    target, tok, context, args.documents, args.generate, args.seed + context
                )
            else:
                seqs = torch.stack([s[: context + args.generate] for s in generated])
            accepted = measure_context(target, assistant, seqs, context, args.k, bounds, args.batch)
            extra = {
                "regime": regime,
                "context": context,
                "sequences": len(seqs),
                "rounds": int(accepted["full"].shape[0] * accepted["full"].shape[1]),
                "label_agreement": round(label_agreement(target, seqs, context, args.batch), 4),
                "target_copy_rate": None if copy_rate is None else round(copy_rate, 4),
                "far_copy_fraction_512": round(
                    far_copy_fraction(seqs, context - 1, args.k, 512), 4
                ),
            }
            for name, row in summarise(accepted, ks, args.bootstrap).items():
                bound = next(b for b in bounds if bound_name(b) == name)
                keys = context if bound is None else bound.keys_read(context - 1)
                rows.append({**extra, "bound": name, "global_keys_read": keys, **row})
                print("ROW", json.dumps(rows[-1]), flush=True)
            copied = "" if copy_rate is None else f", target copies {copy_rate:.0%} of the quote"
            print(f"{regime} {context}: {time.time() - t1:.0f}s{copied}", flush=True)
    print_table(rows, ks)
    if args.json:
        doc = {
            "command": "python -m bench.bounded_context "
            + " ".join(sys.argv[1:] if argv is None else argv),
            "assistant": args.assistant,
            "k": args.k,
            "generate": args.generate,
            "pair_trained_seq_len": metrics(args.assistant)["recipe"]["seq_len"],
            "environment": {
                "python": platform.python_version(),
                "torch": torch.__version__,
                "threads": args.threads,
            },
            "wall_s": round(time.time() - t0, 1),
            "rows": rows,
        }
        with open(args.json, "w") as f:
            f.write(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
