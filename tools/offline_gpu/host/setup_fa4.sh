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
# shellcheck source=/dev/null
. "$D/join_chunks.sh"
U=/tmp/fa4-unpack
join_and_unpack "$D" FA4 "$STASH" "$U"
case $? in 0) ;; 1) exit 0 ;; *) exit 2 ;; esac
python3 "$D/install_fa4.py" "$U" "$SITE" || exit 2
rm -rf "$U"
# shellcheck source=/dev/null
. "$D/env_fa4.sh"
cd /tmp && python3 "$D/check_fa4.py"
