#!/usr/bin/env bash
# On one H200 (or any CUDA GPU): tokens/s and MFU of a ~1B dense and an MoE training step, eager
# and with torch.compile, within 8 minutes. Prints JSON lines; writes them to $OUT/gpu.jsonl when
# $OUT is set. Needs torch with CUDA and this project installed (pip install -e .).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
out="${OUT:-/tmp}/gpu.jsonl"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
timeout 220 python3 bench/gpu_throughput.py --steps 10 | tee "$out"
timeout 250 python3 bench/gpu_throughput.py --steps 10 --compile | tee -a "$out"
