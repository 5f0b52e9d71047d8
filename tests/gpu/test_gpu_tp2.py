"""frozen_kv_mtp with tensor parallelism 2 (two GPUs of one host), Model Runner V2.

Workers are separate processes here, so the plugin must load through its entry
point there (pip install, or a ``.dist-info`` on PYTHONPATH: tools/remote_gpu_session.sh
writes one); the drafter class is read back from each worker.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch

from devkit.instrument import acceptance, worker_drafter_info
from tests.gpu import GRAPH_KW
from tests.utils.engine import clear_margin_case, engine, outputs, spec_metrics

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 GPUs"
    ),
]

KW: dict[str, Any] = {**GRAPH_KW, "tensor_parallel_size": 2}


@pytest.mark.parametrize("variant", ["fp32-oracle", "trained"])
def test_tp2_greedy_identical(variant: str) -> None:
    from vllm import SamplingParams

    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")  # collective_rpc(fn)
    target, assistant, prompts, extra = clear_margin_case(variant)
    kw = {**KW, **extra}
    params = SamplingParams(temperature=0.0, max_tokens=48)
    with engine(target, **kw) as llm:
        expected = outputs(llm.generate(prompts, params, use_tqdm=False))
    spec = {"method": "frozen_kv_mtp", "model": assistant, "num_speculative_tokens": 3}
    with engine(target, spec, **kw) as llm:
        assert llm.llm_engine.vllm_config.scheduler_config.async_scheduling
        got = outputs(llm.generate(prompts, params, use_tqdm=False))
        info = llm.collective_rpc(worker_drafter_info)
        m = spec_metrics(llm)
    print(f"tp2 {variant}: workers {info}, {acceptance(m)}")
    assert [i["cls"] for i in info] == ["FrozenKVMTPSpeculator"] * 2
    assert all(i["stats"]["rounds"] > 0 for i in info)
    assert all("seed_rows" not in i["kernel_fallbacks"] for i in info), info
    assert m["num_drafts"] > 0
    assert got == expected
    if variant == "fp32-oracle":
        assert m["num_accepted_tokens"] == m["num_draft_tokens"]
