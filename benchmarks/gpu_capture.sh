#!/usr/bin/env bash
# Record the real-GPU fixture of issue 7 and validate NVML telemetry, on a machine with one NVIDIA
# GPU, PyTorch with CUDA/NCCL and nvidia-ml-py (how it was run: tests/fixtures/traces/h200-1rank-nccl/README.md).
#
#   OUT=/some/dir bash benchmarks/gpu_capture.sh
#
# Writes $OUT/capture.tar.gz (run directory, converted ETs, analyze output, validation JSON,
# versions, test log), $OUT/nvml_raw.csv.gz (every NVML reading of the validation) and $OUT/log.
set -u
OUT=${OUT:-/tmp/gpu-capture}
CAP=/tmp/cap
rm -rf "$CAP" && mkdir -p "$OUT" "$CAP"
exec > >(tee "$OUT/log") 2>&1
if [ -d .whl ]; then  # wheels carried to a machine without a package index
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1
python3 setup.py -q build_ext --inplace > "$CAP/build.log" 2>&1 || { echo "C helpers not built: numpy oracles"; tail -5 "$CAP/build.log"; export CHARLLM_TRACE_NATIVE=0; }
ct() { python3 -c 'import sys; from charllm_trace.cli.app import main; sys.exit(main())' "$@"; }
date -u +%FT%TZ
nvidia-smi > "$CAP/nvidia-smi.txt"; nvidia-smi -q > "$CAP/nvidia-smi-q.txt"
python3 - > "$CAP/versions.json" <<'PY'
import json, platform, torch, pynvml
pynvml.nvmlInit()
print(json.dumps({"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
  "nccl": ".".join(map(str, torch.cuda.nccl.version())), "gpu": torch.cuda.get_device_name(0),
  "driver": pynvml.nvmlSystemGetDriverVersion(), "nvml": pynvml.nvmlSystemGetNVMLVersion(),
  "nvidia_ml_py": getattr(pynvml, "__version__", None), "kernel": platform.release()}, indent=1))
PY
cat "$CAP/versions.json"
echo "== 1. NVML validation"; date -u +%T
timeout 120 python3 benchmarks/validate_nvml.py --out "$CAP/nvml_validation.json" --raw "$OUT/nvml_raw.csv.gz"
echo "== 2. collect"; date -u +%T
timeout 240 python3 -c 'import sys; from charllm_trace.cli.app import main; sys.exit(main())' collect -o "$CAP/run" --steps 3-6 \
  --telemetry-hz "${HZ:-1000}" --parallel dp=1 --workload model=gpt-273m,mbs=32,gbs=32,seq=2048 -- \
  python3 -m torch.distributed.run --standalone --nproc_per_node 1 examples/train_gpt_gpu.py --steps 9 \
  --step-times "$CAP/step_times.json"
echo "rc=$?"; date -u +%T
echo "== 3. convert + analyze"
time ct convert "$CAP/run" -o "$CAP/et"
time ct analyze "$CAP/et" --format json -o "$CAP/analyze.json"
ct analyze "$CAP/et" --wide > "$CAP/analyze.txt" 2>&1; head -c 6000 "$CAP/analyze.txt"
echo "== 4. gpu tests"; date -u +%T
timeout 200 python3 -m pytest -q -rs -m gpu -p no:cacheprovider tests/collectors/test_telemetry_backends.py tests/graph/test_gpu_chain.py > "$CAP/pytest.log" 2>&1
echo "pytest rc=$?"; tail -15 "$CAP/pytest.log"
date -u +%T
tar czf "$OUT/capture.tar.gz" -C /tmp cap && ls -la "$OUT"
