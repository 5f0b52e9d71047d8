#!/usr/bin/env bash
# Build the upload pieces that run vLLM (its CUDA wheel) on an offline GPU host whose image has
# Python 3.12, torch 2.11.0+cu130, triton 3.6.0 and transformers 5.17.0, and takes uploads of at
# most 64 MiB. vLLM's kernels use only libtorch's stable ABI, so 0.32, 0.33 and 0.34 load on the
# image's torch although their wheels pin newer ones. Runs on a CPU machine with PyPI access:
#   VLLM_VER=0.33.0 PY312=python3.12 tools/offline_gpu/vllm/prep_vllm.sh .gpu   (needs pip, unzip, xz)
# Writes OUT_DIR/part1/vllm-C.tar.xz   (_C_stable_libtorch.abi3.so alone; over 54 MiB it is split
#                                        into part1 and part1b, as for 0.33 and 0.34)
#        OUT_DIR/part2/site.tar.xz     (the rest of a slim vLLM and the dependencies the image lacks)
#        OUT_DIR/part3/vllm-moe.tar.xz (the MoE kernels; only MoE targets such as 26B-A4B need it)
# The host scripts (host/*.sh) are copied into every part; on the host, in consecutive calls:
#   bash .gpu/part1/setup1.sh; [bash .gpu/part1b/setup1b.sh;] bash .gpu/part2/setup2.sh
# and everything unpacks into /tmp/site. What is left out, and why: FA2/FA3 (Gemma 4 runs on
# TRITON_ATTN here; tools/offline_gpu/README.md adds FA4 back), the Rust front end, DeepGEMM and
# the SM100 kernels; vllm_flash_attn/__init__.py is patched not to raise without FA2/FA3.
set -euo pipefail
VLLM_VER=${VLLM_VER:-0.32.0}
PY=${PY312:-python3.12}
# The image's transformers 5.17.0 (with tokenizers 0.23.2, huggingface_hub 1.33.0) serves vLLM 0.32
# and 0.33. vLLM 0.34 needs tokenizers>=0.23.3 and huggingface_hub>=2.0, which transformers 5.17
# refuses (hub<2.0): from 0.34 on, the newest transformers vLLM admits comes in the bundle with
# both, shadowing the image's copies from /tmp/site.
case "$VLLM_VER" in
  0.32.* | 0.33.*) HUB_PINS="transformers==5.17.0 tokenizers==0.23.2 huggingface_hub==1.33.0"; FORCE="" ;;
  *) HUB_PINS="transformers<5.23 tokenizers>=0.23.3 huggingface_hub>=2.0"; FORCE="transformers tokenizers huggingface-hub" ;;
esac
OUT=$(realpath -m "${1:-.gpu}")
HERE=$(cd "$(dirname "$0")" && pwd)
IMAGE_PACKAGES=$HERE/../sglang/image-packages.txt
W=/tmp/gpu-prep
PLAT="--only-binary=:all: --python-version 3.12 --implementation cp"  # tags in priority order: the
for n in 35 34 31 28 27 24 17; do PLAT="$PLAT --platform manylinux_2_${n}_x86_64"; done  # 2_35 stubs win
PLAT="$PLAT --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any"
rm -rf "$W/slim" "$W/site" "$W/deps" "$W/stubs"; mkdir -p "$W/whl" "$W/deps" "$W/stubs" "$W/slim" "$W/site"

# 1. vLLM wheel -> slim tree. Dropped: FA2/FA3 kernels (~480 MB; Gemma 4 runs on TRITON_ATTN), FA4 CuTe
#    sources (need nvidia-cutlass-dsl, not carried), the Rust frontend, the MoE kernels (optional import)
#    and DeepGEMM/fmha_sm100 (unstable-ABI .so / SM100 only).
$PY -m pip download -q --no-deps $PLAT -d "$W/whl" "vllm==$VLLM_VER"
unzip -q "$W"/whl/vllm-"$VLLM_VER"-*.whl -d "$W/slim"
rm -rf "$W/moe"; mkdir -p "$W/moe/vllm"
mv "$W/slim/vllm/_moe_C_stable_libtorch.abi3.so" "$W/moe/vllm/"   # part3
(cd "$W/slim/vllm" && rm -rf vllm_flash_attn/_vllm_fa2_C.abi3.so vllm_flash_attn/_vllm_fa3_C.abi3.so \
  vllm_flash_attn/cute vllm-rs third_party/deep_gemm third_party/fmha_sm100)
# vllm_flash_attn/__init__ raises ImportError without FA2/FA3, and the Gemma 4 config check imports it.
$PY - "$W/slim/vllm/vllm_flash_attn/__init__.py" <<'EOF'
import sys
p = sys.argv[1]; s = open(p).read()
old = "if not (FA2_AVAILABLE or FA3_AVAILABLE):\n    raise ImportError("
assert old in s, "vllm_flash_attn patch point not found"
open(p, "w").write(s.replace(old, "if False:  # gpu-recipe: FA2/FA3 dropped\n    raise ImportError("))
EOF
# From 0.34 on, every CUDA engine's kernel warmup imports the MiniMax M3 MSA warmup, whose kernels
# import the CuTe DSL (nvidia-cutlass-dsl, quack-kernels), which the bundle leaves out: that import is
# made to depend on the DSL being there (the warmup itself returns at once for any other model).
KW="$W/slim/vllm/model_executor/warmup/kernel_warmup.py"
if grep -q "minimax_m3_msa_warmup import" "$KW"; then
  $PY - "$KW" <<'EOF'
import sys
p = sys.argv[1]; s = open(p).read()
old = "    if current_platform.is_cuda():\n        # The MSA kernels, and the CuTe DSL"
assert s.count(old) == 1, "kernel_warmup MSA patch point not found"
new = ("    if current_platform.is_cuda() and __import__(\"importlib.util\").util.find_spec(\"cutlass\"):"
       "  # gpu-recipe: no CuTe DSL\n        # The MSA kernels, and the CuTe DSL")
open(p, "w").write(s.replace(old, new))
EOF
fi

# 2. Runtime deps for Python 3.12 minus what the image has. torch/triton resolve to metadata-only stubs;
#    GPU extras (flashinfer, cutlass-dsl, tilelang, ...) are left out; image versions pinned.
$PY "$HERE/../stub_wheels.py" "$W/stubs" torch:2.11.0 triton:3.6.0
SKIP='torch|torchaudio|torchvision|torchcodec|PyNvVideoCodec|flashinfer-python|apache-tvm-ffi|tilelang|nvidia-cudnn-frontend|nvtx|fastsafetensors|instanttensor|nvidia-cutlass-dsl|quack-kernels|tokenspeed-mla|humming-kernels|numba|transformers'
{ unzip -p "$W"/whl/vllm-"$VLLM_VER"-*.whl '*/METADATA' | sed -n 's/^Requires-Dist: //p' | grep -v 'extra ==' \
    | grep -viE "^($SKIP)[=<>!\[; ]"
  printf '%s\n' $HUB_PINS safetensors==0.8.0 torch==2.11.0 triton==3.6.0; } > "$W/reqs.txt"
$PY -m pip download -q $PLAT --find-links "$W/stubs" -d "$W/deps" -r "$W/reqs.txt"
norm() { sed -E 's/^([A-Za-z0-9_.]+)-[0-9].*/\1/' | tr 'A-Z_.' 'a-z--'; }
for f in "$W"/deps/*.whl; do
  n=$(basename "$f" | norm)
  case " $FORCE " in *" $n "*) echo "$f"; continue ;; esac
  grep -qixF "$n" "$IMAGE_PACKAGES" || echo "$f"
done > "$W/missing.txt"
echo "deps missing from the image: $(wc -l < "$W/missing.txt")"
$PY -m pip install -q --no-deps --no-compile --target "$W/site" $(cat "$W/missing.txt")

# 3. Pack.
mv "$W/slim/vllm/_C_stable_libtorch.abi3.so" "$W/_C_stable_libtorch.abi3.so"
cp -a "$W/slim/vllm" "$W"/slim/vllm-*.dist-info "$W/site/"
mkdir -p "$OUT/part1" "$OUT/part2" "$OUT/part3" "$W/c/vllm"
mv "$W/_C_stable_libtorch.abi3.so" "$W/c/vllm/"
tar -C "$W/c" -cf - vllm | xz -9 -T0 > "$OUT/part1/vllm-C.tar.xz"
# A part must leave room for the project's own files in the same 64 MiB upload: over 54 MiB (vLLM 0.33), part1
# is split in two (part1 then part1b; setup1.sh keeps the first half on the host until setup1b.sh).
if [ "$(stat -c %s "$OUT/part1/vllm-C.tar.xz")" -gt 56623104 ]; then
  mkdir -p "$OUT/part1b"
  split -b 32M -d -a 1 "$OUT/part1/vllm-C.tar.xz" "$OUT/part1/vllm-C.tar.xz.split-"
  rm "$OUT/part1/vllm-C.tar.xz"; mv "$OUT/part1/vllm-C.tar.xz.split-1" "$OUT/part1b/"
fi
tar -C "$W/site" -cf - . | xz -9 -T0 > "$OUT/part2/site.tar.xz"
tar -C "$W/moe" -cf - vllm | xz -9 -T0 > "$OUT/part3/vllm-moe.tar.xz"
ls -l "$OUT"/part*
for p in "$OUT"/part*; do cp "$HERE"/host/*.sh "$p/"; done
