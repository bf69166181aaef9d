#!/usr/bin/env bash
# Prove specmon against a real SGLang 0.5.16 server on the lent H200 (../shared/tools/sglang-h200/README.md).
#   usage: scripts/real-sglang-h200.sh STAGE OUTDIR
#   STAGE ready:    no speculation, EAGLE3 (steps 3, topk 1, 4 draft tokens), STANDALONE: each followed live from
#                   the first line to ready (log-summary --follow and the app attached headless, screenshots
#                   mid-capture and at ready), benchmarked, checked, GPUs read while it runs and after it stops.
#   STAGE failures: --num-speculative-tokens 16, draft tokens without steps, a taken port, --mem-fraction-static
#                   0.995, and steps 1 / topk 1 / 16 draft tokens (SGLang runs 2).
#   SERVE: the command that starts a server as `SERVE PORT LOGFILE [SGLang flags]`; by default SGLang through
#   the parcel's serve.sh. `SERVE=scripts/emulated-serve.sh` runs the same flow here against the emulator.
set -u
STAGE=$1 OUT=$(realpath -m "$2")
SERVE=${SERVE:-.sglang-parcels/b/serve.sh}
PY=${PY:-python3}
SPECMON=("$PY" -m specmon)
READY_TIMEOUT=${READY_TIMEOUT:-300}
mkdir -p "$OUT"
say() { printf '[%s] %s\n' "$(date +%T)" "$*" | tee -a "$OUT/steps.txt"; }

wait_http() {  # PORT SECONDS: until /health answers 200
  local t=0
  until [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/health")" = 200 ]; do
    sleep 1; t=$((t + 1)); [ "$t" -ge "$2" ] && return 1
  done
  return 0
}

wait_exit() {  # PID SECONDS
  local t=0
  while kill -0 "$1" 2>/dev/null; do sleep 1; t=$((t + 1)); [ "$t" -ge "$2" ] && return 1; done
  return 0
}

gpu_reading() {  # NAME: specmon gpus and nvidia-smi at the same moment
  "${SPECMON[@]}" gpus --json > "$1-specmon-gpus.json" 2>&1 & local g=$!
  nvidia-smi --query-gpu=index,memory.used,memory.total,utilization.gpu --format=csv > "$1-smi-gpus.csv" 2>&1
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv > "$1-smi-apps.csv" 2>&1
  wait "$g"
}

run_ready() {  # NAME PORT [SGLang flags]
  local name=$1 port=$2; shift 2
  local d=$OUT/$name; mkdir -p "$d"; local log=$d/server.log
  say "$name: starting on port $port: $*"
  : > "$log"
  bash "$SERVE" "$port" "$log" "$@" & local sp=$!
  echo "$sp" > "$d/server.pid"
  "${SPECMON[@]}" log-summary --follow "$log" > "$d/follow.txt" 2>&1 & local lf=$!
  "${SPECMON[@]}" monitor --url "http://127.0.0.1:$port" --log "$log" "${PRESET_ARGS[@]}" --headless \
    --duration "$READY_TIMEOUT" --screenshot-at "capture:$d/mid-capture.svg" --screenshot-at "ready:$d/ready.svg" \
    --screenshot-at "failed:$d/failed.svg" --exit-on ready,failed > "$d/monitor.txt" 2>&1 & local mon=$!
  if wait_http "$port" "$READY_TIMEOUT"; then say "$name: /health 200"; else say "$name: never healthy"; fi
  wait_exit "$lf" 30; echo "log-summary --follow exit: $(wait "$lf"; echo $?)" >> "$d/follow.txt"
  wait_exit "$mon" 60; echo "monitor exit: $(wait "$mon"; echo $?)" >> "$d/monitor.txt"
  "${SPECMON[@]}" log-summary --json "$log" > "$d/summary.json" 2>&1
  "${SPECMON[@]}" check --url "http://127.0.0.1:$port" "${PRESET_ARGS[@]}" --json > "$d/check.json" 2>&1
  "${SPECMON[@]}" check --url "http://127.0.0.1:$port" "${PRESET_ARGS[@]}" > "$d/check.txt" 2>&1
  "${SPECMON[@]}" bench --url "http://127.0.0.1:$port" "${PRESET_ARGS[@]}" --requests 8 --warmup 1 \
    --max-new-tokens 64 --json > "$d/bench.json" 2> "$d/bench.err"
  curl -s "http://127.0.0.1:$port/get_server_info" > "$d/server-info.json"
  curl -s "http://127.0.0.1:$port/metrics" > "$d/metrics.txt"
  ps -eo pid,ppid,pgid,cmd | grep -E "sglang|$sp" | grep -v grep > "$d/procs.txt"
  gpu_reading "$d/live"
  say "$name: stopping $sp"
  kill "$sp"; wait_exit "$sp" 60 || kill -9 "$sp"
  sleep 5
  gpu_reading "$d/stopped"
  say "$name: done"
}

run_failure() {  # NAME PORT SECONDS [SGLang flags]
  local name=$1 port=$2 secs=$3; shift 3
  local d=$OUT/$name; mkdir -p "$d"; local log=$d/server.log
  say "$name: starting on port $port: $*"
  : > "$log"
  bash "$SERVE" "$port" "$log" "$@" & local sp=$!
  "${SPECMON[@]}" log-summary --follow "$log" > "$d/follow.txt" 2>&1 & local lf=$!
  wait_exit "$sp" "$secs" || { say "$name: still running after ${secs}s, killing"; kill "$sp"; }
  wait "$sp"; echo "$?" > "$d/exit-code.txt"
  sleep 2; kill "$lf" 2>/dev/null; wait "$lf" 2>/dev/null
  "${SPECMON[@]}" log-summary --json "$log" > "$d/summary.json" 2>&1
  "${SPECMON[@]}" log-summary "$log" > "$d/summary.txt" 2>&1
  say "$name: exit $(cat "$d/exit-code.txt")"
}

EAGLE3=(--speculative-algorithm EAGLE3 --speculative-draft-model-path /tmp/tiny/eagle3)
PRESET_ARGS=()
# What the steps-1 / topk-1 / 16-draft-token server was asked for, as a preset: specmon compares it with what runs.
mkdir -p "$OUT/presets"
cat > "$OUT/presets/h200-topk1-16.toml" <<'TOML'
description = "the real tiny EAGLE3 server asked for 16 draft tokens with 1 step and topk 1"
[server.args]
model-path = "/tmp/tiny/target"
speculative-algorithm = "EAGLE3"
speculative-draft-model-path = "/tmp/tiny/eagle3"
speculative-num-steps = 1
speculative-eagle-topk = 1
speculative-num-draft-tokens = 16
TOML
case $STAGE in
  ready)
    run_ready plain 30001
    run_ready eagle3 30002 "${EAGLE3[@]}" --speculative-num-steps 3 --speculative-eagle-topk 1 \
      --speculative-num-draft-tokens 4
    run_ready standalone 30003 --speculative-algorithm STANDALONE --speculative-draft-model-path /tmp/tiny/target \
      --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4
    ;;
  failures)
    run_failure unrecognized 30011 60 --num-speculative-tokens 16
    run_failure spec-assertion 30012 60 "${EAGLE3[@]}" --speculative-num-draft-tokens 16
    "$PY" -m http.server 30013 --bind 127.0.0.1 > /dev/null 2>&1 & holder=$!
    sleep 1
    run_failure port-taken 30013 "$READY_TIMEOUT"
    kill "$holder"
    run_failure oom 30014 "$READY_TIMEOUT" --mem-fraction-static 0.995
    PRESET_ARGS=(--preset h200-topk1-16 --presets "$OUT/presets")
    run_ready topk1-rewrite 30015 "${EAGLE3[@]}" --speculative-num-steps 1 --speculative-eagle-topk 1 \
      --speculative-num-draft-tokens 16
    PRESET_ARGS=()
    ;;
  *) echo "unknown stage $STAGE" >&2; exit 2 ;;
esac
say "stage $STAGE finished"
