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
# shellcheck source=/dev/null
. "$D/join_chunks.sh"
U=/tmp/sgl-unpack
join_and_unpack "$D" SGL "$STASH" "$U"
case $? in 0) ;; 1) exit 0 ;; *) exit 2 ;; esac
rm -rf "$SGLSITE" && mv "$U/sglsite" "$SGLSITE" || exit 2
# shellcheck source=/dev/null
. "$D/env_sglang.sh"
if [ -d "$U/jit" ]; then mkdir -p "$TVM_FFI_CACHE_DIR" && cp -a "$U"/jit/. "$TVM_FFI_CACHE_DIR/"; fi
rm -rf "$U"
echo "SGLang $SGL_VERSION in $SGLSITE; $(find "$TVM_FFI_CACHE_DIR" -name '*.so' 2>/dev/null | wc -l) prebuilt JIT kernels in $TVM_FFI_CACHE_DIR"
cd /tmp && python3 "$D/check_sglang.py"
