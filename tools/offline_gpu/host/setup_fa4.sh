#!/usr/bin/env bash
# GPU host: add FA4 to the slim vLLM bundle in /tmp/site. Every part (fa4a, fa4b, ...) carries this
# script; upload the parts one after another and run `bash <part>/setup_fa4.sh` after each. Each run
# keeps its chunk in /tmp/fa4-chunks; the run that completes the set joins and checks the archive,
# installs it (install_fa4.py) and runs the import check (check_fa4.py; FA4_SMOKE=0 skips its
# small FA4 kernel run against a PyTorch reference).
# Exit 3: the base bundle is missing from /tmp/site (the host was recycled): install it again first.
set -uo pipefail
D=$(cd "$(dirname "$0")" && pwd)
SITE=${SITE:-/tmp/site}
STASH=${FA4_STASH:-/tmp/fa4-chunks}
test -f "$SITE/vllm/__init__.py" || { echo "no vLLM bundle in $SITE: install it first"; exit 3; }
# shellcheck source=/dev/null
. "$D/fa4.manifest"
mkdir -p "$STASH" || exit 2
for c in "$D"/fa4.tar.xz.part-*; do cp "$c" "$STASH/" || exit 2; echo "kept $(basename "$c") in $STASH"; done
missing=""
for c in $FA4_CHUNKS; do test -f "$STASH/$c" || missing="$missing $c"; done
if [ -n "$missing" ]; then
  echo "FA4 chunks still to upload:$missing (upload the next part and run its setup_fa4.sh)"
  exit 0
fi
chunks=(); for c in $FA4_CHUNKS; do chunks+=("$STASH/$c"); done
got=$(cat "${chunks[@]}" | sha256sum | cut -d' ' -f1)
if [ "$got" != "$FA4_SHA256" ]; then
  echo "FA4 archive checksum mismatch (chunks from different builds?): rm -rf $STASH and upload all parts again"
  exit 2
fi
U=/tmp/fa4-unpack
rm -rf "$U" && mkdir -p "$U" && cat "${chunks[@]}" | xz -d | tar -C "$U" -x || exit 2
python3 "$D/install_fa4.py" "$U" "$SITE" || exit 2
rm -rf "$U" "$STASH"
# shellcheck source=/dev/null
. "$D/env_fa4.sh"
cd /tmp && python3 "$D/check_fa4.py"
