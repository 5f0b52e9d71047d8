#!/usr/bin/env bash
# Build upload parts that add FlashAttention 4 (vLLM's CuTe-DSL attention, "FA4") to a slim vLLM
# bundle unpacked into /tmp/site on an offline GPU host. Runs on a CPU machine with PyPI access
# (needs pip for CPython 3.12, unzip, xz, split, sha256sum).
#
#   VLLM_VER=0.33.0 PY312=python3.12 tools/offline_gpu/prep_fa4.sh OUT_DIR
#
# Writes OUT_DIR/fa4a, OUT_DIR/fa4b, ... : each holds one chunk of fa4.tar.xz (xz -9), the manifest
# and the host scripts (host/*). Each folder stays under PART_MAX_MIB (default 50 MiB), leaving room
# for other small files in a 64 MiB upload. What the tarball holds:
#   core/      unpacked into /tmp/site as is: vllm/vllm_flash_attn/cute (from the vLLM wheel) and
#              the packages FA4 imports, at the versions vLLM pins: nvidia-cutlass-dsl (+ its libs,
#              one CUDA flavor only), quack-kernels, apache-tvm-ffi, torch-c-dlpack-ext
#   fallback/  one folder per generic dependency (cuda-bindings, protobuf, ...); the host installs
#              one only where the image or the bundle lacks a version that satisfies the pins
# Settings (environment): VLLM_VER (0.33.0), PY312 (python3.12), CUTE_FLAVOR (cu13: the
# nvidia-cutlass-dsl-libs flavor for the host's CUDA driver major), TORCH_VER / TRITON_VER (the host
# image's versions, 2.11.0 / 3.6.0: only resolved as metadata stubs, never packed), PART_MAX_MIB (50),
# WORK (/tmp/fa4-prep).
set -euo pipefail
VLLM_VER=${VLLM_VER:-0.33.0}
PY=${PY312:-python3.12}
FLAVOR=${CUTE_FLAVOR:-cu13}
TORCH_VER=${TORCH_VER:-2.11.0}
TRITON_VER=${TRITON_VER:-3.6.0}
PART_MAX_MIB=${PART_MAX_MIB:-50}
W=${WORK:-/tmp/fa4-prep}
OUT=$(realpath -m "${1:?usage: prep_fa4.sh OUT_DIR}")
HERE=$(cd "$(dirname "$0")" && pwd)

PLAT=(--only-binary=:all: --python-version 3.12 --implementation cp)  # wheel tags in priority order
for n in 35 34 31 28 27 24 17; do PLAT+=(--platform "manylinux_2_${n}_x86_64"); done
PLAT+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any)

rm -rf "$W/deps" "$W/stubs" "$W/pack" "$W/fa4.tar.xz"
mkdir -p "$W/whl" "$W/deps" "$W/stubs" "$W/pack/core" "$W/pack/fallback"

# 1. vLLM wheel: the FA4 sources and the pins in its METADATA.
ls "$W"/whl/vllm-"$VLLM_VER"-*.whl >/dev/null 2>&1 ||
  "$PY" -m pip download -q --no-deps "${PLAT[@]}" -d "$W/whl" "vllm==$VLLM_VER"
WHL=$(ls "$W"/whl/vllm-"$VLLM_VER"-*.whl)
unzip -q "$WHL" 'vllm/vllm_flash_attn/cute/*' -d "$W/pack/core"
test -f "$W/pack/core/vllm/vllm_flash_attn/cute/interface.py" || { echo "no FA4 sources in $WHL"; exit 1; }
unzip -p "$WHL" '*.dist-info/METADATA' | sed -n 's/^Requires-Dist: //p' | grep -v 'extra ==' |
  grep -iE '^(nvidia-cutlass-dsl|quack-kernels|apache-tvm-ffi)[=<>!\[; ]' > "$W/pins.txt" || true
grep -qi '^nvidia-cutlass-dsl' "$W/pins.txt" || { echo "vLLM $VLLM_VER does not pin nvidia-cutlass-dsl"; exit 1; }
# The CUDA flavor goes through the extra: nvidia-cutlass-dsl[cu13]==X
sed -i -E "s/^(nvidia-cutlass-dsl)(\[[^]]*\])?/\1[$FLAVOR]/I" "$W/pins.txt"
echo "FA4 pins of vLLM $VLLM_VER:"; sed 's/^/  /' "$W/pins.txt"

# 2. Resolve them for CPython 3.12 with torch/triton as metadata-only stubs (the image has them).
"$PY" "$HERE/stub_wheels.py" "$W/stubs" "torch:$TORCH_VER" "triton:$TRITON_VER"
"$PY" -m pip download -q "${PLAT[@]}" --find-links "$W/stubs" -d "$W/deps" -r "$W/pins.txt" \
  "torch==$TORCH_VER" "triton==$TRITON_VER"

# 3. Sort the wheels: core (FA4's own stack) and fallback (generic deps). torch/triton stubs and the
#    libs of other CUDA flavors are dropped (the DSL loads the newest flavor the driver supports).
norm() { basename "$1" | sed -E 's/^([A-Za-z0-9_.]+)-[0-9].*/\1/' | tr 'A-Z_.' 'a-z--'; }
CORE=(); FALLBACK=()
for f in "$W"/deps/*.whl; do
  n=$(norm "$f")
  case "$n" in
    torch|triton) ;;
    nvidia-cutlass-dsl-libs-cu*) [ "$n" = "nvidia-cutlass-dsl-libs-$FLAVOR" ] && CORE+=("$f") ;;
    nvidia-cutlass-dsl*|quack-kernels|apache-tvm-ffi|torch-c-dlpack-ext) CORE+=("$f") ;;
    *) FALLBACK+=("$f") ;;
  esac
done
"$PY" -m pip install -q --no-deps --no-compile --target "$W/pack/core" "${CORE[@]}"
for f in "${FALLBACK[@]}"; do
  "$PY" -m pip install -q --no-deps --no-compile --target "$W/pack/fallback/$(norm "$f")" "$f"
done
rm -rf "$W/pack/core/bin" "$W"/pack/fallback/*/bin
# The .pth that puts nvidia_cutlass_dsl/dsl_packages on sys.path only works in a site directory,
# not in a PYTHONPATH entry such as /tmp/site: the host's env_fa4.sh adds that path instead.

# 4. fallback.txt: "<name> <requirement>" with the specifiers every packed dist puts on it.
"$PY" - "$W/pack" <<'EOF'
import glob, os, re, sys
from email.parser import Parser
from pip._vendor.packaging.requirements import Requirement
from pip._vendor.packaging.specifiers import SpecifierSet
from pip._vendor.packaging.utils import canonicalize_name
pack = sys.argv[1]
fallback = sorted(os.listdir(f"{pack}/fallback"))
specs = {n: SpecifierSet() for n in fallback}
env = {"python_version": "3.12", "python_full_version": "3.12.0", "sys_platform": "linux",
       "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
       "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}
for meta in glob.glob(f"{pack}/core/*.dist-info/METADATA") + glob.glob(f"{pack}/fallback/*/*.dist-info/METADATA"):
    for line in Parser().parse(open(meta, encoding="utf-8")).get_all("Requires-Dist") or []:
        r = Requirement(line)
        if r.marker is not None and not r.marker.evaluate(env):
            continue
        n = canonicalize_name(r.name)
        if n in specs:
            specs[n] &= r.specifier
with open(f"{pack}/fallback.txt", "w") as f:
    for n in fallback:
        f.write(f"{n} {n}{specs[n]}\n")
EOF
CORE_DISTS=("$W"/pack/core/*.dist-info); CORE_DISTS=("${CORE_DISTS[@]##*/}")
echo "core: ${CORE_DISTS[*]%.dist-info}"
echo "fallback (host installs only where missing):"; sed 's/^/  /' "$W/pack/fallback.txt"

# 5. Pack, split into equal chunks of at most PART_MAX_MIB, one per part folder.
tar -C "$W/pack" -cf - core fallback fallback.txt | xz -9 -T0 > "$W/fa4.tar.xz"
. "$HERE/split_parts.sh"
split_parts "$W/fa4.tar.xz" "$OUT" fa4 "$HERE/host" fa4.manifest FA4 VLLM_VER "$VLLM_VER"
