#!/usr/bin/env bash
# specmon's on-call commands, preflight, live view and sweep against a real SGLang 0.5.16 on the lent H200
# (../shared/tools/sglang-h200/README.md): run from the repository root on the device machine.
#   usage: scripts/h200-oncall.sh STAGE        (OUT: where the results go; a tgz per stage)
#   STAGE setup:  unpack the second parcel, make the tiny models, install specmon's wheel from .whl
#   STAGE calls:  the preflight against the installed SGLang, each mistake launched for real and timed, then
#                 start plain → bench → switch EAGLE3 (monitor --once under a concurrent benchmark, /metrics
#                 beside it) → switch plain → stop, every JSON kept
#   STAGE sweep:  specmon sweep of plain and two EAGLE3 shapes, then ps and the state left behind
# REHEARSE=1 runs the same against the emulator on any machine (presets rewritten to launch it).
set -u
OUT=$(realpath -m "${OUT:-/tmp/h200-oncall}")  # only the stage's tgz goes here (a device call empties $OUT)
STAGE=$1
WORK=${WORK_ROOT:-/tmp/h200-oncall-work}/$STAGE
mkdir -p "$WORK" "$OUT"
cd "$(dirname "$0")/.."
export SPECMON_STATE_DIR=${SPECMON_STATE_DIR:-/tmp/h200-state} XDG_STATE_HOME=${XDG_STATE_HOME:-/tmp/h200-xdg}
PRESETS=scripts/h200-presets
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
  tar -C "$(dirname "$WORK")" -czf "$OUT/h200-$STAGE.tgz" "$STAGE" 2>/dev/null
  say "archived $OUT/h200-$STAGE.tgz"
}
trap finish EXIT  # also when a time limit ends the stage: what was measured comes back
trap "exit 143" TERM INT

if [ "${REHEARSE:-0}" = 1 ]; then
  PRESETS=$WORK/presets-emulated
  mkdir -p "$PRESETS"
  for f in scripts/h200-presets/*.toml; do
    sed -e 's|^launcher = .*|launcher = ["{python}", "-m", "specmon.emulator"]|' \
        -e 's|^\[server.args\]|[server.args]\nemulator-speed = 20\nemulator-decode-speed = 5|' "$f" >"$PRESETS/$(basename "$f")"
  done
  SPECMON=(.venv/bin/specmon)
else
  [ -d /tmp/site/specmon ] && export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"  # installed by setup
  source scripts/device-env.sh
  SPECMON=(python3 -m specmon)
fi

case $STAGE in
setup)
  bash .sglang-parcels/b/unpack.sh .sglang-parcels/b >"$WORK/unpack.log" 2>&1
  PYTHONPATH=/tmp/sglang-site python3 .sglang-parcels/b/make_tiny_models.py /tmp/tiny >"$WORK/tiny.log" 2>&1
  say "tiny models: $(ls /tmp/tiny 2>&1 | tr '\n' ' ')"
  "${SPECMON[@]}" --help >/dev/null && say "specmon imports"
  PYTHONPATH=/tmp/sglang-site python3 -c "import importlib.metadata as m; print('sglang', m.version('sglang'))" | tee -a "$WORK/steps.txt"
  ;;
calls)
  for p in h200-plain h200-eagle3 h200-typo h200-nosteps h200-eagle-mismatch; do
    timed "preflight-$p" "${SPECMON[@]}" check "$p" --presets "$PRESETS" --json
  done
  for p in h200-typo h200-nosteps; do  # what the same mistakes cost on a real launch
    timed "real-$p" "${SPECMON[@]}" start "$p" --presets "$PRESETS" --no-preflight --wait --timeout 300 --json
    "${SPECMON[@]}" stop --yes --json >"$WORK/real-$p-stop.json" 2>&1
  done
  if [ "${SKIP_MISMATCH:-0}" != 1 ]; then  # it serves: a full start (about 3 minutes on a cold machine)
    timed "real-h200-eagle-mismatch" "${SPECMON[@]}" start h200-eagle-mismatch --presets "$PRESETS" --no-preflight \
      --wait --timeout 400 --json
    "${SPECMON[@]}" stop --yes --json >"$WORK/real-h200-eagle-mismatch-stop.json" 2>&1
  fi
  timed start-plain "${SPECMON[@]}" start h200-plain --presets "$PRESETS" --wait --timeout 400 --json
  timed bench-plain "${SPECMON[@]}" bench --url http://127.0.0.1:30000 --presets "$PRESETS" --preset h200-plain --json
  timed gpus-plain "${SPECMON[@]}" gpus --json
  timed ps-plain "${SPECMON[@]}" ps --json
  timed switch-eagle3 "${SPECMON[@]}" switch h200-eagle3 --presets "$PRESETS" --yes --json
  "${SPECMON[@]}" bench --url http://127.0.0.1:30000 --presets "$PRESETS" --preset h200-eagle3 --requests 96 \
    --concurrency 4 --max-new-tokens 256 --json >"$WORK/bench-eagle3-concurrent.json" 2>"$WORK/bench-eagle3-concurrent.err" &
  BENCH=$!
  sleep 5
  curl -s http://127.0.0.1:30000/metrics >"$WORK/metrics-under-load-before.txt"
  timed monitor-once "${SPECMON[@]}" monitor --url http://127.0.0.1:30000 --once --window 10 --json
  curl -s http://127.0.0.1:30000/metrics >"$WORK/metrics-under-load-after.txt"
  wait "$BENCH"; say "concurrent bench: exit $?"
  timed switch-plain "${SPECMON[@]}" switch h200-plain --presets "$PRESETS" --yes --json
  timed stop "${SPECMON[@]}" stop --yes --json
  timed gpus-after "${SPECMON[@]}" gpus --json
  ;;
sweep)
  timed sweep "${SPECMON[@]}" sweep h200-plain h200-eagle3 h200-eagle3-t2 --presets "$PRESETS" --requests 6 \
    --leave none --json
  timed ps-after "${SPECMON[@]}" ps --json
  timed gpus-after "${SPECMON[@]}" gpus --json
  cp -r "$SPECMON_STATE_DIR/sweeps" "$WORK/sweeps" 2>/dev/null
  ;;
*)
  trap - EXIT
  echo "usage: $0 setup|calls|sweep" >&2
  exit 2
  ;;
esac
