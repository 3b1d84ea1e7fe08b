#!/usr/bin/env bash
# Device call 2: GPU tests (activations, registry, w4a16, moe, bench), sweeps, probe, quick bench.
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=src:/tmp/site
fi
timeout 200 python3 -m pytest -m gpu tests/registry tests/ops/test_activation.py tests/ops/test_w4a16_gemm.py \
  tests/ops/test_w4a16_packing.py tests/ops/test_moe_silu_and_mul.py tests/bench -q -p no:cacheprovider \
  > "$OUT/pytest_gpu.txt" 2>&1; tail -25 "$OUT/pytest_gpu.txt"
timeout 100 python3 scripts/gpu/sweep_act_and_mul.py > "$OUT/sweep_act.txt" 2>&1; tail -32 "$OUT/sweep_act.txt"
timeout 150 python3 scripts/gpu/sweep_w4a16.py > "$OUT/sweep_w4a16.txt" 2>&1; tail -40 "$OUT/sweep_w4a16.txt"
cp -f "$OUT"/sweep_w4a16.json "$OUT"/ 2>/dev/null
timeout 40 python3 scripts/gpu/probe_activation_math.py 5000000 > "$OUT/probe.txt" 2>&1; tail -24 "$OUT/probe.txt"
timeout 90 python3 -m exactfuse bench --quick --op silu_and_mul --op gelu_and_mul --out "$OUT/bench" > "$OUT/bench_quick.txt" 2>&1; tail -30 "$OUT/bench_quick.txt"
