#!/usr/bin/env bash
# Device call 3: every GPU test, a short activation sweep, default-grid benches of the activation ops.
set -uo pipefail
export PYTHONUNBUFFERED=1 EXACTFUSE_GIT_REV=${EXACTFUSE_GIT_REV:-unknown}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/bench"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=src:/tmp/site
timeout 285 python3 -m pytest -m gpu -v --timeout 150 --durations 25 -p no:cacheprovider tests 2>&1 \
  | tee "$OUT/pytest_gpu.txt" | grep -E "FAILED|ERROR|passed|failed|Timeout" | tail -40
timeout 45 python3 scripts/gpu/sweep_act_and_mul.py 2>&1 | tee "$OUT/sweep_act.txt" | tail -20
for spec in ${BENCH_SPECS:-silu_and_mul:70 gelu_and_mul:70 gelu_and_mul_sparse:110}; do
  op=${spec%%:*}; limit=${spec##*:}
  timeout $limit python3 -m exactfuse bench --op $op --out "$OUT/bench" --plot "$OUT/bench/{op}.png" \
    > "$OUT/bench/$op.log" 2>&1; grep -A12 "speedup of exactfuse" "$OUT/bench/$op.log" | tail -9
done
tar czf "$OUT/bench.tgz" -C "$OUT" bench && rm -rf "$OUT/bench"
