#!/usr/bin/env bash
# The one prepared command of a GPU device call (docs/calibration.md, "On a lent GPU machine").
# In about 9 minutes it
#   1. measures operator bundles of the six shipped model configs with PyTorch on the GPU
#      (scripts/device/measure_operators.py, a 6-minute budget) and checks that capsim reads
#      each one (`capsim calibrate --operators`);
#   2. calibrates the shipped ONNX models with ONNX Runtime: with its CUDA provider when this
#      machine's onnxruntime has one, else (saying why) with its CPU provider, labelled as the
#      device host's CPU.
# It runs there: PyTorch and a CPU onnxruntime, no Rust, no registry, nothing fetched. The capsim
# it runs is the stripped binary scripts/device/pack.sh built here (target/device/capsim, the
# call's carry). Everything lands in $OUT as at most 8 files, none more than 2 folders down (the
# tool's limits): run.log, environment.txt, operators.tar.gz, operator-checks.txt and
# onnx-profiles.tar.gz (the ONNX Runtime profiles and their fit plots).
#
#     run tool: command "bash scripts/device/run.sh", carry ["target/device"], timeout_s 600
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:?set OUT to the folder the results go to}
python=${PYTHON:-python3}
capsim=${CAPSIM:-target/device/capsim}
# For a rehearsal here: MEASURE_ARGS=--dry-run MODELS="a.json b.json" (see docs/calibration.md).
measure_args=${MEASURE_ARGS:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The shipped configs, smallest deployments first (measure_operators.py measures every model's
# first degree before any second one, so a budget running short leaves the most models covered).
models=(
  models/meta-llama/Llama-3.1-8B.json
  models/Qwen/Qwen3-32B.json
  models/mistralai/Mixtral-8x7B-v0.1.json
  models/Qwen/Qwen3-30B-A3B-Instruct-2507.json
  models/microsoft/Phi-mini-MoE-instruct.json
  models/meta-llama/Llama-3.1-70B.json
)
if [ -n "${MODELS:-}" ]; then read -r -a models <<< "$MODELS"; fi

describe_machine() {
  echo "# device run $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,clocks.max.sm \
    --format=csv 2>&1
  "$python" -c 'import sys, torch; print("python", sys.version.split()[0]); print("torch",
torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())' 2>&1
  "$python" -c 'import onnxruntime as o; print("onnxruntime", o.__version__, "providers",
" ".join(o.get_available_providers()))' 2>&1
  echo "glibc: $(ldd --version 2>&1 | head -1)"
  echo "capsim: $("$capsim" --version 2>&1 | head -1)"
}

capsim_runs() {
  "$capsim" --version > /dev/null 2>&1
}

# Part 1: the operator bundles, then capsim reading each at each degree.
measure_operators() {
  local args=() model
  for model in "${models[@]}"; do args+=(--model "$model"); done
  PYTHONUNBUFFERED=1 timeout 400 "$python" scripts/device/measure_operators.py "${args[@]}" \
    --budget 6min --out "$work/pytorch" $measure_args
  echo "measure_operators.py exit status $?"
  tar -czf "$out/operators.tar.gz" -C "$work" pytorch
}

check_bundles() {
  local meta bundle hardware id tp
  if ! capsim_runs; then
    echo "not checked: $capsim does not run here ($("$capsim" --version 2>&1 | head -1))"
    return
  fi
  for meta in "$work"/pytorch/*/*/*/*/meta.yaml; do
    [ -e "$meta" ] || continue
    bundle=$(dirname "$meta")
    # pytorch/<hardware>/<org>/<name>/<variant>/meta.yaml
    hardware=$(basename "$(dirname "$(dirname "$(dirname "$bundle")")")")
    id=$(basename "$(dirname "$(dirname "$bundle")")")/$(basename "$(dirname "$bundle")")
    for tp in 1 2 4 8; do
      [ -d "$bundle/tp$tp" ] || continue
      echo "== $id tp$tp"
      "$capsim" calibrate --operators "$bundle" --model "models/$id.json" \
        --tensor-parallel "$tp" --hardware "${hardware,,}" 2>&1
      echo "exit status $?"
    done
  done
}

# Part 2: ONNX Runtime's CUDA provider when there is one, else its CPU provider.
calibrate_onnx() {
  local providers lib ep label
  if ! capsim_runs; then
    echo "ONNX Runtime calibration not run: $capsim does not run here"
    return
  fi
  providers=$("$python" -c 'import onnxruntime as o; print(" ".join(o.get_available_providers()))')
  lib=$("$python" -c 'import glob, os, onnxruntime as o
libs = sorted(glob.glob(os.path.join(os.path.dirname(o.__file__), "capi", "libonnxruntime.so*")))
print(libs[-1] if libs else "")')
  if [ -z "$lib" ]; then
    echo "ONNX Runtime calibration not run: no libonnxruntime.so in this Python's onnxruntime"
    return
  fi
  if [[ " $providers " == *" CUDAExecutionProvider "* ]]; then
    ep=cuda; label=cuda
  else
    ep=cpu; label=device-host-cpu
    echo "CUDA calibration not run: this machine's onnxruntime ($lib) offers only" \
      "$providers; the CUDA build (onnxruntime-gpu with CUDA and cuDNN, hundreds of MB)" \
      "cannot travel in the 64 MiB a call carries. Calibrating with the CPU provider of the" \
      "device's host instead, labelled $label."
  fi
  mkdir -p "$work/onnx"
  # Grids as scripts/calibrate_gpu.sh's on a GPU, smaller on a CPU, inside a ~2-minute share.
  local batches=1,2,4,8,16,32,64,128,256 seqs=16,32,64,128,256,512 iters=200
  if [ "$ep" = cpu ]; then batches=1,2,4,8,16,32; seqs=16,64,256; iters=60; fi
  timeout 80 "$capsim" calibrate --model traces/models/text_classifier.onnx --ep "$ep" \
    --ort-lib "$lib" --batch "$batches" --dim "seq=$seqs" --warmup 20 --iters "$iters" \
    --min-iters 20 -o "$work/onnx/text_classifier.$label.json"
  echo "text_classifier exit status $?"
  timeout 50 "$capsim" calibrate --model traces/models/image_cnn.onnx --ep "$ep" \
    --ort-lib "$lib" --batch "$batches" --warmup 20 --iters "$iters" --min-iters 20 \
    -o "$work/onnx/image_cnn.$label.json"
  echo "image_cnn exit status $?"
  tar -czf "$out/onnx-profiles.tar.gz" -C "$work" onnx
}

main() {
  describe_machine | tee "$out/environment.txt"
  measure_operators
  check_bundles > "$out/operator-checks.txt"
  grep -c '^exit status 0' "$out/operator-checks.txt" | sed 's/$/ bundle degrees read by capsim/'
  calibrate_onnx 2>&1 | tee -a "$out/environment.txt"
  echo "done in ${SECONDS}s; files in \$OUT: $(ls "$out" | tr '\n' ' ')"
}

main 2>&1 | tee "$out/run.log"
