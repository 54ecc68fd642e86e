#!/usr/bin/env bash
# Calibrates the shipped models on an NVIDIA GPU with ONNX Runtime's CUDA provider and writes the
# profiles, with the card, driver and versions, under traces/profiles/. Needs a driver for CUDA 13;
# installs onnxruntime-gpu with its cuda and cudnn pip extras into target/venv-gpu (ignored by git).
#
#     scripts/calibrate_gpu.sh            # then commit traces/profiles/
#
# For a GPU machine that reaches PyPI and has Rust. The lent GPU machine (no registry, no Rust,
# 64 MiB carried) cannot run this: use scripts/device/ there (docs/calibration.md, "On a lent GPU
# machine").
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
venv=target/venv-gpu
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check 'onnxruntime-gpu[cuda,cudnn]==1.31.1'
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
lib=$(ls "$site"/onnxruntime/capi/libonnxruntime.so.* | sort | tail -1)
# CUDA and cuDNN come from the nvidia-* pip packages; let the loader find them wherever they sit.
nvidia_libs=$(find "$site/nvidia" -maxdepth 3 -type d -name lib 2>/dev/null | paste -sd: -)
export LD_LIBRARY_PATH="${nvidia_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

cargo build --release --bin capsim
mkdir -p traces/profiles
{
  echo "# GPU calibration environment ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
  echo "onnxruntime-gpu: $("$venv/bin/python" -c 'import onnxruntime; print(onnxruntime.__version__)')"
  echo "library: $lib"
} > traces/profiles/gpu-environment.txt
cat traces/profiles/gpu-environment.txt

batches=1,2,4,8,16,32,64,128,256
target/release/capsim calibrate --model traces/models/text_classifier.onnx --ep cuda --ort-lib "$lib" \
  --batch "$batches" --dim seq=16,32,64,128,256,512 --warmup 20 --iters 200 \
  -o traces/profiles/text_classifier.cuda.json
target/release/capsim calibrate --model traces/models/image_cnn.onnx --ep cuda --ort-lib "$lib" \
  --batch "$batches" --warmup 20 --iters 200 \
  -o traces/profiles/image_cnn.cuda.json
