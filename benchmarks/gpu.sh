#!/usr/bin/env bash
# `make test-gpu`: every GPU test and GPU benchmark, as one script, under 5 minutes.
# Runs with whatever Python has a CUDA build of torch (PYTHON=...), e.g. on a lent
# GPU machine: PYTHON=python3 bash benchmarks/gpu.sh | tee gpu-validation.log
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
status=0
step() { echo; echo "=== $* ==="; }

step "machine"
date -u +%Y-%m-%dT%H:%MZ
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv || status=1
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())" || status=1

step "GPU tests (pytest -m gpu)"
timeout 200 "$PY" -m pytest -m gpu -q -p no:playwright -p no:cacheprovider -o addopts="" \
  tests/gpu -rs || status=1

step "labs on the GPU (lowbit lab run)"
for lab in gpu-status torch-env; do timeout 60 "$PY" -m app.cli lab run "$lab" || status=1; done
timeout 60 "$PY" -m app.cli lab run block-quantize --param format=nvfp4 --param shape=[4096,4096] || status=1

step "quantization benchmark on CUDA"
timeout 120 "$PY" benchmarks/quant.py --device cuda || status=1

echo; echo "test-gpu exit status: $status"
exit $status
