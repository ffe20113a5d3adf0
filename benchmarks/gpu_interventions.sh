#!/usr/bin/env bash
# Issue 22 item 2 on one NVIDIA GPU: real runs of examples/train_gpt_gpu.py (NCCL, world size 1) in
# which one thing is changed by a known amount, for benchmarks/interventions.py to compare with
# `analyze --what-if`. Set up as benchmarks/gpu_capture.sh (no network; python3 with torch+CUDA;
# the package on PYTHONPATH, C helpers built in place). Finishes in about 4-5 minutes.
#
#   OUT=/some/dir bash benchmarks/gpu_interventions.sh
#   CPU=1 MODEL="--batch 2 --seq 64 --d-model 128 --heads 4 --layers 2 --vocab 512" STEPS=10 bash ...
#     (the CPU path: gloo, float32, a smoke test of the script)
#
# Every run toggles its change on odd steps only (--change-on odd): each changed step has base
# neighbours under the same load. Runs: null (switches installed, nothing changed: the noise),
# mm2 (every matrix product twice), ar2 (every gradient all-reduce twice), delay (busy-wait
# DELAY_US before every operator), cores (all cores -> core 0). Writes $OUT/gi-<run>.tar.gz
# (per run: run dir, converted ETs, manifest, switch log with per-step times) and $OUT/log; then
# examples/infer_tiny.py collected by its `batch` marker on all cores and on one core (NO_INFER=1 skips).
set -u
OUT=${OUT:-/tmp/gpu-interventions}
W=/tmp/gi
STEPS=${STEPS:-24}          # steps per run; steps 4-9 are traced
TRACED=${TRACED:-4-9}
DELAY_US=${DELAY_US:-200}
MODEL=${MODEL:-"--batch 16 --seq 2048 --d-model 2048 --heads 16 --layers 4 --vocab 16384"}
rm -rf "$W" && mkdir -p "$OUT" "$W"
exec > >(tee "$OUT/log") 2>&1
T0=$(date +%s)
if [ -d .whl ]; then  # wheels carried to a machine without a package index
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1
python3 setup.py -q build_ext --inplace > "$W/build.log" 2>&1 || { echo "C helpers not built: numpy oracles"; tail -5 "$W/build.log"; export CHARLLM_TRACE_NATIVE=0; }
CT=(python3 -c 'import sys; from charllm_trace.cli.app import main; sys.exit(main())')
date -u +%FT%TZ
DEV_OPT=${CPU:+--cpu}
[ -z "${CPU:-}" ] && nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv | tee "$W/gpu.csv"
python3 -c 'import torch, json, os; c = torch.cuda.is_available(); print(json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(0) if c else None, "cpus": os.cpu_count()}))' | tee "$W/versions.json"
NCPU=$(nproc)

record() {  # name, switch options...
    local name=$1; shift
    echo "== $name ($(( $(date +%s) - T0 )) s): $*"
    mkdir -p "$W/$name"
    timeout 100 "${CT[@]}" collect \
      -o "$W/$name/run" --steps "$TRACED" --parallel dp=1 -- \
      python3 -m torch.distributed.run --standalone --nproc_per_node 1 examples/train_gpt_gpu.py \
      --steps "$STEPS" $MODEL $DEV_OPT --switches --change-on odd --switch-log "$W/$name/switch_log.json" "$@" \
      > "$W/$name/collect.log" 2>&1
    echo "collect rc=$?"; grep -E "^step|parameters" "$W/$name/collect.log" | head -12
    timeout 60 "${CT[@]}" convert "$W/$name/run" -o "$W/$name/et" > "$W/$name/convert.log" 2>&1
    echo "convert rc=$?"
    cp "$W/$name/run/manifest.json" "$W/$name/" 2>/dev/null
    du -sh "$W/$name"
    # one tarball per run (the run dir too: the ETs can be converted again by a later version)
    tar czf "$OUT/gi-$name.tar.gz" -C "$W" "$name"
}

infer() {  # name, taskset cores or "", then the example's options: CPU allocation for inference (issue 24)
    local name=$1 cores=$2; shift 2
    echo "== $name ($(( $(date +%s) - T0 )) s): cores=${cores:-all} $*"
    mkdir -p "$W/$name"
    local pin=()
    [ -n "$cores" ] && pin=(taskset -c "$cores")
    timeout 100 "${pin[@]}" "${CT[@]}" collect --step-marker batch --steps 1-3 -o "$W/$name/run" -- \
      python3 examples/infer_tiny.py $INFER_OPT "$@" > "$W/$name/collect.log" 2>&1
    echo "collect rc=$?"; tail -3 "$W/$name/collect.log"
    timeout 60 "${CT[@]}" analyze "$W/$name/run" --step-marker batch --per-step > "$W/$name/analyze.txt" 2>&1
    echo "analyze rc=$?"; grep -iE "ttft|tpot|iteration|idle" "$W/$name/analyze.txt" | head -8
    tar czf "$OUT/gi-$name.tar.gz" -C "$W" "$name"
}

record null
record mm2 --mm-repeat 2
record ar2 --allreduce-repeat 2
record delay --cpu-delay-us "$DELAY_US"
record cores --cpus "0-$((NCPU - 1))" --fewer-cpus 0
if [ -f examples/infer_tiny.py ] && [ -z "${NO_INFER:-}" ]; then
    DEVICE=cuda; [ -n "${CPU:-}" ] && DEVICE=cpu
    INFER_OPT=${INFER_OPT:-"--device $DEVICE --requests 32 --batch 8 --new-tokens 32"}
    infer infer-all ""
    infer infer-1core 0
fi
echo "== done in $(( $(date +%s) - T0 )) s"
ls -la "$OUT"
