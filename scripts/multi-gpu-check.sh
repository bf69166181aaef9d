#!/usr/bin/env bash
# Prove specmon's GPU readings on a machine with several NVIDIA GPUs (issue 6): run from the repository
# root on the device machine (OUT=<folder>, default /tmp/multi-gpu-out). One NCCL all-reduce worker per
# GPU (separate processes, init_method file://, no torchrun) loops all_reduce on a 256 MiB tensor while a
# second process holds 10 GiB on GPUs 0 and 1 (HOLD_GPUS, HOLD_GIB).
# Meanwhile `python3 -m specmon gpus --json`, nvidia-smi and NVML's NVLink counters read the GPUs at the same
# moment, a `--watch 1` run records about 10 s, and scripts/multi_gpu_check.py compares everything. Then
# benchmarks/nvml_poll.py times a full poll and the GPU pane, fed by the sampler's thread, is saved as SVG.
# Every file goes into $OUT/multi-gpu.tgz (written even when the run stops early); $OUT/compare.json too.
# NVLink multicast stays off: the three variables below are exported to every child.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CUDA_DEVICE_ORDER=PCI_BUS_ID  # CUDA's device numbers = NVML's (and nvidia-smi's) indices
export NCCL_DEBUG="${NCCL_DEBUG:-INFO}"
export PYTHONFAULTHANDLER=1  # a crash in a C library (NVML, NCCL) leaves a Python traceback in the step's .err
OUT="${OUT:-/tmp/multi-gpu-out}"
WORK="${WORK:-/tmp/multi-gpu-check}"
LOAD_SECONDS="${LOAD_SECONDS:-240}"
HOLD_GIB="${HOLD_GIB:-10}"
HOLD_GPUS="${HOLD_GPUS:-0,1}"  # HOLD_GPUS=0 rehearses the script on a one-GPU machine
cd "$(dirname "$0")/.."
source scripts/device-env.sh
rm -rf "$WORK"
mkdir -p "$OUT" "$WORK/workers"
CHILDREN=()
STATUS=1

stop_children() {  # TERM (the workers then leave after the same all-reduce and print their bandwidth), KILL after 30 s
    for pid in "${CHILDREN[@]}"; do kill "$pid" 2>/dev/null; done
    for _ in $(seq 1 60); do
        alive=0
        for pid in "${CHILDREN[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
        [ "$alive" -eq 0 ] && break
        sleep 0.5
    done
    for pid in "${CHILDREN[@]}"; do kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done
    CHILDREN=()
}

finish() {
    stop_children
    echo "exit $STATUS" >"$WORK/exit-status.txt"
    [ -f "$WORK/compare.json" ] && cp "$WORK/compare.json" "$OUT/compare.json"
    tar -czf "$OUT/multi-gpu.tgz" -C "$(dirname "$WORK")" "$(basename "$WORK")"
    echo "archive: $OUT/multi-gpu.tgz ($(ls "$WORK" | tr '\n' ' '))"
}
trap finish EXIT

fail() {
    echo "$1" | tee "$WORK/FAILED" >&2
    STATUS="${2:-1}"
    exit "$STATUS"
}

{
    date -u +"%Y-%m-%dT%H:%M:%SZ"
    uname -a
    python3 --version
    git rev-parse --verify -q HEAD || echo "not a git checkout"
    env | grep -E '^(NCCL_|TORCH_SYMM|NVSHMEM_|CUDA_)' | sort
} >"$WORK/environment.txt" 2>&1

# Fail early and clearly when there is nothing to check; still record what specmon says.
python3 -m specmon gpus --json >"$WORK/specmon-gpus-detect.json" 2>"$WORK/specmon-gpus-detect.err"
SAID=$(head -c 300 "$WORK/specmon-gpus-detect.json" | tr -d '\n')
[ -n "$SAID" ] || SAID=$(tail -n 1 "$WORK/specmon-gpus-detect.err")
if ! command -v nvidia-smi >/dev/null 2>&1; then
    fail "no NVIDIA GPU: nvidia-smi is not on PATH (specmon gpus --json: $SAID)" 2
fi
nvidia-smi -L >"$WORK/nvidia-smi-L.txt" 2>&1
GPUS=$(grep -c '^GPU ' "$WORK/nvidia-smi-L.txt")
[ "$GPUS" -ge 1 ] || fail "no NVIDIA GPU: nvidia-smi lists none ($(head -c 300 "$WORK/nvidia-smi-L.txt"))" 2
NEEDED=$(( $(tr ',' '\n' <<<"$HOLD_GPUS" | sort -n | tail -n 1) + 1 ))
[ "$GPUS" -ge "$NEEDED" ] || fail "needs at least $NEEDED GPUs (the holder takes GPUs $HOLD_GPUS), nvidia-smi lists $GPUS" 2
echo "$GPUS GPUs" | tee -a "$WORK/environment.txt"

python3 -c "import pynvml, psutil, torch; print('nvidia-ml-py', getattr(pynvml, '__version__', '?'), 'psutil', psutil.__version__, 'torch', torch.__version__, 'nccl', torch.cuda.nccl.version())" \
    >>"$WORK/environment.txt" 2>&1

nvidia-smi >"$WORK/nvidia-smi-before.txt" 2>&1
nvidia-smi topo -m >"$WORK/nvidia-smi-topo.txt" 2>&1
nvidia-smi nvlink -s >"$WORK/nvidia-smi-nvlink-status.txt" 2>&1
python3 -m specmon gpus --json >"$WORK/specmon-gpus-idle.json" 2>"$WORK/specmon-gpus-idle.err"

for rank in $(seq 0 $((GPUS - 1))); do
    python3 -m scripts.multi_gpu_check allreduce --rank "$rank" --world "$GPUS" --init "$WORK/nccl-init" \
        --ready "$WORK/workers" --mib 256 --seconds "$LOAD_SECONDS" >"$WORK/workers/rank-$rank.log" 2>&1 &
    CHILDREN+=("$!")
done
python3 -m scripts.multi_gpu_check hold --gpus "$HOLD_GPUS" --gib "$HOLD_GIB" --seconds "$LOAD_SECONDS" \
    --ready "$WORK/holder.ready" >"$WORK/holder.log" 2>&1 &
CHILDREN+=("$!")
for _ in $(seq 1 360); do
    ready=$(ls "$WORK/workers" | grep -c '\.ready$')
    [ "$ready" -eq "$GPUS" ] && [ -s "$WORK/holder.ready" ] && break
    for pid in "${CHILDREN[@]}"; do kill -0 "$pid" 2>/dev/null || fail "a load process (pid $pid) exited early; see $WORK/workers/*.log and holder.log"; done
    sleep 0.5
done
[ "$(ls "$WORK/workers" | grep -c '\.ready$')" -eq "$GPUS" ] && [ -s "$WORK/holder.ready" ] \
    || fail "the all-reduce workers or the holder did not get ready in 180 s; see $WORK/workers/*.log"
sleep 5  # utilization is averaged over the last sample period: let it settle at the load's level

# The same moment: NVML's NVLink counters (over 5 s), specmon and nvidia-smi start together.
nvidia-smi nvlink -gt d >"$WORK/nvidia-smi-nvlink-counters-before.txt" 2>&1
python3 -m scripts.multi_gpu_check nvlink "$WORK/nvlink.json" --seconds 5 >"$WORK/nvlink.log" 2>&1 &
P0=$!
python3 -m specmon gpus --json >"$WORK/specmon-gpus.json" 2>"$WORK/specmon-gpus.err" &
P1=$!
nvidia-smi --query-gpu=index,name,uuid,memory.used,memory.total,utilization.gpu,utilization.memory,power.draw,power.limit,temperature.gpu,clocks.sm,clocks.mem,pcie.link.gen.current,pcie.link.width.current \
    --format=csv >"$WORK/nvidia-smi-gpu.csv" 2>&1 &
P2=$!
nvidia-smi --query-compute-apps=pid,used_memory,gpu_uuid,process_name --format=csv >"$WORK/nvidia-smi-apps.csv" 2>&1 &
P3=$!
wait "$P0" "$P1" "$P2" "$P3"
nvidia-smi nvlink -gt d >"$WORK/nvidia-smi-nvlink-counters-after.txt" 2>&1
nvidia-smi dmon -s pucvmet -c 5 >"$WORK/nvidia-smi-dmon.txt" 2>&1

timeout -s INT 10.5 python3 -m specmon gpus --json --watch 1 >"$WORK/specmon-watch.jsonl" 2>"$WORK/specmon-watch.err"
python3 -m specmon gpus >"$WORK/specmon-gpus.txt" 2>&1
if ! python3 -m benchmarks.nvml_poll >"$WORK/nvml_poll.json" 2>"$WORK/nvml_poll.err"; then
    # it crashed once in the one-GPU rehearsal (a segfault): keep that run's output and try once more
    mv "$WORK/nvml_poll.json" "$WORK/nvml_poll-failed.json"
    mv "$WORK/nvml_poll.err" "$WORK/nvml_poll-failed.err"
    python3 -m benchmarks.nvml_poll >"$WORK/nvml_poll.json" 2>"$WORK/nvml_poll.err"
fi
python3 -m scripts.multi_gpu_check screenshot "$WORK" --seconds 20 >"$WORK/screenshot.log" 2>&1

python3 -m scripts.multi_gpu_check compare "$WORK" --holder-gib "$HOLD_GIB" >"$WORK/compare.log" 2>&1
STATUS=$?

stop_children
sleep 2
python3 -m specmon gpus --json >"$WORK/specmon-gpus-after.json" 2>&1
nvidia-smi --query-compute-apps=pid,used_memory,gpu_uuid --format=csv >"$WORK/nvidia-smi-apps-after.csv" 2>&1
cat "$WORK/compare.log"
exit "$STATUS"
