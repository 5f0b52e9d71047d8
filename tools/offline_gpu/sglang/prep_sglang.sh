#!/usr/bin/env bash
# Build upload parts that bring SGLang (offline Engine, FROZEN_KV_MTP, triton attention) to an
# offline Hopper host whose image has CPython 3.12, torch 2.11.0+cu130 and triton 3.6.0, next
# to (not inside) a vLLM bundle in /tmp/site. Runs on a CPU machine with PyPI access (needs pip
# for CPython 3.12, unzip, xz, split, sha256sum, gcc; nvcc 13 for the JIT kernels).
#
#   PY312=python3.12 tools/offline_gpu/sglang/prep_sglang.sh OUT_DIR        (from the project root)
#
# Writes OUT_DIR/sgla, OUT_DIR/sglb, ...: each holds one chunk of sglsite.tar.xz, the manifest and
# the host scripts (host/*), and stays under PART_MAX_MIB. The archive unpacks to /tmp/sglsite:
#   sglang 0.5.17 (the cp312 wheel, unpacked; three optional Rust/gRPC extensions dropped, one
#     import patched), sglang-kernel 0.4.5 (sm90 library only; kept off FlashInfer's kernels),
#     flashinfer-python (Python only),
#     transformers 5.12.1 (SGLang's pin; the image's 5.17 stays for vLLM) and every other
#     dependency the engine imports that the image lacks;
#   jit/: SGLang's JIT CUDA kernels prebuilt for sm_90a (prebuild_jit.py), if nvcc is here.
# Steps 4-5 check the bundle on this machine (prebuild_jit.py, then preflight.py, which starts
# every planned engine's scheduler on a faked H100) with the host's torch.
# Settings (environment): PY312, SGLANG_VER (0.5.17), KERNEL_VER (0.4.5), FLASHINFER_VER
# (0.6.15.post1), TORCH_VER / TRITON_VER / TORCHVISION_VER / TORCHAUDIO_VER (the image's; only
# resolved as metadata stubs, never packed), TORCH_PY (a Python 3.12 with torch==TORCH_VER for
# steps 4-5; default: a venv built in WORK), PREFLIGHT (1), JIT (auto: 1 where nvcc runs),
# JOBS (nproc), PART_MAX_MIB (50), WORK (/tmp/sglang-prep).
set -euo pipefail
PY=${PY312:-python3.12}
SGLANG_VER=${SGLANG_VER:-0.5.17}
KERNEL_VER=${KERNEL_VER:-0.4.5}
FLASHINFER_VER=${FLASHINFER_VER:-0.6.15.post1}
TORCH_VER=${TORCH_VER:-2.11.0}
TRITON_VER=${TRITON_VER:-3.6.0}
TORCHVISION_VER=${TORCHVISION_VER:-0.26.0}
TORCHAUDIO_VER=${TORCHAUDIO_VER:-2.11.0}
PART_MAX_MIB=${PART_MAX_MIB:-50}
PREFLIGHT=${PREFLIGHT:-1}
JOBS=${JOBS:-$(nproc)}
W=${WORK:-/tmp/sglang-prep}
OUT=$(realpath -m "${1:?usage: prep_sglang.sh OUT_DIR}")
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
IMAGE=${IMAGE_PACKAGES:-$HERE/image-packages.txt}

PLAT=(--only-binary=:all: --python-version 3.12 --implementation cp)  # wheel tags in priority order
for n in 35 34 31 28 27 24 17; do PLAT+=(--platform "manylinux_2_${n}_x86_64"); done
PLAT+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any)
norm() { basename "$1" | sed -E 's/^([A-Za-z0-9_.]+)-[0-9].*/\1/' | tr 'A-Z_.' 'a-z--'; }

rm -rf "$W/deps" "$W/stubs" "$W/site" "$W/pack" "$W/sglsite.tar.xz"
mkdir -p "$W/whl" "$W/deps" "$W/stubs" "$W/site" "$W/pack"

# 1. SGLang, its kernel wheel and FlashInfer, without dependencies.
for req in "sglang==$SGLANG_VER" "sglang-kernel==$KERNEL_VER" "flashinfer-python==$FLASHINFER_VER"; do
  "$PY" -m pip download -q --no-deps "${PLAT[@]}" -d "$W/whl" "$req" 2>&1 | { grep -v '^WARNING: Location' || true; }
done
SGL_WHL=$(ls "$W"/whl/sglang-"$SGLANG_VER"-cp312-*.whl)
KERNEL_WHL=$(ls "$W"/whl/sglang_kernel-"$KERNEL_VER"-*.whl)
FI_WHL=$(ls "$W"/whl/flashinfer_python-"$FLASHINFER_VER"-*.whl)

# 2. What the engine imports, at SGLang's pins, resolved for CPython 3.12 with the image's
#    torch/triton/torchvision/torchaudio as metadata-only stubs. Left out: GPU extras the
#    Gemma 4 + triton path does not import (flash-attn-4, cutlass-dsl, deep-gemm, tilelang,
#    ...), frontends and tools (anthropic, datasets, outlines, modelscope, IPython, ...).
#    dill comes to SGLang through datasets; sglang.srt.sampling imports it.
KEEP='fastapi|uvicorn|pydantic|msgspec|pyzmq|orjson|pybase64|setproctitle|partial_json_parser|gguf|compressed-tensors|openai|xgrammar|python-multipart|transformers|apache-tvm-ffi|distro'
unzip -p "$SGL_WHL" '*.dist-info/METADATA' | sed -n 's/^Requires-Dist: //p' | grep -v 'extra ==' |
  grep -iE "^($KEEP)[=<>!\[; ]|^($KEEP)\$" > "$W/reqs.txt"
grep -qi '^transformers==' "$W/reqs.txt" || { echo "sglang $SGLANG_VER does not pin transformers"; exit 1; }
"$PY" "$HERE/../stub_wheels.py" "$W/stubs" "torch:$TORCH_VER" "triton:$TRITON_VER" \
  "torchvision:$TORCHVISION_VER" "torchaudio:$TORCHAUDIO_VER"
printf '%s\n' dill "torch==$TORCH_VER" "triton==$TRITON_VER" huggingface_hub==1.33.0 safetensors==0.8.0 >> "$W/reqs.txt"
echo "requirements:"; sed 's/^/  /' "$W/reqs.txt"
"$PY" -m pip download -q "${PLAT[@]}" --find-links "$W/stubs" -d "$W/deps" -r "$W/reqs.txt" 2>&1 |
  { grep -v '^WARNING: Location' || true; }
# transformers and its tokenizers go in even though the image has them: SGLang pins 5.12.1,
# which wants tokenizers <= 0.23.0; /tmp/sglsite comes first on PYTHONPATH for SGLang only.
WHEELS=()
for f in "$W"/deps/*.whl; do
  n=$(norm "$f")
  case "$n" in torch|triton|torchvision|torchaudio) continue ;; transformers|tokenizers) WHEELS+=("$f"); continue ;; esac
  grep -qixF "$n" "$IMAGE" || WHEELS+=("$f")
done
echo "packed dependencies (not in the image, or pinned apart from it):"
for f in "${WHEELS[@]}"; do echo "  $(basename "$f")"; done
"$PY" -m pip install -q --no-deps --no-compile --target "$W/site" "${WHEELS[@]}" 2>&1 | { grep -v '^WARNING: Location' || true; }
unzip -q "$SGL_WHL" -d "$W/site"
unzip -q "$KERNEL_WHL" -d "$W/site"
unzip -q "$FI_WHL" 'flashinfer/*' 'flashinfer_python-*.dist-info/*' -d "$W/site"

# 3. Slim and patch (README.md says why).
S=$W/site
rm -rf "$S/bin" \
  "$S"/sgl_kernel/flash_ops.abi3.so "$S"/sgl_kernel/sm100 "$S"/sgl_kernel/flashmla_ops.abi3.so \
  "$S"/sgl_kernel/infllm_ops.*.so \
  "$S"/flashinfer/data \
  "$S"/xgrammar/lib "$S"/xgrammar/include \
  "$S"/sglang/srt/grpc/_core.*.so "$S"/sglang/srt/multimodal/_core.*.so "$S"/sglang/srt/server/_core.*.so
test -f "$S/sgl_kernel/sm90/common_ops.abi3.so" || { echo "no sm90/common_ops in $KERNEL_WHL"; exit 1; }
"$PY" - "$S/sglang/utils.py" <<'EOF'
import sys
p = sys.argv[1]; s = open(p).read()
old = "from IPython.display import HTML, display\n"
assert s.count(old) == 1, "sglang/utils.py: IPython import not found"
s = s.replace(old, "try:  # offline recipe: IPython is not bundled; only notebook helpers use it\n"
                   "    from IPython.display import HTML, display\nexcept ImportError:\n"
                   "    HTML = display = None\n")
open(p, "w").write(s)
EOF
# sgl_kernel sends its norms (and top-k/top-p renorm) to FlashInfer's JIT kernels whenever
# flashinfer imports; their sources (flashinfer/data) are not packed, so it keeps to its own.
for f in "$S/sgl_kernel/elementwise.py" "$S/sgl_kernel/sampling.py"; do
  "$PY" - "$f" <<'EOF'
import sys
p = sys.argv[1]; s = open(p).read()
old = "    _has_flashinfer = True\n"
assert s.count(old) == 1, f"{p}: FlashInfer switch not found"
open(p, "w").write(s.replace(old, "    _has_flashinfer = False  # offline recipe: FlashInfer's kernel sources are not packed\n"))
EOF
done
echo "site: $(du -sh "$S" | cut -f1) unpacked"

# 4-5. Checks with the host's torch on this CPU machine (the JIT kernels' build, then
#      preflight.py): a stub libcuda.so.1 (the driver symbols sgl_kernel references) lets its
#      sm90 library load; fake_hopper.py reports an sm_90 GPU.
if [ "$PREFLIGHT" != 0 ]; then
  if [ -z "${TORCH_PY:-}" ]; then
    test -x "$W/venv/bin/python" || "$PY" -m venv "$W/venv"
    "$W/venv/bin/pip" install -q "torch==$TORCH_VER" "torchvision==$TORCHVISION_VER" numpy pillow requests \
      psutil tqdm pyyaml regex sentencepiece aiohttp einops packaging filelock huggingface_hub==1.33.0 \
      safetensors==0.8.0 uvloop prometheus-client tiktoken nvidia-ml-py ninja tabulate scipy xxhash typer \
      rich click jinja2 anyio httpx 2>&1 | { grep -v '^WARNING: Location' || true; }
    TORCH_PY=$W/venv/bin/python
  fi
  mkdir -p "$W/stubcuda"
  for so in "$S"/sgl_kernel/sm90/common_ops.abi3.so "$S"/sgl_kernel/spatial_ops.abi3.so; do
    nm -D --undefined-only "$so" | awk '{print $2}' | sed 's/@.*//' | grep -E '^cu[A-Z]' || true
  done | sort -u | sed 's/.*/int &(void){return 999;}/' > "$W/stubcuda/stub.c"
  gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$W/stubcuda/libcuda.so.1" "$W/stubcuda/stub.c"
  NVLIB=$("$TORCH_PY" -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))')
  # SGLANG_IS_FLASHINFER_AVAILABLE: as env_sglang.sh sets it on the host
  run_cpu() { (cd "$W" && SGLANG_IS_FLASHINFER_AVAILABLE=false LD_LIBRARY_PATH="$W/stubcuda:$NVLIB" PYTHONPATH="$S:$REPO" HF_HUB_OFFLINE=1 "$TORCH_PY" "$@"); }
  JIT=${JIT:-auto}
  # a CUDA toolkit root (bin/nvcc and include/cuda_runtime.h): tvm-ffi builds with $CUDA_HOME
  NVCC=$(command -v nvcc || true)
  for d in "${CUDA_HOME:-}" /usr/local/cuda "${NVCC:+$(dirname "$(dirname "$NVCC")")}"; do
    if [ -n "$d" ] && [ -x "$d/bin/nvcc" ] && [ -f "$d/include/cuda_runtime.h" ]; then export CUDA_HOME=$d; break; fi
  done
  if [ "$JIT" = auto ]; then [ -n "${CUDA_HOME:-}" ] && [ -x "$CUDA_HOME/bin/nvcc" ] && JIT=1 || JIT=0; fi
  if [ "$JIT" = 1 ]; then
    echo "JIT kernels for sm_90a with $("$CUDA_HOME/bin/nvcc" --version | tail -1)"
    # $W/jit.build is kept between runs: a module's folder name holds its arguments and a
    # hash of its sources, so an unchanged module is not built again.
    rm -rf "$W/jit"
    TVM_FFI_CACHE_DIR="$W/jit.build" run_cpu "$HERE/prebuild_jit.py" "$W/jit" --jobs "$JOBS"
    mkdir -p "$W/pack/jit" && cp -a "$W"/jit/. "$W/pack/jit/"
  else
    echo "no nvcc here: JIT kernels not prebuilt (the host compiles them, if it has nvcc)"
  fi
  # with the prebuilt kernels: every one an engine start asks for must be among them
  run_cpu "$HERE/preflight.py" --shapes "$W/shapes" $([ "$JIT" = 1 ] && echo --jit "$W/jit")
fi

# 6. Pack, split into equal chunks of at most PART_MAX_MIB, one per part folder.
mv "$S" "$W/pack/sglsite"
(cd "$W/pack" && tar -cf - sglsite $(test -d jit && echo jit)) | xz -9 -T"$JOBS" > "$W/sglsite.tar.xz"
mv "$W/pack/sglsite" "$S"
. "$HERE/../split_parts.sh"
split_parts "$W/sglsite.tar.xz" "$OUT" sgl "$HERE/host" sgl.manifest SGL VERSION "$SGLANG_VER"
