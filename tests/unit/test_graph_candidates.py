"""Patch 6: with k varying, every uniform decode batch dispatches to a FULL graph.

Runs vLLM's own ``CudaGraphManager._init_candidates`` and ``dispatch`` (no GPU: the
manager is built without capturing anything) on the capture sizes a variable-k engine
gets, before and after :func:`add_uniform_fallbacks`.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

cg = pytest.importorskip("vllm.v1.worker.gpu.cudagraph_utils")
from vllm.config.compilation import CUDAGraphMode  # noqa: E402

from vllm_frozen_kv_mtp.draft_length.stand_in import graph_capture_schedule  # noqa: E402
from vllm_frozen_kv_mtp.options import ADDITIONAL_CONFIG_KEY  # noqa: E402
from vllm_frozen_kv_mtp.patches.graph_candidates import add_uniform_fallbacks  # noqa: E402


def _manager(
    sizes: list[int],
    max_reqs: int,
    k_max: int,
    dynamic: bool = True,
    patched: bool = False,
    policy: str = "auto",
) -> Any:
    """vLLM's manager with its candidates built by vLLM's unpatched method, or by the
    installed patch (``patched``) for a frozen_kv_mtp engine whose k policy is ``policy``."""
    spec = SimpleNamespace(
        num_speculative_tokens_per_batch_size=graph_capture_schedule(k_max) if dynamic else None,
        uses_dynamic_speculative_decoding=lambda: dynamic,
        use_gemma4_mtp=lambda: True,
    )
    mgr = object.__new__(cg.CudaGraphManager)
    mgr.vllm_config = SimpleNamespace(
        speculative_config=spec,
        num_speculative_tokens=k_max,
        cache_config=SimpleNamespace(use_kda_recoverssm=False),
        parallel_config=SimpleNamespace(),
        additional_config={ADDITIONAL_CONFIG_KEY: {"k_policy": policy}} if patched else {},
    )
    mgr.compilation_config = SimpleNamespace(
        cudagraph_capture_sizes=sizes, max_cudagraph_capture_size=max(sizes)
    )
    mgr.cudagraph_mode = CUDAGraphMode.FULL_AND_PIECEWISE
    mgr.max_num_reqs = max_reqs
    mgr.decode_query_len = k_max + 1
    mgr.varlen_decode = False
    mgr.lora_capture_cases = [0]
    mgr.ubatch_runner = None
    mgr._candidates = {}
    mgr._capture_descs = {}
    init = cg.CudaGraphManager._init_candidates
    if patched:
        assert hasattr(init, "__wrapped__"), "the plugin's patch is not installed"
        init(mgr)
    else:
        getattr(init, "__wrapped__", init)(mgr)
    mgr._graphs_captured = True
    return mgr


def _eager_batches(mgr: Any, max_reqs: int, query_lens: range) -> list[tuple[int, int]]:
    """(requests, query length) of uniform decode batches that get no FULL graph."""
    return [
        (n, q)
        for q in query_lens
        for n in range(1, max_reqs + 1)
        if mgr.dispatch(n, n * q, q, 0).cg_mode != CUDAGraphMode.FULL
    ]


def test_every_uniform_batch_gets_a_full_graph_when_k_varies() -> None:
    k_max, conc = 7, (8, 32)
    sizes = sorted({c * (k + 1) for c in conc for k in range(k_max + 1)})
    mgr = _manager(sizes, max(conc), k_max)
    before = _eager_batches(mgr, max(conc), range(1, k_max + 2))
    # vLLM alone: e.g. 1 request verifying 4 drafts (5 tokens) finds only the 8-token
    # graphs of lengths 1, 2, 4 and 8
    assert (1, 5) in before and len(before) > 50
    added = add_uniform_fallbacks(mgr._candidates, mgr._capture_descs, CUDAGraphMode.FULL)
    assert added > 0
    assert _eager_batches(mgr, max(conc), range(1, k_max + 2)) == []
    # the smallest graph of the batch's length that fits: 5 tokens -> 10 (2 requests)
    desc = mgr.dispatch(1, 5, 5, 0)
    assert (desc.num_tokens, desc.num_reqs, desc.uniform_token_count) == (10, 2, 5)
    # non-uniform batches keep vLLM's choice (no FULL graph of a query length)
    assert mgr.dispatch(3, 10, None, 0).cg_mode != CUDAGraphMode.FULL


def test_default_capture_sizes_and_schedules() -> None:
    """vLLM's default sizes (1, 2, 4, 8, then steps of 8) and a 4-draft ceiling."""
    k_max, max_reqs = 4, 64
    sizes = [1, 2, 4] + list(range(8, 8 * 64 + 1, 8))
    mgr = _manager(sizes, max_reqs, k_max)
    assert _eager_batches(mgr, max_reqs, range(1, k_max + 2))
    add_uniform_fallbacks(mgr._candidates, mgr._capture_descs, CUDAGraphMode.FULL)
    assert _eager_batches(mgr, max_reqs, range(1, k_max + 2)) == []


def test_fixed_k_is_left_alone() -> None:
    mgr = _manager([1, 2, 4, 8, 16, 32, 64, 128], 32, 3, dynamic=False)
    before = {k: list(v) for k, v in mgr._candidates.items()}
    assert add_uniform_fallbacks(mgr._candidates, mgr._capture_descs, CUDAGraphMode.FULL) == 0
    assert mgr._candidates == before


@pytest.mark.parametrize("max_reqs", [1, 4])
def test_auto_captures_every_k_with_fewer_slots_than_k_max(max_reqs: int) -> None:
    """vLLM reads the k's to capture from the stand-in schedule cut at max_num_seqs: with
    fewer slots than k_max + 1 the k's past the last slot had no FULL graph at all."""
    import vllm_frozen_kv_mtp

    vllm_frozen_kv_mtp.register()
    k_max = 7
    every_q = range(1, k_max + 2)
    # a size for every (requests, k): what a graph per (batch, k) needs
    sizes = sorted({n * q for n in range(1, max_reqs + 1) for q in every_q})

    unpatched = _manager(sizes, max_reqs, k_max)
    add_uniform_fallbacks(unpatched._candidates, unpatched._capture_descs, CUDAGraphMode.FULL)
    missing = _eager_batches(unpatched, max_reqs, every_q)
    # k = 0 and k = 1 (1 and 2 tokens a request) sit past the last slot
    assert (1, 1) in missing and (1, 2) in missing

    mgr = _manager(sizes, max_reqs, k_max, patched=True)
    assert _eager_batches(mgr, max_reqs, every_q) == []
    assert {d.uniform_token_count for d in mgr._capture_descs[CUDAGraphMode.FULL]} == set(every_q)
    # vLLM's own limits still hold: no graph for more requests than max_num_seqs
    assert max(d.num_reqs for d in mgr._capture_descs[CUDAGraphMode.FULL]) <= max_reqs
    # and the module's lookup is vLLM's again afterwards
    from vllm.v1.spec_decode.dynamic import utils

    assert cg.build_dynamic_sd_schedule_lookup is utils.build_dynamic_sd_schedule_lookup


def test_a_user_schedule_keeps_its_own_k_set() -> None:
    """Only "auto" reads every k: a user's schedule captures the k's it holds (here the
    one k its single row gives)."""
    import vllm_frozen_kv_mtp

    vllm_frozen_kv_mtp.register()
    mgr = _manager([1, 2, 4, 8, 16], 1, 7, patched=True, policy="schedule")
    assert {d.uniform_token_count for d in mgr._capture_descs[CUDAGraphMode.FULL]} == {8}


def test_runnable_draft_lengths_are_what_both_graph_sets_capture() -> None:
    """The k's the verify and draft graphs are captured for: every k under "auto"
    whatever max_num_seqs is; a schedule's own k's, cut at max_num_seqs as vLLM does."""
    from vllm_frozen_kv_mtp.draft_length.stand_in import runnable_draft_lengths
    from vllm_frozen_kv_mtp.options import FrozenKVOptions

    auto = FrozenKVOptions(k_policy="auto")
    stand_in = SimpleNamespace(num_speculative_tokens_per_batch_size=graph_capture_schedule(7))
    for max_reqs in (1, 4, 256):
        assert runnable_draft_lengths(auto, stand_in, 7, max_reqs) == list(range(7, -1, -1))
    schedule = FrozenKVOptions(k_policy="schedule")
    user = SimpleNamespace(num_speculative_tokens_per_batch_size=[[1, 1, 3], [2, 4, 0], [5, 8, 2]])
    assert runnable_draft_lengths(schedule, user, 4, 1) == [3]
    assert runnable_draft_lengths(schedule, user, 4, 8) == [3, 2, 0]


# ---- vLLM 0.34: patch 6b widens the verify graphs' query lengths under "auto" ----------


def test_every_k_query_lens_covers_every_k_at_every_batch_size() -> None:
    from vllm_frozen_kv_mtp.patches.graph_candidates import every_k_query_lens

    # 0.34 reads the stand-in schedule: k_max at 1 request, k_max - 1 at 2, ..., 0 at 5
    vllm_lens = {5: 1, 4: 2, 3: 3, 2: 4, 1: 5}
    assert every_k_query_lens(vllm_lens, 5, 4, 256) == {1: 256, 2: 256, 3: 256, 4: 256, 5: 256}
    # two new tokens a step (a model state that samples more than one)
    assert every_k_query_lens({}, 6, 4, 8) == {k + 2: 8 for k in range(5)}
    # k_max past max_num_seqs: vLLM's table would miss k's; this one has them all
    assert sorted(every_k_query_lens({8: 1, 7: 2}, 8, 7, 2)) == list(range(1, 9))
    # a query length with no drafts keeps vLLM's answer
    assert every_k_query_lens({3: 64}, 3, 3, 64) == {3: 64}


class _Spec:
    def __init__(self, dynamic: bool) -> None:
        self.dynamic = dynamic

    def use_gemma4_mtp(self) -> bool:
        return True

    def uses_dynamic_speculative_decoding(self) -> bool:
        return self.dynamic


class _VllmConfig:
    """The names 0.34's ``VllmConfig.get_decode_cudagraph_query_lens`` and the wrap read."""

    def __init__(self, options: dict[str, Any] | None, k_max: int = 3, seqs: int = 16) -> None:
        self.additional_config = {} if options is None else {ADDITIONAL_CONFIG_KEY: options}
        self.speculative_config = _Spec(dynamic=True)
        self.num_speculative_tokens = k_max
        self.scheduler_config = SimpleNamespace(max_num_seqs=seqs)

    def get_decode_cudagraph_query_lens(self, decode_query_len: int) -> dict[int, int]:
        # the stand-in schedule's answer: k at batch size k_max + 1 - k
        k_max = self.num_speculative_tokens
        return {k + 1: k_max + 1 - k for k in range(k_max + 1)}


def test_the_0_34_wrap_acts_under_auto_only() -> None:
    from vllm_frozen_kv_mtp.patches.graph_candidates import _patch_decode_query_lens

    class Config(_VllmConfig):
        pass

    _patch_decode_query_lens(SimpleNamespace(VllmConfig=Config))
    _patch_decode_query_lens(SimpleNamespace(VllmConfig=Config))  # applied once
    auto = {"k_policy": "auto", "max_num_speculative_tokens": 3}
    assert Config(auto).get_decode_cudagraph_query_lens(4) == {1: 16, 2: 16, 3: 16, 4: 16}
    stand_in = {4: 1, 3: 2, 2: 3, 1: 4}
    assert Config({"k_policy": "static"}).get_decode_cudagraph_query_lens(4) == stand_in
    assert Config(None).get_decode_cudagraph_query_lens(4) == stand_in  # not our engine


def test_the_registry_is_per_vllm_release() -> None:
    from vllm_frozen_kv_mtp import patches

    def numbers(version: str) -> set[str]:
        return {p.number for p in patches.patches_for(version)}

    everywhere = {"1", "5", "8", "9", "10"}
    assert numbers("0.32.0") == numbers("0.33.1") == everywhere | {"2", "3", "4", "4b", "6", "7"}
    # 0.34: no V1 runner (2, 4, 4b), and 6's candidates are dead there; 6b replaces it;
    # the registered method's config names the speculator (hook 1), not patch 3; the
    # sampler reaches the speculator through prepare_propose (hook 2), not patch 7
    assert numbers("0.34.0") == numbers("0.34.1.dev2+gabc") == everywhere | {"6b"}
    six_b = next(p for p in patches.PATCHES if p.number == "6b")
    assert six_b.target == "vllm.config.vllm.VllmConfig.get_decode_cudagraph_query_lens"
    assert "vLLM >= 0.34" in patches.describe(six_b)
    six = next(p for p in patches.PATCHES if p.number == "6")
    assert "vLLM < 0.34" in patches.describe(six)


def test_apply_all_schedules_the_release_s_patches_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm_frozen_kv_mtp import patches

    scheduled: list[str] = []
    monkeypatch.setattr(patches, "_applied", set())
    monkeypatch.setattr(patches, "when_imported", lambda module, _: scheduled.append(module))
    patches.apply_all("0.34.0")
    assert "vllm.config.vllm" in scheduled
    assert "vllm.v1.spec_decode.gemma4" not in scheduled  # patch 2: V1 runner
    assert "vllm.v1.sample.rejection_sampler" not in scheduled  # patches 4, 4b
    assert "vllm.v1.worker.gpu.cudagraph_utils" not in scheduled  # patch 6
    assert "vllm.v1.worker.gpu.model_runner" not in scheduled  # patch 7: hook 2
    assert "vllm.v1.worker.gpu.spec_decode.gemma4.speculator" not in scheduled  # 3: hook 1
