"""Greedy output stays identical to no speculation under the engine features a server
mixes into one batch, and under KV-cache pressure (fp32, real engine, real scheduler).

* Sampling features: repetition, presence and frequency penalties, bad words,
  min_tokens, sample logprobs and prompt logprobs, in one batch with seeded sampled
  requests. Penalties move the target away from the oracle drafter, so drafts get
  rejected: verification really decides here.
* Structured outputs: regex, choice and JSON schema.
* Preemption: a KV cache too small for the batch makes the scheduler preempt and
  recompute requests. The frozen drafter reads the target's blocks and takes its
  seed from the step that ran, so a recomputed request must draft from the new
  blocks, not stale ones.
* k changing between steps (a batch-size schedule, or "auto") under the sampling
  features, preemption and structured outputs: penalties, logprobs, the scheduler's
  draft-token checks and the recomputed requests' rounds meet every k.

vLLM itself refuses min_p and logit_bias with speculative decoding (at request time,
with a clear error), so they are not here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from devkit.instrument import model_runner
from tests.conftest import pair
from tests.utils.engine import PROMPTS, drafter, engine, num_preemptions, spec_metrics
from vllm_frozen_kv_mtp.patches import TARGET_SOFTCAP_ATTR

pytestmark = pytest.mark.engine

K = 3
T = TypeVar("T")
#: ways to set k beside the fixed K: a schedule over the batch sizes preemption leaves
#: running (k = 0 included), and the goodput policy
DRAFT_LENGTHS: dict[str, dict[str, Any]] = {
    "fixed": {},
    "schedule": {"num_speculative_tokens_per_batch_size": [[1, 2, 3], [3, 3, 0], [4, 8, 2]]},
    "auto": {"num_speculative_tokens": "auto", "max_num_speculative_tokens": 4},
}


def _without_and_with(
    run: Callable[[Any], T],
    variant: str,
    plain_kw: dict[str, Any] | None = None,
    spec_kw: dict[str, Any] | None = None,
    draft_length: str = "fixed",
) -> tuple[T, T, dict[str, Any]]:
    """``run``'s result on the pair's target without speculation, then with
    frozen_kv_mtp (k set as ``DRAFT_LENGTHS[draft_length]``), and the second engine's
    spec-decode counters plus its draft rounds per k (``rounds_by_k``) and its steps
    with k = 0 (``skipped_rounds``)."""
    target, assistant = pair(variant)
    with engine(target, **(plain_kw or {})) as llm:
        expected = run(llm)
    spec = {
        "method": "frozen_kv_mtp",
        "model": assistant,
        "num_speculative_tokens": K,
        **DRAFT_LENGTHS[draft_length],
    }
    with engine(target, spec, **(spec_kw or {})) as llm:
        got = run(llm)
        stats = drafter(llm).frozen_stats
        metrics = {
            **spec_metrics(llm),
            "rounds_by_k": dict(stats.rounds_by_k),
            "skipped_rounds": stats.skipped_rounds,
        }
        # the drafter marked the target's soft-capped logits for patch 5 (which keeps
        # vLLM's ops on CPU; tests/gpu checks the kernel)
        target_model = model_runner(llm).model
        assert any(getattr(m, TARGET_SOFTCAP_ATTR, False) for m in target_model.modules())
    return expected, got, metrics


def _mixed_params() -> list[Any]:
    """One SamplingParams per prompt, cycling through the features (index % 6 == 4:
    seeded random sampling, whose tokens speculation may change; the rest greedy)."""
    from vllm import SamplingParams

    kinds = [
        dict(repetition_penalty=1.3),
        dict(presence_penalty=0.8, frequency_penalty=0.4, logprobs=3),
        dict(bad_words=["self", "the"]),
        dict(min_tokens=30),
        None,  # sampled
        dict(logprobs=2, prompt_logprobs=1),
    ]
    params = []
    for i in range(len(PROMPTS)):
        kind = kinds[i % len(kinds)]
        if kind is None:
            params.append(SamplingParams(temperature=0.8, seed=i, max_tokens=40))
        else:
            params.append(SamplingParams(temperature=0.0, max_tokens=40, **kind))
    return params


def _results(llm: Any) -> list[dict[str, Any]]:
    out = []
    for r in llm.generate(PROMPTS, _mixed_params(), use_tqdm=False):
        o = r.outputs[0]
        out.append(
            {
                "tokens": list(o.token_ids),
                "finish": o.finish_reason,
                "logprobs": None
                if o.logprobs is None
                else [{k: v.logprob for k, v in d.items()} for d in o.logprobs],
                "prompt_logprobs": None
                if r.prompt_logprobs is None
                else [None if d is None else sorted(d) for d in r.prompt_logprobs],
            }
        )
    return out


@pytest.mark.parametrize("draft_length", ["fixed", "schedule"])
def test_sampling_features_keep_greedy_output(draft_length: str) -> None:
    expected, got, metrics = _without_and_with(_results, "fp32-oracle", draft_length=draft_length)
    params = _mixed_params()
    for i, (g, e, p) in enumerate(zip(got, expected, params, strict=True)):
        if p.temperature > 0:
            assert g["tokens"] and g["finish"] in ("stop", "length"), (i, g)
            continue
        assert (g["tokens"], g["finish"]) == (e["tokens"], e["finish"]), (i, p, g, e)
        assert g["prompt_logprobs"] == e["prompt_logprobs"], i
        if e["logprobs"] is None:
            assert g["logprobs"] is None, i
            continue
        assert [sorted(d) for d in g["logprobs"]] == [sorted(d) for d in e["logprobs"]], i
        for gd, ed in zip(g["logprobs"], e["logprobs"], strict=True):
            for token, lp in ed.items():
                assert gd[token] == pytest.approx(lp, abs=1e-4), (i, token)
    # Non-vacuous: the oracle drafts the unpenalised target's argmax, so rejections show
    # that the features changed what the target picks, and verification decided.
    assert metrics["num_drafts"] > 0
    assert 0 < metrics["num_accepted_tokens"] < metrics["num_draft_tokens"], metrics
    assert any(len(r["tokens"]) == 40 for r in got[3::6])  # min_tokens held EOS back
    if draft_length != "fixed":
        assert len(metrics["rounds_by_k"]) >= 2, metrics["rounds_by_k"]


@pytest.mark.parametrize(
    ("variant", "draft_length"),
    [("fp32-oracle", "fixed"), ("fp32", "fixed"), ("fp32-oracle", "schedule")],
)
def test_preemption_keeps_greedy_output(variant: str, draft_length: str) -> None:
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=60)
    # Block size 32 (CPU attention takes multiples of 32); 24 blocks hold about three
    # of the eight running sequences, so the scheduler must preempt.
    tight = dict(max_model_len=160, block_size=32, num_gpu_blocks_override=24)

    def run(llm: Any) -> tuple[list[list[int]], int]:
        res = [list(r.outputs[0].token_ids) for r in llm.generate(PROMPTS, params, use_tqdm=False)]
        return res, num_preemptions(llm)

    (expected, calm), (got, preemptions), metrics = _without_and_with(
        run, variant, plain_kw=dict(max_model_len=160), spec_kw=tight, draft_length=draft_length
    )
    assert calm == 0 and preemptions > 0, (calm, preemptions)
    assert metrics["num_drafts"] > 0
    if draft_length != "fixed":
        assert len(metrics["rounds_by_k"]) >= 2, metrics["rounds_by_k"]
        assert metrics["skipped_rounds"] > 0
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        assert g == e, f"{variant} prompt {i}: {g} != {e}"


@pytest.mark.parametrize("draft_length", ["fixed", "auto"])
def test_structured_outputs_keep_greedy_output(draft_length: str) -> None:
    """Regex, choice and JSON-schema constrained decoding (vLLM's grammar bitmask on the
    target's logits, and its scheduler's check of the draft tokens)."""
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams as SO

    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
        "required": ["a", "b"],
    }
    constraints = [
        SO(regex=r"(def|class) [a-z_]{1,12}\(\w*\):"),
        SO(choice=["alpha", "beta gamma", "delta"]),
        SO(json=schema),
        None,
    ]
    params = [
        SamplingParams(temperature=0.0, max_tokens=30, structured_outputs=c) for c in constraints
    ]
    prompts = PROMPTS[: len(params)]

    def run(llm: Any) -> list[tuple[list[int], str]]:
        res = llm.generate(prompts, params, use_tqdm=False)
        return [(list(r.outputs[0].token_ids), r.outputs[0].text) for r in res]

    expected, got, metrics = _without_and_with(run, "fp32-oracle", draft_length=draft_length)
    assert got == expected
    assert metrics["num_drafts"] > 0
    if draft_length == "auto":
        assert len(metrics["rounds_by_k"]) >= 2, metrics["rounds_by_k"]
    # the constraints held (the unconstrained prompt is the control)
    assert got[0][1].startswith(("def ", "class "))
    assert got[1][1] in ("alpha", "beta gamma", "delta")
    assert got[2][1].lstrip().startswith("{")
