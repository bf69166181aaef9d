#!/usr/bin/env bash
# The emulator started like the H200 parcel's serve.sh (same flags), so scripts/real-sglang-h200.sh can be
# rehearsed on any machine:  SERVE=scripts/emulated-serve.sh scripts/real-sglang-h200.sh ready /tmp/rehearsal
#   usage: emulated-serve.sh PORT LOGFILE [extra SGLang flags...]
set -u
PORT=$1 LOG=$2; shift 2
exec "${PY:-python3}" -m specmon.emulator --model-path /tmp/tiny/target --host 127.0.0.1 --port "$PORT" \
  --attention-backend triton --sampling-backend pytorch --grammar-backend none \
  --mem-fraction-static 0.2 --cuda-graph-max-bs 8 --enable-metrics "$@" \
  --emulator-speed "${EMULATOR_SPEED:-5}" > "$LOG" 2>&1
