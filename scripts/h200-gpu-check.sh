#!/usr/bin/env bash
# Prove specmon's GPU readings on a real NVIDIA GPU (an H200): run from the repository root on the device
# machine. A PyTorch process holds about 20 GiB on GPU 0 and computes; meanwhile `python3 -m specmon gpus
# --json` and nvidia-smi read the GPUs at the same moment, and the two are compared (memory, utilization,
# processes and the load's own pid). Then benchmarks/nvml_poll.py times every NVML call and a full poll,
# and the GPU pane, fed live readings, is saved as SVG. Everything goes under $OUT.
set -u
OUT="${OUT:-/tmp/h200-gpu-check}"
mkdir -p "$OUT"
cd "$(dirname "$0")/.."

source scripts/device-env.sh

{
    date -u +"%Y-%m-%dT%H:%M:%SZ"
    uname -a
    python3 --version
    python3 -c "import pynvml, psutil, torch; print('nvidia-ml-py', getattr(pynvml, '__version__', '?'), 'psutil', psutil.__version__, 'torch', torch.__version__)"
    git rev-parse HEAD 2>/dev/null
} >"$OUT/environment.txt" 2>&1
nvidia-smi >"$OUT/nvidia-smi-before.txt" 2>&1
nvidia-smi topo -m >"$OUT/nvidia-smi-topo.txt" 2>&1
python3 -m specmon gpus --json >"$OUT/specmon-gpus-idle.json" 2>"$OUT/specmon-gpus-idle.err"

rm -f "$OUT/load.ready"
python3 -m scripts.h200_gpu_check load --gib 20 --seconds 150 --ready "$OUT/load.ready" >"$OUT/load.log" 2>&1 &
LOAD_PID=$!
for _ in $(seq 1 120); do
    [ -s "$OUT/load.ready" ] && break
    kill -0 "$LOAD_PID" 2>/dev/null || break
    sleep 0.5
done
if [ ! -s "$OUT/load.ready" ]; then
    echo "the PyTorch load did not start; see $OUT/load.log" | tee "$OUT/FAILED"
    exit 1
fi
sleep 5  # utilization is averaged over the last sample period: let it settle at the load's level

# The same moment: all three readers start together.
python3 -m specmon gpus --json >"$OUT/specmon-gpus.json" 2>"$OUT/specmon-gpus.err" &
P1=$!
nvidia-smi --query-gpu=index,name,uuid,memory.used,memory.total,utilization.gpu,utilization.memory,power.draw,power.limit,temperature.gpu,clocks.sm,clocks.mem \
    --format=csv >"$OUT/nvidia-smi-gpu.csv" 2>&1 &
P2=$!
nvidia-smi --query-compute-apps=pid,used_memory,gpu_uuid,process_name --format=csv >"$OUT/nvidia-smi-apps.csv" 2>&1 &
P3=$!
wait "$P1" "$P2" "$P3"
nvidia-smi --query-gpu=index,clocks_event_reasons.active --format=csv >"$OUT/nvidia-smi-clock-events.csv" 2>&1 \
    || nvidia-smi --query-gpu=index,clocks_throttle_reasons.active --format=csv >"$OUT/nvidia-smi-clock-events.csv" 2>&1

python3 -m specmon gpus >"$OUT/specmon-gpus.txt" 2>&1
python3 -m scripts.h200_gpu_check compare "$OUT" >"$OUT/compare.log" 2>&1
echo "compare exit $?" >>"$OUT/compare.log"

python3 -m benchmarks.nvml_poll >"$OUT/nvml_poll.json" 2>"$OUT/nvml_poll.err"
python3 -m benchmarks.nvml_poll --fake --gpus 8 >"$OUT/nvml_poll-fake8.json" 2>"$OUT/nvml_poll-fake8.err"
python3 -m scripts.h200_gpu_check screenshot "$OUT" --seconds 20 >"$OUT/screenshot.log" 2>&1

kill "$LOAD_PID" 2>/dev/null
wait "$LOAD_PID" 2>/dev/null
sleep 2
python3 -m specmon gpus --json >"$OUT/specmon-gpus-after.json" 2>&1
nvidia-smi --query-compute-apps=pid,used_memory --format=csv >"$OUT/nvidia-smi-apps-after.csv" 2>&1
echo "done: $(ls "$OUT" | tr '\n' ' ')"
cat "$OUT/compare.log"
