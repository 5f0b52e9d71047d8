#!/usr/bin/env bash
# The GPU benchmark and GPU tests on a remote host with one or two GPUs, run detached
# (setsid) so that a plan longer than one command fits hosts whose commands are limited
# to N minutes: `start` returns at once and each `wait` follows the plan for a while.
# Run from a checkout on that host with vLLM for CUDA installed; SESSION_ENV names a shell
# file sourced first to set the environment up (default tools/offline_gpu/host/env_vllm.sh, if present).
#
#   bash tools/remote_gpu_session.sh start        # launch the plan, return at once
#     (env: E4B_METHODS, method strings (bench/method.py) in run order, e.g.
#      "frozen_kv_mtp,frozen_kv_mtp:centroid_head=dense,mtp,none";
#      E4B_RUNNERS, "v2" (default) or "v2 v1" for the V1 runner as well;
#      RUN, the label stored in the rows; V2_TESTS and V1_TESTS, pytest -k expressions; LATE_S)
#   bash tools/remote_gpu_session.sh wait 560     # follow it up to 560 s; pack logs into
#                                                 # $OUT, a folder to copy back, if set
#   bash tools/remote_gpu_session.sh dry          # no GPU: list the steps this env would run
#   (start runs `reset` first: a second plan on the same warm machine keeps the first
#    plan's rows and logs, and `wait` waits for the new one)
#
#     (more env: PROFILES="frozen_kv_mtp:centroid_head=dense@32 ...", kernel profiles of a
#      draft round; BENCH_31B=0 skips 31B on one GPU, E4B=0 skips E4B (a 31B-only
#      session), B31_ARGS extra flags for 31B, B31_METHODS its methods in run order;
#      TP2=0 skips the TP=2 tests on two GPUs;
#      RUN_26B=1 tries 26B-A4B;
#      TESTS="v2" runs only the V2 GPU tests on one GPU, TESTS="" none, TESTS_FIRST=1
#      runs them before the E4B benchmark; E4B_ARGS, extra bench.gpu flags such as
#      "--profile-at 32,128 --profile-ttft 1024"; ATTN=1 times the draft-step attention
#      alone first (bench.micro.attn_gpu; ATTN_SHAPES="E4B 31B" at both assistants' shapes),
#      and a method "frozen_kv_mtp:sliding_split_kv_max_rows=@ATTN" then runs with its
#      recommendation; DENSE=1 times the 31B dense head alone, bench.micro.dense_head_gpu;
#      VERIFY_HEADS=1 times the same heads at the targets' logits shapes, 31B 262144 x
#      5376 and E4B 262144 x 2560, at the row counts of a verify pass; LOGITS_GEMM=1
#      times their logits GEMM alone, bench.micro.logits_gemm_gpu)
#
# Plan with two GPUs (two lanes, one GPU each; then both GPUs):
#   lane A, GPU 0: E4B benchmark (none/mtp/frozen_kv_mtp, compiled), V1-runner GPU tests,
#                  draft-round profiles
#   lane B, GPU 1: 31B benchmark (compiled), Model Runner V2 GPU tests
#   both GPUs:     TP=2 tests
# With one GPU, one after another: centroid heads alone
# (bench.micro.heads_gpu), E4B benchmark, V2 tests, V1 tests, profiles, then 31B unless the
# plan is past LATE_S seconds.
# Everything lands in /tmp/h200 (results h200_*.jsonl, one log per step; the names
# bench/results keeps).
set -u
W=${SESSION_DIR:-/tmp/h200} # SESSION_DIR: tests only
ENV_SH=${SESSION_ENV:-tools/offline_gpu/host/env_vllm.sh}
REPO=$(pwd)

skip_log() { # skip_log NAME: mark a skipped step without clobbering the log of an
  # earlier plan on the same warm machine (a 31B plan, then an E4B one)
  [ -s $W/$1.log ] || echo "skipped" >$W/$1.log
}

late() { # true once the plan has run longer than LATE_S (later steps are skipped)
  [ $(($(date +%s) - $(cat $W/t0))) -ge "${LATE_S:-840}" ]
}

wants_tests() { # wants_tests v1|v2: TESTS names that suite (unset: both; "": none)
  case " ${TESTS-v2 v1} " in *" $1 "*) return 0 ;; esac
  return 1
}

attn_methods() { # E4B_METHODS with "@ATTN" replaced by bench.micro.attn_gpu's recommendation; a
  # method naming @ATTN is dropped when there is none or it is E4B's vLLM default (>= 64)
  local n methods="${E4B_METHODS:-frozen_kv_mtp,mtp,none}"
  case "$methods" in *@ATTN*) ;; *) echo "$methods"; return ;; esac
  n=$(sed -n 's/^RECOMMEND sliding_split_kv_max_rows=//p' $W/attn.log 2>/dev/null | tail -n 1)
  if [ -n "$n" ] && [ "$n" -lt 64 ]; then
    echo "${methods//@ATTN/$n}"
  else
    echo "$methods" | tr ',' '\n' | grep -v '@ATTN' | paste -sd, -
  fi
}

bench_e4b() { # E4B_RUNNERS="v2 v1": Model Runner V2 (the GPU default), then V1; E4B=0 skips
  local methods
  [ "${E4B:-1}" = 1 ] || { skip_log bench_E4B; return 0; }
  methods=$(attn_methods)
  echo "E4B methods: $methods" >>$W/plan.log
  for runner in ${E4B_RUNNERS:-v2}; do
    CUDA_VISIBLE_DEVICES=$1 VLLM_USE_V2_MODEL_RUNNER=$([ "$runner" = v1 ] && echo 0 || echo 1) \
      python -m bench.gpu all --models E4B \
      --methods "$methods" --shapes $W/shapes \
      --out $W/h200_E4B.jsonl --run "${RUN:-A}" ${E4B_ARGS:-} \
      >>$W/bench_E4B.log 2>&1
  done
}

bench_31b() { # B31_ARGS: extra bench.gpu flags for 31B, such as "--concurrency 1,32";
  # B31_METHODS: the methods in the order they run
  CUDA_VISIBLE_DEVICES=$1 python -m bench.gpu all --models 31B \
    --methods "${B31_METHODS:-frozen_kv_mtp,mtp,none}" --shapes $W/shapes --out $W/h200_31B.jsonl --run "${RUN:-A}" \
    ${B31_ARGS:-} >$W/bench_31B.log 2>&1
}

bench_26b() { # the bundle lacks the MoE kernels (BENCHMARKS.md); only with RUN_26B=1
  CUDA_VISIBLE_DEVICES=$1 python -m bench.gpu all --models 26B-A4B --mode graphs \
    --methods frozen_kv_mtp,mtp,none --shapes $W/shapes --out $W/h200_26B.jsonl --run "${RUN:-A}" \
    >$W/bench_26B.log 2>&1
}

tests_v1() { # V1_TESTS="a pytest -k expression" narrows them; default: all but TP=2
  CUDA_VISIBLE_DEVICES=$1 VLLM_USE_V2_MODEL_RUNNER=0 python -m pytest tests/gpu -q -s -rA \
    -p no:cacheprovider ${V1_TESTS:+-k "$V1_TESTS"} --ignore=tests/gpu/test_gpu_tp2.py >$W/test_v1.log 2>&1
}

tests_v2() { # V2_TESTS="a pytest -k expression" narrows them; default: all but TP=2
  CUDA_VISIBLE_DEVICES=$1 VLLM_USE_V2_MODEL_RUNNER=1 python -m pytest tests/gpu -q -s -rA \
    -p no:cacheprovider ${V2_TESTS:+-k "$V2_TESTS"} \
    --ignore=tests/gpu/test_gpu_tp2.py >$W/test_v2.log 2>&1
}

heads() { # centroid heads alone, E4B head shape (seconds; HEADS=0 skips; HEADS_SWEEP="64x4,128x4:torch"
  # also times the fused head at those launch shapes, ":torch" with torch.topk's centroids)
  [ "${HEADS:-1}" = 1 ] || return 0
  CUDA_VISIBLE_DEVICES=$1 python -m bench.micro.heads_gpu --json $W/h200_heads.json \
    ${HEADS_SWEEP:+--sweep "$HEADS_SWEEP"} >$W/heads.log 2>&1
}

attn() { # ATTN=1: draft-step attention alone, split-KV vs one pass (bench.micro.attn_gpu);
  # its last line recommends sliding_split_kv_max_rows, which E4B_METHODS can name as @ATTN
  # (E4B's). ATTN_SHAPES="E4B 31B": the assistant shapes to time (default E4B); E4B's
  # rows go to h200_attn.json and attn.log, another shape's to h200_attn_SHAPE.json
  local shape sfx
  [ "${ATTN:-0}" = 1 ] || return 0
  for shape in ${ATTN_SHAPES:-E4B}; do
    sfx=$([ "$shape" = E4B ] || echo "_$shape")
    CUDA_VISIBLE_DEVICES=$1 python -m bench.micro.attn_gpu --shape "$shape" \
      --json $W/h200_attn$sfx.json >$W/attn$sfx.log 2>&1
  done
}

dense() { # DENSE=1: the 31B dense head alone, upstream's against dense_head fused / fp8
  # (bench.micro.dense_head_gpu; seconds)
  [ "${DENSE:-0}" = 1 ] || return 0
  CUDA_VISIBLE_DEVICES=$1 python -m bench.micro.dense_head_gpu --json $W/h200_dense_head.json \
    >$W/dense_head.log 2>&1
}

verify_heads() { # VERIFY_HEADS=1: upstream's logits + soft-cap + argmax against a fused
  # GEMM + argmax at the targets' heads, at c and (k+1) x c rows (k=3)
  [ "${VERIFY_HEADS:-0}" = 1 ] || return 0
  CUDA_VISIBLE_DEVICES=$1 python -m bench.micro.dense_head_gpu --hidden 5376 --rows 32,128 \
    --variants "" --json $W/h200_verify_head_31B.json >$W/verify_head_31B.log 2>&1
  CUDA_VISIBLE_DEVICES=$1 python -m bench.micro.dense_head_gpu --hidden 2560 --rows 32,128,512 \
    --variants "" --json $W/h200_verify_head_E4B.json >$W/verify_head_E4B.log 2>&1
}

logits_gemm() { # LOGITS_GEMM=1: the targets' logits GEMM alone (the cuBLAS kernel it
  # picks, other ways to compute it) and the rest of the logits path, at c and (k+1) x c rows
  # (LOGITS_GEMM_31B=0: E4B's shape only)
  [ "${LOGITS_GEMM:-0}" = 1 ] || return 0
  [ "${LOGITS_GEMM_31B:-1}" = 1 ] && CUDA_VISIBLE_DEVICES=$1 python -m bench.micro.logits_gemm_gpu \
    --hidden 5376 --rows 32,128,512 --json $W/h200_logits_gemm_31B.json >$W/logits_gemm_31B.log 2>&1
  CUDA_VISIBLE_DEVICES=$1 python -m bench.micro.logits_gemm_gpu --hidden 2560 --rows 128,512 \
    --json $W/h200_logits_gemm_E4B.json >$W/logits_gemm_E4B.log 2>&1
}

profiles() { # PROFILES="method@concurrency ...": kernel breakdowns of a draft round
  # (PROFILE_MODE=graphs: compiled, CUDA-graph replay; default eager; PROFILE_MODEL=31B
  # profiles that shape instead of E4B)
  for spec in ${PROFILES:-}; do
    CUDA_VISIBLE_DEVICES=$1 python -m bench.micro.profile_draft_gpu --shapes $W/shapes \
      --model "${PROFILE_MODEL:-E4B}" \
      --method "${spec%@*}" --concurrency "${spec#*@}" --mode "${PROFILE_MODE:-eager}" \
      >>$W/profile.log 2>&1
  done
}

lane_a() { # TESTS picks the GPU tests here too ("v2 v1" by default: V1 in this lane)
  heads 0
  attn 0
  dense 0
  verify_heads 0
  logits_gemm 0
  bench_e4b 0
  wants_tests v1 && tests_v1 0
  profiles 0
  if [ "${RUN_26B:-0}" = 1 ] && ! late; then bench_26b 0; fi
}

lane_b() {
  [ "${BENCH_31B:-1}" = 1 ] && bench_31b 1
  wants_tests v2 && tests_v2 1
}

serial() { # one GPU: the E4B numbers, the tests (first with TESTS_FIRST=1), then 31B if time is left
  heads 0
  attn 0
  dense 0
  verify_heads 0
  logits_gemm 0
  [ "${TESTS_FIRST:-0}" = 1 ] || bench_e4b 0
  wants_tests v2 && tests_v2 0
  wants_tests v1 && tests_v1 0
  [ "${TESTS_FIRST:-0}" = 1 ] && bench_e4b 0
  profiles 0
  if [ "${BENCH_31B:-1}" = 1 ] && ! late; then bench_31b 0; else skip_log bench_31B; fi
}

summarize() { # all rows so far -> h200.jsonl, h200.json and the report table
  cat $W/h200_*.jsonl >$W/h200.jsonl 2>/dev/null
  python -m bench.gpu report $W/h200.jsonl --json $W/h200.json >$W/report.md 2>&1
}

plan() {
  cd "$REPO" || exit 1
  [ -f "$ENV_SH" ] && . "$ENV_SH"
  # The plugin's entry point, for TP>1 worker processes (the checkout is not pip-installed).
  mkdir -p $W/plugin/vllm_frozen_kv_mtp-0.0.0.dist-info
  printf 'Metadata-Version: 2.1\nName: vllm-frozen-kv-mtp\nVersion: 0.0.0\n' \
    >$W/plugin/vllm_frozen_kv_mtp-0.0.0.dist-info/METADATA
  printf '[vllm.general_plugins]\nfrozen_kv_mtp = vllm_frozen_kv_mtp:register\n' \
    >$W/plugin/vllm_frozen_kv_mtp-0.0.0.dist-info/entry_points.txt
  export PYTHONPATH=$W/plugin:$REPO:${PYTHONPATH:-} TORCHINDUCTOR_COMPILE_THREADS=8
  date +%s >$W/t0
  nvidia-smi --query-gpu=index,name,memory.total --format=csv >$W/gpus.txt 2>&1
  if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ]; then
    lane_a &
    lane_b &
    wait
    if [ "${TP2:-1}" = 1 ]; then # TP2=0 skips the TP=2 tests
      python -m pytest tests/gpu/test_gpu_tp2.py -q -s -rA -p no:cacheprovider >$W/test_tp2.log 2>&1
    fi
  else
    serial
  fi
  summarize
  echo "plan done after $(($(date +%s) - $(cat $W/t0))) s" >$W/DONE
}

pack() {
  [ -n "${OUT:-}" ] || return 0
  summarize
  tar -C /tmp --exclude h200/shapes --exclude h200/plugin --exclude h200/repo -czf "$OUT/h200.tgz" h200 2>/dev/null
  cp $W/report.md $W/h200.json $W/h200_heads.json $W/h200_attn*.json $W/h200_dense_head.json \
    $W/h200_verify_head_*.json $W/h200_logits_gemm_*.json "$OUT/" 2>/dev/null
}

progress() {
  echo "== $(($(date +%s) - $(cat $W/t0 2>/dev/null || date +%s))) s into the plan"
  grep -h '^ROW' $W/bench_*.log 2>/dev/null | cut -c1-220 | tail -n 40
  grep -h '^PROFILE' $W/profile.log 2>/dev/null | cut -c1-400
  grep -h -A8 '^| rows' $W/heads.log 2>/dev/null
  grep -h '^| \|^RECOMMEND' $W/attn*.log 2>/dev/null
  grep -h '^| ' $W/dense_head.log $W/verify_head_*.log $W/logits_gemm_*.log 2>/dev/null
  for f in $W/test_*.log; do [ -f "$f" ] && { echo "-- $f"; tail -n 4 "$f"; }; done
  for f in $W/bench_*.log; do
    [ -f "$f" ] && grep -h -m3 -E 'Error|error:|Traceback' "$f" | sed "s|^|$f: |"
  done
  nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader 2>/dev/null
  [ -f $W/DONE ] && cat $W/DONE
}

case "${1:-}" in
reset)
  # A new plan on a warm machine: drop the last plan's DONE (else `wait` returns at once)
  # and t0; its rows and logs stay and are packed with the new ones.
  mkdir -p $W
  rm -f $W/DONE $W/t0
  ;;
start)
  bash "$0" reset
  # Run from a snapshot: a later call re-sends the working tree, which may have moved on.
  mkdir -p "$W/repo/$(dirname "$ENV_SH")"
  tar --exclude=./.gpu --exclude=./.git --exclude=./.venv -cf - . | tar -C $W/repo -xf -
  [ -f "$ENV_SH" ] && cp "$ENV_SH" "$W/repo/$ENV_SH"
  (cd $W/repo && setsid nohup bash tools/remote_gpu_session.sh plan </dev/null >$W/plan.log 2>&1 &)
  sleep 5
  cat $W/plan.log
  ;;
plan) plan ;;
dry)
  # The plan with every python and nvidia-smi call replaced by a line in $W/dry.log
  # (tests/unit/test_remote_gpu_session.py): which steps, flags and methods an env would run.
  # SESSION_GPUS: GPUs to pretend; SESSION_DRY_ATTN: the row count bench.micro.attn_gpu "recommends";
  # SESSION_ESTIMATE=0: no time estimate at the end (it collects the selected GPU tests).
  W=${SESSION_DRY_DIR:-$(mktemp -d)} # SESSION_DRY_DIR (tests): a kept folder with earlier logs
  python() {
    echo "${CUDA_VISIBLE_DEVICES:+gpu$CUDA_VISIBLE_DEVICES }${VLLM_USE_V2_MODEL_RUNNER:+v2=$VLLM_USE_V2_MODEL_RUNNER }python $*" >>$W/dry.log
    case "$*" in *bench.micro.attn_gpu*) [ -n "${SESSION_DRY_ATTN:-}" ] && echo "RECOMMEND sliding_split_kv_max_rows=$SESSION_DRY_ATTN" ;; esac
    return 0
  }
  nvidia-smi() { [ "${1:-}" = -L ] && seq "${SESSION_GPUS:-1}" | sed 's/^/GPU /'; return 0; }
  plan
  cat $W/dry.log
  if [ "${SESSION_ESTIMATE:-1}" = 1 ]; then # the plan's rough wall time (tools.plan_estimate)
    py=$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)
    command "$py" -m tools.plan_estimate $W/dry.log
  fi
  [ -n "${SESSION_DRY_DIR:-}" ] || rm -rf "$W"
  ;;
wait)
  end=$(($(date +%s) + ${2:-560}))
  while [ ! -f $W/DONE ] && [ "$(date +%s)" -lt $end ]; do sleep 20; done
  progress
  [ -f "$ENV_SH" ] && . "$ENV_SH"
  export PYTHONPATH=$REPO:${PYTHONPATH:-}
  pack
  ;;
*)
  echo "usage: $0 start | wait SECONDS | dry | reset" >&2
  exit 2
  ;;
esac
