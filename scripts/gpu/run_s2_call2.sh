#!/usr/bin/env bash
# Session 2, device call 2: sparse compile/AOTI after the fp64 cast, verify per op, W4A16 variant sweep.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
P="python3 -m pytest -m gpu -v --tb=short -p no:cacheprovider"
timeout 200 $P tests/ops/test_gelu_and_mul_sparse.py tests/registry/test_library.py \
  -k "compile or aot" > "$OUT/t_sparse.txt" 2>&1 &
timeout 230 bash -c 'for op in silu_and_mul gelu_and_mul moe_silu_and_mul gelu_and_mul_sparse w4a16_gemm; do
    timeout 110 python3 -m exactfuse verify --op $op > "$OUT/verify_$op.txt" 2>&1; echo "verify $op rc=$?" >> "$OUT/verify_rc.txt"
  done' &
wait
echo "== t_sparse"; grep -E "PASSED|FAILED|ERROR|^E .*Error|passed|failed" "$OUT/t_sparse.txt" | head -12
echo "== verify"; cat "$OUT/verify_rc.txt"; for f in "$OUT"/verify_*_*.txt "$OUT"/verify_w4a16_gemm.txt; do grep -E "PASS|FAIL" "$f" | tail -4; done
timeout 330 python3 scripts/gpu/sweep_w4a16_variants.py > "$OUT/sweep_w4a16_variants.txt" 2>&1; echo "== w4a16 sweep rc=$?"
cut -c1-150 "$OUT/sweep_w4a16_variants.txt" | tail -32
