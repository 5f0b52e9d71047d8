#!/usr/bin/env bash
# GPU host: install SGLang into /tmp/sglsite (and its prebuilt JIT kernels into /tmp/sgl-jit). Every
# part (sgla, sglb, ...) carries this script; upload the parts one after another and run
# `bash <part>/setup_sglang.sh` after each. Each run keeps its chunk in /tmp/sgl-chunks; the run
# that completes the set joins and checks the archive, unpacks it, and runs check_sglang.py
# (SGL_SMOKE=0 skips its two small kernel runs). Independent of the vLLM bundle in /tmp/site.
# Exit 2: a chunk is missing or corrupt (rm -rf /tmp/sgl-chunks and upload every part again).
set -uo pipefail
D=$(cd "$(dirname "$0")" && pwd)
SGLSITE=${SGLSITE:-/tmp/sglsite}
STASH=${SGL_STASH:-/tmp/sgl-chunks}
# shellcheck source=/dev/null
. "$D/sgl.manifest"
mkdir -p "$STASH" || exit 2
for c in "$D"/sglsite.tar.xz.part-*; do cp "$c" "$STASH/" || exit 2; echo "kept $(basename "$c") in $STASH"; done
missing=""
for c in $SGL_CHUNKS; do test -f "$STASH/$c" || missing="$missing $c"; done
if [ -n "$missing" ]; then
  echo "SGLang chunks still to upload:$missing (upload the next part and run its setup_sglang.sh)"
  exit 0
fi
chunks=(); for c in $SGL_CHUNKS; do chunks+=("$STASH/$c"); done
got=$(cat "${chunks[@]}" | sha256sum | cut -d' ' -f1)
if [ "$got" != "$SGL_SHA256" ]; then
  echo "SGLang archive checksum mismatch (chunks from different builds?): rm -rf $STASH and upload all parts again"
  exit 2
fi
U=/tmp/sgl-unpack
rm -rf "$U" && mkdir -p "$U" && cat "${chunks[@]}" | xz -d | tar -C "$U" -x || exit 2
rm -rf "$SGLSITE" && mv "$U/sglsite" "$SGLSITE" || exit 2
# shellcheck source=/dev/null
. "$D/env_sglang.sh"
if [ -d "$U/jit" ]; then mkdir -p "$TVM_FFI_CACHE_DIR" && cp -a "$U"/jit/. "$TVM_FFI_CACHE_DIR/"; fi
rm -rf "$U" "$STASH"
echo "SGLang $SGL_VERSION in $SGLSITE; $(find "$TVM_FFI_CACHE_DIR" -name '*.so' 2>/dev/null | wc -l) prebuilt JIT kernels in $TVM_FFI_CACHE_DIR"
cd /tmp && python3 "$D/check_sglang.py"
