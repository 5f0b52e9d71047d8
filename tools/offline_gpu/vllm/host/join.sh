#!/usr/bin/env bash
# GPU host: install a bundle repacked by two_uploads.sh into SITE (default /tmp/site). Every
# upload (upa, upb) carries this script, join_chunks.sh and the manifest; each run keeps its
# chunk in a stash, and the run that completes the set joins the chunks, checks the SHA-256,
# unpacks the kernel library and the rest of vLLM into SITE, loads one kernel and prints the
# vLLM version.
D=$(cd "$(dirname "$0")" && pwd)
SITE=${1:-/tmp/site}
# shellcheck source=/dev/null
. "$D/bundle.manifest"
# shellcheck source=/dev/null
. "$D/join_chunks.sh"
W=$(mktemp -d)
join_chunks "$D" BUNDLE "/tmp/$(basename "$SITE").chunks" "$W/bundle.tar"
rc=$?
[ "$rc" = 0 ] || { rm -rf "$W"; [ "$rc" = 1 ] && exit 0; exit "$rc"; }
mkdir -p "$SITE" && tar -C "$W" -xf "$W/bundle.tar" && tar -C "$SITE" -xJf "$W/vllm-C.tar.xz" \
  && tar -C "$SITE" -xJf "$W/site.tar.xz" || exit 2
rm -rf "$W"
SITE=$SITE bash "$D/check_kernels.sh"
cd /tmp && PYTHONPATH=$SITE python3 -c 'import vllm; print("vllm", vllm.__version__, "ready in '"$SITE"'")'
