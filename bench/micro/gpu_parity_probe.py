"""One-off GPU probe: which prompts differ from no speculation, for mtp and frozen_kv_mtp.

python -m bench.micro.gpu_parity_probe     # from the repository root (imports tests/)
"""

import os

if __name__ == "__main__":
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # before vLLM is imported
    import vllm_frozen_kv_mtp

    vllm_frozen_kv_mtp.register()
    from vllm import SamplingParams

    from tests.utils.engine import PROMPTS, engine, outputs

    t, a = "models/tiny-gemma4-fp32", "models/tiny-gemma4-fp32-assistant"
    kw = dict(
        enforce_eager=False,
        kv_cache_memory_bytes=64 << 20,
        compilation_config={"mode": 0, "cudagraph_mode": "FULL_AND_PIECEWISE"},
    )
    sp = SamplingParams(temperature=0.0, max_tokens=48)
    res = {}
    for m in ("none", "mtp", "frozen_kv_mtp"):
        spec = None if m == "none" else {"method": m, "model": a, "num_speculative_tokens": 3}
        with engine(t, spec, **kw) as llm:
            res[m] = outputs(llm.generate(PROMPTS, sp, use_tqdm=False))
    for m in ("mtp", "frozen_kv_mtp"):
        diff = [i for i, (x, y) in enumerate(zip(res[m], res["none"], strict=True)) if x != y]
        print("PROBE", m, "differs from none at prompts", diff)
    same = [
        i for i, (x, y) in enumerate(zip(res["mtp"], res["frozen_kv_mtp"], strict=True)) if x != y
    ]
    print("PROBE mtp vs frozen differ at", same)
