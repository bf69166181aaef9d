#!/usr/bin/env bash
# The trained target/draft pair (../shared/tools/sglang-h200/trained) under real SGLang on the lent H200, end to
# end: STANDALONE speculation at 16, 10 and 5 draft tokens and none, with the preflight on. Run from the
# repository root on the device machine; the lead runs it (no GPU here).
#   usage: scripts/h200-trained.sh STAGE      (OUT: where the results go; a tgz per stage)
#   STAGE setup:  unpack the SGLang parcel (see ../shared/tools/sglang-h200/README.md: call 1 unpacks parcel a),
#                 copy the pair and prompts from the carried `.trained` folder to /tmp/trained
#   STAGE preflight:  `specmon check` of each trained preset (a STANDALONE draft 256 wide for a 384-wide target
#                 must pass: its own model, the target's vocabulary and tokenizer)
#   STAGE sweep:  `specmon sweep trained-plain trained-standalone-16/-10/-5` (preflight on), then `specmon
#                 results`, `specmon predict` of the 16-token run (all 24 requests, 10 and 5 against the
#                 measured), the sweep's own prediction, and the state left behind
#   STAGE live:   start trained-standalone-16, `monitor --once` under a concurrent benchmark with /metrics before
#                 and after, the app attached headless at 200x50 (Benchmark pane), then stop (by the server's pid)
#   STAGE api:    start trained-standalone-16 and keep SGLang's own answers as fixtures: /server_info, /metrics, one
#                 streamed /generate, the startup log (log-summary of it too), then stop
# The same stages run SGLang 0.5.17 for real (it pins the H200 image's torch): build its parcels with
# scripts/build-sglang-0517-parcels.sh instead of 0.5.16's, unpack them the same way, and keep what comes back
# under tests/fixtures/real-sglang-0.5.17/.
# Carry `.trained` (32 MB, ignored: echo /.trained/ >> .git/info/exclude) rather than retraining (~4 min).
# REHEARSE=1 runs the same against the emulator on any machine (presets rewritten to launch it).
set -u
OUT=$(realpath -m "${OUT:-/tmp/h200-trained}")
STAGE=$1
WORK=${WORK_ROOT:-/tmp/h200-trained-work}/$STAGE
mkdir -p "$WORK" "$OUT"
cd "$(dirname "$0")/.."
export SPECMON_STATE_DIR=${SPECMON_STATE_DIR:-/tmp/h200-trained-state} XDG_STATE_HOME=${XDG_STATE_HOME:-/tmp/h200-trained-xdg}
PRESETS=${PRESETS:-scripts/h200-presets}
URL=http://127.0.0.1:30000
say() { printf '[%s] %s\n' "$(date +%T)" "$*" | tee -a "$WORK/steps.txt"; }
timed() {  # NAME CMD...: run, keep stdout/stderr, record wall time and exit code
  local name=$1; shift
  local t0=$EPOCHREALTIME
  "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"
  local rc=$?
  say "$name: exit $rc in $(awk "BEGIN { printf \"%.2f\", $EPOCHREALTIME - $t0 }") s"
  return $rc
}
finish() {
  cp -r "$SPECMON_STATE_DIR/runs" "$WORK/server-logs" 2>/dev/null
  cp -r "$XDG_STATE_HOME/specmon/results" "$WORK/results" 2>/dev/null
  tar -C "$(dirname "$WORK")" -czf "$OUT/trained-$STAGE.tgz" "$STAGE" 2>/dev/null
  say "archived $OUT/trained-$STAGE.tgz"
}
trap finish EXIT
trap "exit 143" TERM INT

if [ "${REHEARSE:-0}" = 1 ]; then
  PRESETS=$WORK/presets-emulated
  mkdir -p "$PRESETS" /tmp/trained
  [ -f /tmp/trained/prompts.jsonl ] || cp ../shared/tools/sglang-h200/trained/prompts.jsonl /tmp/trained/
  for f in scripts/h200-presets/*.toml; do
    sed -e 's|^launcher = .*|launcher = ["{python}", "-m", "specmon.emulator"]|' \
        -e 's|^mem-fraction-static = .*|mem-fraction-static = 0.85|' \
        -e 's|^\[server.args\]|[server.args]\nemulator-speed = 20\nemulator-decode-speed = 5|' "$f" >"$PRESETS/$(basename "$f")"
  done
  SPECMON=(.venv/bin/specmon)
else
  [ -d /tmp/site/specmon ] && export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
  source scripts/device-env.sh
  SPECMON=(python3 -m specmon)
fi
SPEC=(trained-standalone-16 trained-standalone-10 trained-standalone-5)

case $STAGE in
setup)
  bash .sglang-parcels/b/unpack.sh .sglang-parcels/b >"$WORK/unpack.log" 2>&1
  mkdir -p /tmp/trained && cp -r .trained/target .trained/draft .trained/prompts.jsonl /tmp/trained/
  say "trained pair: $(du -sh /tmp/trained | cut -f1) in /tmp/trained"
  PYTHONPATH=/tmp/sglang-site python3 -c "import importlib.metadata as m; print('sglang', m.version('sglang'))" | tee -a "$WORK/steps.txt"
  ;;
preflight)
  for p in trained-plain "${SPEC[@]}"; do
    timed "check-$p" "${SPECMON[@]}" check "$p" --presets "$PRESETS" --json
  done
  ;;
sweep)
  timed sweep "${SPECMON[@]}" sweep trained-plain "${SPEC[@]}" --presets "$PRESETS" --leave none --json
  timed results "${SPECMON[@]}" results --format json
  RUN16=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(next((p['run_id'] for p in r['presets']
    if p['draft_tokens'] == 16 and p['run_id']), ''))" "$WORK/sweep.out" 2>/dev/null)
  if [ -n "$RUN16" ]; then
    timed predict-16 "${SPECMON[@]}" predict "$RUN16" --draft-tokens 16,10,5 --json
    timed predict-16-text "${SPECMON[@]}" predict "$RUN16"
  else
    say "predict: no measured 16-token run to predict from"
  fi
  timed ps-after "${SPECMON[@]}" ps --json
  cp -r "$SPECMON_STATE_DIR/sweeps" "$WORK/sweeps" 2>/dev/null
  ;;
live)
  timed start "${SPECMON[@]}" start trained-standalone-16 --presets "$PRESETS" --wait --timeout 400 --json
  "${SPECMON[@]}" bench --url $URL --presets "$PRESETS" --preset trained-standalone-16 --requests 96 \
    --concurrency 4 --json >"$WORK/bench-concurrent.json" 2>"$WORK/bench-concurrent.err" &
  BENCH=$!
  for _ in $(seq 100); do curl -s $URL/metrics | grep -q '^sglang:num_running_reqs.* [1-9]' && break; sleep 0.1; done
  curl -s $URL/metrics >"$WORK/metrics-under-load-before.txt"
  timed monitor-once "${SPECMON[@]}" monitor --url $URL --once --window 10 --json
  curl -s $URL/metrics >"$WORK/metrics-under-load-after.txt"
  wait "$BENCH"; say "concurrent bench: exit $?"
  SPECMON_HEADLESS_SIZE=200x50 timed app "${SPECMON[@]}" monitor --presets "$PRESETS" --headless --duration 20 \
    --screenshot "$WORK/app-200x50.svg"
  timed stop "${SPECMON[@]}" stop --yes --json  # the server's own pid (and its group), never a wrapper shell
  timed gpus-after "${SPECMON[@]}" gpus --json
  ;;
api)
  timed start "${SPECMON[@]}" start trained-standalone-16 --presets "$PRESETS" --wait --timeout 400 --json
  curl -s $URL/server_info >"$WORK/server-info.json"
  curl -s -N -H 'Content-Type: application/json' -d '{"text": "def fibonacci(n):", "stream": true,
    "sampling_params": {"max_new_tokens": 64, "temperature": 0, "ignore_eos": true}}' $URL/generate >"$WORK/generate.txt"
  curl -s $URL/metrics >"$WORK/metrics.txt"
  LOG=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['log'])" "$WORK/start.out")
  cp "$LOG" "$WORK/server.log"
  timed summary "${SPECMON[@]}" log-summary "$WORK/server.log" --json
  timed stop "${SPECMON[@]}" stop --yes --json
  ;;
*)
  trap - EXIT
  echo "usage: $0 setup|preflight|sweep|live|api" >&2
  exit 2
  ;;
esac
