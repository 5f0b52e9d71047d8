#!/usr/bin/env bash
# A queue of benchmark commands run one after another, detached (setsid), on a GPU host
# whose commands are cut after a few minutes: `start` returns at once, and each `wait`
# follows the queue for a while and copies its logs and rows out, so that a cut call, or
# a host taken back, loses at most the step that was running.
#
#   bash tools/gpu_queue.sh start PLAN   # PLAN: one shell command a line ('#' comments),
#                                        # run from the repo root with Q set to the queue
#                                        # folder; rows belong under $Q/rows
#   bash tools/gpu_queue.sh wait 540     # follow up to 540 s (returns early when the queue
#                                        # ends); packs $Q/rows and log tails into $OUT/queue.tgz
#   bash tools/gpu_queue.sh status       # the step running now and the rows so far
#   bash tools/gpu_queue.sh stop         # kill the queue (its process group)
#
# Every step has its own log ($Q/NN.log) and a line in $Q/steps.tsv (start, end, exit
# code, command). A step that fails does not stop the queue.
set -u
Q=${QUEUE_DIR:-/tmp/queue}
REPO=$(pwd)

copy_out() { # one archive: a call brings back at most 8 files, so loose rows and logs got lost
  [ -n "${OUT:-}" ] || return 0
  local pack="$Q/pack"
  mkdir -p "$OUT"
  rm -rf "$pack" && mkdir -p "$pack/logs"
  cp -r "$Q/rows" "$pack/" 2>/dev/null
  cp "$Q/steps.tsv" "$pack/" 2>/dev/null
  for f in "$Q"/[0-9]*.log; do
    [ -f "$f" ] && tail -c 20000 "$f" >"$pack/logs/$(basename "$f")"
  done
  tar czf "$OUT/queue.tgz.tmp" -C "$pack" . && mv "$OUT/queue.tgz.tmp" "$OUT/queue.tgz"
  cp "$Q/steps.tsv" "$OUT/steps.tsv" 2>/dev/null
  return 0
}

run_queue() { # the detached body: one step after another
  local n=0 line
  while IFS= read -r line || [ -n "$line" ]; do
    case "$line" in '' | '#'*) continue ;; esac
    n=$((n + 1))
    local log
    log=$(printf '%s/%02d.log' "$Q" "$n")
    echo "$n" >"$Q/current"
    local t0
    t0=$(date +%s)
    (cd "$REPO" && export Q && eval "$line") >"$log" 2>&1
    local rc=$?
    printf '%s\t%s\t%s\t%s\n' "$t0" "$(date +%s)" "$rc" "$line" >>"$Q/steps.tsv"
  done <"$Q/plan"
  date +%s >"$Q/done"
}

case "${1:-}" in
start)
  plan=${2:?usage: gpu_queue.sh start PLAN}
  [ -f "$plan" ] || { echo "no plan file $plan" >&2; exit 2; }
  [ -f "$Q/pid" ] && [ ! -f "$Q/done" ] && kill -0 "$(cat "$Q/pid")" 2>/dev/null &&
    { echo "a queue is running (pid $(cat "$Q/pid")): stop it first" >&2; exit 2; }
  rm -rf "$Q"
  mkdir -p "$Q/rows"
  cp "$plan" "$Q/plan"
  date +%s >"$Q/t0"
  export -f run_queue
  export Q REPO
  setsid bash -c run_queue </dev/null >"$Q/queue.log" 2>&1 &
  echo $! >"$Q/pid"
  echo "queue started: $(grep -cvE '^(#|$)' "$plan") steps, pid $(cat "$Q/pid")"
  ;;
wait)
  limit=${2:-540}
  end=$(($(date +%s) + limit))
  while [ ! -f "$Q/done" ] && [ "$(date +%s)" -lt "$end" ]; do
    sleep "${QUEUE_POLL_S:-15}"
    copy_out
  done
  copy_out
  "$0" status
  ;;
status)
  [ -f "$Q/t0" ] || { echo "no queue"; exit 0; }
  echo "queue: $(($(date +%s) - $(cat "$Q/t0"))) s since start; step $(cat "$Q/current" 2>/dev/null)" \
    "of $(grep -cvE '^(#|$)' "$Q/plan")$([ -f "$Q/done" ] && echo ', done')"
  [ -f "$Q/steps.tsv" ] && awk -F'\t' '{printf "  %4d s  rc=%s  %s\n", $2-$1, $3, substr($4,1,110)}' "$Q/steps.tsv"
  echo "rows: $(cat "$Q"/rows/*.jsonl 2>/dev/null | wc -l)"
  ;;
stop)
  [ -f "$Q/pid" ] && kill -- -"$(cat "$Q/pid")" 2>/dev/null
  date +%s >"$Q/done"
  ;;
*)
  sed -n '2,17p' "$0"
  exit 2
  ;;
esac
