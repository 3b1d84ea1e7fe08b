#!/usr/bin/env bash
# One device call: GPU tests of the foundation, the math probe, the launch sweep, verify.
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L; python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"
python3 -m pytest -m gpu tests/registry tests/ops/test_activation.py -q -p no:cacheprovider 2>&1 | tee "$OUT/pytest_gpu.txt" | tail -40
python3 scripts/gpu/probe_activation_math.py 15000000 2>&1 | tee "$OUT/probe.txt"
python3 scripts/gpu/sweep_act_and_mul.py 2>&1 | tee "$OUT/sweep.txt"
python3 -m exactfuse verify --op silu_and_mul --op gelu_and_mul 2>&1 | tee "$OUT/verify.txt"
