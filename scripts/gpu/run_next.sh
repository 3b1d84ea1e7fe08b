#!/usr/bin/env bash
# What the next session's GPU time should run first (see NOTES.md). Two device calls:
#   bash scripts/gpu/run_next.sh tests    # the GPU tests not yet passed + verify (about 5 min)
#   bash scripts/gpu/run_next.sh bench    # moe / sparse / w4a16 benches + the gemv probe (about 9 min)
set -uo pipefail
export PYTHONUNBUFFERED=1 EXACTFUSE_GIT_REV=${EXACTFUSE_GIT_REV:-unknown}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=src:/tmp/site
P="python3 -m pytest -m gpu -v --timeout 200 --tb=short -p no:cacheprovider"
case "${1:-tests}" in
tests)
  timeout 150 $P tests/ops/test_gelu_and_mul_sparse.py tests/registry/test_library.py -k "sparse or aot or compile_fullgraph_equals_eager" \
    2>&1 | tee "$OUT/sparse.txt" | grep -E "PASSED|FAILED|^E " | head -30
  timeout 150 $P tests/ops/test_moe_silu_and_mul.py -k "int64_offsets" 2>&1 | grep -E "PASSED|FAILED|^E "
  timeout 150 python3 -m exactfuse verify 2>&1 | tee "$OUT/verify.txt" | tail -22
  ;;
bench)
  mkdir -p "$OUT/bench"
  for spec in moe_silu_and_mul:200 gelu_and_mul_sparse:150 w4a16_gemm:150; do
    op=${spec%%:*}; limit=${spec##*:}
    timeout "$limit" python3 -m exactfuse bench --op "$op" --out "$OUT/bench" --plot "$OUT/bench/{op}.png" \
      > "$OUT/bench/$op.log" 2>&1; grep -A12 "speedup of exactfuse" "$OUT/bench/$op.log" | tail -9
  done
  timeout 60 python3 scripts/gpu/probe_w4a16_gemv.py 2>&1 | tee "$OUT/gemv.txt" | tail -27
  tar czf "$OUT/bench.tgz" -C "$OUT" bench && rm -rf "$OUT/bench"
  ;;
esac
