"""frozen_kv_mtp on CUDA: both runners, async scheduling and CUDA graphs on.

Skipped without CUDA. Run on the H200 (see BENCHMARKS.md for the command):
greedy output equals no speculation, an all-accepting pair accepts every draft,
the drafter leaves the target KV unchanged, and a draft round makes no host sync.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch

from devkit.instrument import (
    acceptance,
    kernel_fallbacks,
    kernel_launches,
    uses_v2_model_runner,
)
from tests.conftest import pair
from tests.gpu import GRAPH_KW, KV_BYTES
from tests.utils.engine import (
    PROMPTS,
    clear_margin_case,
    drafter,
    engine,
    num_preemptions,
    outputs,
    record_drafts,
    spec_metrics,
)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


def _params() -> Any:
    from vllm import SamplingParams

    return SamplingParams(temperature=0.0, max_tokens=48)


def _no_spec_baseline(variant: str) -> tuple[str, str, list[Any], dict[str, Any], Any]:
    """A clear-margin pair, the engine kwargs for it, and its greedy output without
    speculation: (target, assistant, prompts, engine kwargs, expected outputs)."""
    target, assistant, prompts, extra = clear_margin_case(variant)
    kw = {**GRAPH_KW, **extra}
    with engine(target, **kw) as llm:
        expected = outputs(llm.generate(prompts, _params(), use_tqdm=False))
    return target, assistant, prompts, kw, expected


@pytest.mark.parametrize("variant", ["fp32-oracle", "trained"])
def test_greedy_identical_async_graphs(runner: str, variant: str) -> None:
    """Clear logit margins (see test_random_weights_match_upstream for why)."""
    target, assistant, prompts, kw, expected = _no_spec_baseline(variant)
    spec = {
        "method": "frozen_kv_mtp",
        "model": assistant,
        "num_speculative_tokens": 3,
        "kv_guard": True,  # every round checksums the target KV and fails on a change
    }
    softcaps = kernel_launches().get("one_pass_softcap", 0)
    with engine(target, spec, **kw) as llm:
        cfg = llm.llm_engine.vllm_config
        assert cfg.scheduler_config.async_scheduling, "async scheduling must be on"
        assert uses_v2_model_runner(cfg) == (runner == "v2")
        d = drafter(llm)
        expected_cls = "FrozenKVMTPSpeculator" if runner == "v2" else "FrozenKVMTPProposer"
        assert type(d).__name__ == expected_cls
        got = outputs(llm.generate(prompts, _params(), use_tqdm=False))
        single = [outputs(llm.generate([p], _params(), use_tqdm=False))[0] for p in prompts[:4]]
        m = spec_metrics(llm)
        assert d.frozen_stats.rounds > 0
        assert d.frozen_stats.seed_rows > 0
    print(f"{runner} {variant}: {acceptance(m)}")
    assert got == expected
    # the target's logits were soft-capped in one pass (target_softcap="one_pass")
    assert kernel_launches().get("one_pass_softcap", 0) > softcaps
    if runner == "v2":
        assert "seed_rows" not in kernel_fallbacks(), "the seed-row kernel fell back to torch"
    assert single == expected[:4]
    assert m["num_drafts"] > 0
    if variant == "fp32-oracle":
        assert m["num_accepted_tokens"] == m["num_draft_tokens"]


def test_v2_kv_checksum_sees_the_cache_and_rounds_leave_it(runner: str) -> None:
    if runner != "v2":
        pytest.skip("V1 is covered on CPU by tests/e2e/test_kv_readonly.py")
    target, assistant = pair("fp32")
    spec = {"method": "frozen_kv_mtp", "model": assistant, "num_speculative_tokens": 3}
    with engine(target, spec, enforce_eager=True, kv_cache_memory_bytes=KV_BYTES) as llm:
        d = drafter(llm)
        original = d.propose
        sums: list[tuple[str, str]] = []

        def propose(*args: Any, **kwargs: Any) -> Any:
            torch.cuda.synchronize()
            before = d._kv_checksum()
            out = original(*args, **kwargs)
            torch.cuda.synchronize()
            sums.append((before, d._kv_checksum()))
            return out

        d.propose = propose
        llm.generate(PROMPTS, _params(), use_tqdm=False)
    assert len(sums) > 5 and all(b == a for b, a in sums)
    assert len({b for b, _ in sums}) > 1  # the checksum does see target writes


@pytest.mark.parametrize("method", ["frozen_kv_mtp", "mtp"])
def test_draft_round_makes_no_host_sync(runner: str, method: str) -> None:
    """Count synchronizing CUDA calls inside each draft round (torch sync debug mode)."""
    target, assistant = pair("fp32")
    spec = {"method": method, "model": assistant, "num_speculative_tokens": 3}
    with engine(target, spec, **GRAPH_KW) as llm:
        d = drafter(llm)
        original = d.propose
        caught: list[str] = []

        def propose(*args: Any, **kwargs: Any) -> Any:
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                torch.cuda.set_sync_debug_mode("warn")
                try:
                    return original(*args, **kwargs)
                finally:
                    torch.cuda.set_sync_debug_mode("default")
                    caught.extend(
                        str(x.message)
                        for x in w
                        if "synchroniz" in str(x.message) and "prototype" not in str(x.message)
                    )

        d.propose = propose
        llm.generate(PROMPTS, _params(), use_tqdm=False)
    print(f"{runner} {method}: {len(caught)} synchronizing calls in draft rounds")
    if method == "frozen_kv_mtp":
        assert caught == [], caught[:3]


def test_preemption_keeps_greedy_output_async(runner: str) -> None:
    """A KV cache too small for the batch: the scheduler preempts and recomputes
    requests while async scheduling keeps a step in flight. Output equals no
    speculation and every oracle draft is still accepted (tests/e2e covers V1 on CPU)."""
    from vllm import SamplingParams

    target, assistant = pair("fp32-oracle")
    params = SamplingParams(temperature=0.0, max_tokens=60)
    tight = dict(max_model_len=160, block_size=32, num_gpu_blocks_override=24)

    def run(llm: Any) -> tuple[list[list[int]], int]:
        res = [list(r.outputs[0].token_ids) for r in llm.generate(PROMPTS, params, use_tqdm=False)]
        return res, num_preemptions(llm)

    with engine(target, **{**GRAPH_KW, "max_model_len": 160}) as llm:
        expected, _ = run(llm)
    spec = {"method": "frozen_kv_mtp", "model": assistant, "num_speculative_tokens": 3}
    with engine(target, spec, **{**GRAPH_KW, **tight}) as llm:
        assert llm.llm_engine.vllm_config.scheduler_config.async_scheduling
        got, preempted = run(llm)
        m = spec_metrics(llm)
    print(f"{runner} preemption: {preempted} preemptions, {acceptance(m)}")
    assert preempted > 0
    assert got == expected
    assert m["num_accepted_tokens"] == m["num_draft_tokens"] > 0


def test_hub_architecture_target_greedy_identical(runner: str) -> None:
    """The real checkpoints ship Gemma4ForConditionalGeneration (text weights under
    ``language_model``): frozen_kv_mtp over that wrapper, as `vllm serve
    google/gemma-4-31B-it` loads it (text only here: ``language_model_only``), gives the
    text target's no-speculation output and accepts every oracle draft."""
    text_target, _ = pair("fp32-oracle")
    target, assistant = pair("fp32-oracle-mm")
    kw = {**GRAPH_KW, "language_model_only": True}
    with engine(text_target, **GRAPH_KW) as llm:
        expected = outputs(llm.generate(PROMPTS, _params(), use_tqdm=False))
    spec = {"method": "frozen_kv_mtp", "model": assistant, "num_speculative_tokens": 3}
    with engine(target, spec, **kw) as llm:
        assert llm.llm_engine.vllm_config.model_config.architectures == [
            "Gemma4ForConditionalGeneration"
        ]
        expected_cls = "FrozenKVMTPSpeculator" if runner == "v2" else "FrozenKVMTPProposer"
        assert type(drafter(llm)).__name__ == expected_cls
        got = outputs(llm.generate(PROMPTS, _params(), use_tqdm=False))
        m = spec_metrics(llm)
    print(f"{runner} hub architecture: {acceptance(m)}")
    assert got == expected
    assert m["num_accepted_tokens"] == m["num_draft_tokens"] > 0


def test_random_weights_match_upstream_mtp(runner: str) -> None:
    """Random fp32 weights have near-uniform logits, so on GPU the multi-token verify
    pass can flip a near-tie against one-token decoding (seen on the H200 for 1 of 18
    prompts, identically for upstream mtp). What must hold: frozen_kv_mtp's output is
    exactly upstream mtp's, since both verify the same drafts."""
    target, assistant = pair("fp32")
    kw = GRAPH_KW
    res = {}
    for method in ("mtp", "frozen_kv_mtp"):
        spec = {"method": method, "model": assistant, "num_speculative_tokens": 3}
        with engine(target, spec, **kw) as llm:
            res[method] = outputs(llm.generate(PROMPTS, _params(), use_tqdm=False))
    assert res["frozen_kv_mtp"] == res["mtp"]


def test_v2_centroid_heads_draft_what_upstream_drafts(
    runner: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The centroid_head options ("sparse", "dense", "fused", "auto") change how
    Model Runner V2 scores draft tokens, not which: every round's drafts equal upstream's
    head's (fp32). With Triton on CUDA, "auto" scores every bucket with "fused". 40
    requests at once put the first rounds in a >=32-row graph bucket."""
    if runner != "v2":
        pytest.skip("centroid_head applies to Model Runner V2")
    import vllm_frozen_kv_mtp.drafters.seed_round as round_module

    calls: dict[str, list[tuple[str, int]]] = {}
    original_top_tokens = round_module.top_tokens
    head = "upstream"

    def counted(model: Any, hidden: torch.Tensor, scored_by: str) -> torch.Tensor:
        # at capture time for graph replays, every time in eager
        calls.setdefault(head, []).append((scored_by, hidden.shape[0]))
        return original_top_tokens(model, hidden, scored_by)

    monkeypatch.setattr(round_module, "top_tokens", counted)
    target, assistant = pair("fp32-centroid")
    prompts = [f"{p} # {i}" for i in range(3) for p in PROMPTS][:40]
    kw = {**GRAPH_KW, "max_num_seqs": len(prompts)}
    drafts, outs = {}, {}
    for head in ("upstream", "sparse", "dense", "fused", "auto"):
        spec = {
            "method": "frozen_kv_mtp",
            "model": assistant,
            "num_speculative_tokens": 3,
            "centroid_head": head,
        }
        with engine(target, spec, **kw) as llm, record_drafts(llm) as rounds:
            outs[head] = outputs(llm.generate(prompts, _params(), use_tqdm=False))
            drafts[head] = list(rounds)
    print({h: sum(len(r) for r in d) for h, d in drafts.items()}, "draft rows per head")
    assert "upstream" not in calls
    assert {h for h, _ in calls["sparse"]} == {"sparse"}
    assert {h for h, _ in calls["dense"]} == {"dense"}
    assert {h for h, _ in calls["fused"]} == {"fused"}
    # "auto": fused for every bucket, small and >= 32 rows.
    assert {h for h, _ in calls["auto"]} == {"fused"}
    assert max(rows for _, rows in calls["auto"]) >= 32
    assert max(len(r) for r in drafts["auto"]) >= 32
    assert drafts["sparse"] == drafts["upstream"]
    assert drafts["dense"] == drafts["upstream"]
    assert "centroid_head" not in kernel_fallbacks(), "the fused head fell back to dense"
    assert "seed_rows" not in kernel_fallbacks(), "the seed-row kernel fell back to torch"
    assert drafts["fused"] == drafts["upstream"]
    assert drafts["auto"] == drafts["upstream"]
    for head in ("sparse", "dense", "fused", "auto"):
        assert outs[head] == outs["upstream"], head


def test_v2_sliding_single_pass_attention_keeps_output_and_drafts(runner: str) -> None:
    """sliding_split_kv_max_rows=0: the drafter's sliding-window layers read the window in
    one pass (vLLM's 2D Triton kernel) at every batch size, the target's attention keeps
    vLLM's choice, output equals no speculation and the oracle pair still accepts every
    draft (fp32)."""
    if runner != "v2":
        pytest.skip("sliding_split_kv_max_rows applies to Model Runner V2")
    target, assistant, prompts, kw, expected = _no_spec_baseline("fp32-oracle")
    spec = {
        "method": "frozen_kv_mtp",
        "model": assistant,
        "num_speculative_tokens": 3,
        "sliding_split_kv_max_rows": 0,
    }
    with engine(target, spec, **kw) as llm:
        d = drafter(llm)
        thresholds: dict[bool, list[int | None]] = {True: [], False: []}
        for groups in d.attn_groups:
            for g in groups:
                sliding = getattr(g.kv_cache_spec, "sliding_window", None) is not None
                thresholds[sliding] += [
                    getattr(b, "seq_threshold_3D", None) for b in g.metadata_builders
                ]
        got = outputs(llm.generate(prompts, _params(), use_tqdm=False))
        m = spec_metrics(llm)
    print("drafter split-KV thresholds (sliding?: values)", thresholds)
    assert thresholds[True] and all(t == 0 for t in thresholds[True]), thresholds
    assert all(t is None or t > 0 for t in thresholds[False]), thresholds
    assert got == expected
    assert m["num_drafts"] > 0
    assert m["num_accepted_tokens"] == m["num_draft_tokens"]


def test_v2_split_decode_attention_keeps_output_and_drafts(runner: str) -> None:
    """draft_attention="split": every drafter attention layer decodes with the split
    kernel (it ran at warm-up and capture, and nothing fell back to vLLM's kernels over the
    engine's life, so the captured rounds use it), output equals no speculation and the
    oracle pair still accepts every draft (fp32), async on, CUDA graphs."""
    if runner != "v2":
        pytest.skip("draft_attention applies to Model Runner V2")
    target, assistant, prompts, kw, expected = _no_spec_baseline("fp32-oracle")
    spec = {
        "method": "frozen_kv_mtp",
        "model": assistant,
        "num_speculative_tokens": 3,
        "draft_attention": "split",
    }
    before = kernel_fallbacks().get("split_decode", 0), kernel_launches().get("split_decode", 0)
    with engine(target, spec, **kw) as llm:
        d = drafter(llm)
        from vllm_frozen_kv_mtp.drafters.kv_readonly import attention_layers

        layers = attention_layers(d.vllm_config)
        kinds = {type(layers[n].impl).__name__ for n in d.draft_attn_layer_names}
        target_kinds = {
            type(layer.impl).__name__
            for n, layer in layers.items()
            if n not in d.draft_attn_layer_names
        }
        got = outputs(llm.generate(prompts, _params(), use_tqdm=False))
        m = spec_metrics(llm)
    fallbacks = kernel_fallbacks().get("split_decode", 0) - before[0]
    calls = kernel_launches().get("split_decode", 0) - before[1]
    print("drafter attention impls", kinds, "target", target_kinds, "split calls", calls)
    assert kinds == {"SplitDecodeTritonImpl"}, kinds
    assert "SplitDecodeTritonImpl" not in target_kinds
    assert calls > 0 and fallbacks == 0, (calls, fallbacks)
    assert got == expected
    assert m["num_drafts"] > 0
    assert m["num_accepted_tokens"] == m["num_draft_tokens"]


def test_v2_fused_dense_head_drafts_what_upstream_drafts(runner: str) -> None:
    """dense_head="fused" changes how Model Runner V2 scores a dense head's drafts, not
    which: every round's drafts equal upstream's head's (fp32, random weights; the
    fixture's assistant has no centroids). 40 requests at once reach a >=32-row bucket."""
    if runner != "v2":
        pytest.skip("dense_head applies to Model Runner V2")

    target, assistant = pair("fp32")
    prompts = [f"{p} # {i}" for i in range(3) for p in PROMPTS][:40]
    kw = {**GRAPH_KW, "max_num_seqs": len(prompts)}
    drafts, outs = {}, {}
    for head in ("upstream", "fused"):
        spec = {
            "method": "frozen_kv_mtp",
            "model": assistant,
            "num_speculative_tokens": 3,
            "dense_head": head,
        }
        with engine(target, spec, **kw) as llm, record_drafts(llm) as rounds:
            built = drafter(llm).frozen_dense_head
            outs[head] = outputs(llm.generate(prompts, _params(), use_tqdm=False))
            drafts[head] = list(rounds)
        assert (built is None) == (head == "upstream"), head
    print({h: sum(len(r) for r in d) for h, d in drafts.items()}, "draft rows per head")
    assert "dense_head" not in kernel_fallbacks(), "the dense head fell back to upstream's"
    assert max(len(r) for r in drafts["fused"]) >= 32
    assert drafts["fused"] == drafts["upstream"]
    assert outs["fused"] == outs["upstream"]


def test_v2_fp8_dense_head_keeps_output(runner: str) -> None:
    """dense_head="fp8": drafts from FP8 rows may differ from upstream's near ties, and
    output must not: greedy output equals no speculation on the trained pair (fp32), and
    acceptance stays within 10% of the bf16/fp32 head's."""
    if runner != "v2":
        pytest.skip("dense_head applies to Model Runner V2")

    target, assistant, prompts, kw, expected = _no_spec_baseline("trained")
    res = {}
    for head in ("upstream", "fp8"):
        spec = {
            "method": "frozen_kv_mtp",
            "model": assistant,
            "num_speculative_tokens": 3,
            "dense_head": head,
        }
        with engine(target, spec, **kw) as llm:
            built = drafter(llm).frozen_dense_head
            got = outputs(llm.generate(prompts, _params(), use_tqdm=False))
            res[head] = acceptance(spec_metrics(llm))
        assert got == expected, head
        if head == "fp8":
            assert built is not None and built.scale is not None
            assert built.weight.dtype == torch.float8_e4m3fn
    print(f"{runner} dense_head: {res}")
    assert "dense_head" not in kernel_fallbacks(), "the dense head fell back to upstream's"
    assert res["fp8"]["accepted_tokens"] >= 0.9 * res["upstream"]["accepted_tokens"]
