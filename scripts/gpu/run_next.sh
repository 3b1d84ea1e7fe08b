#!/usr/bin/env bash
# Next session's device calls, each on nvidia-h200-x2 and about 10 minutes:
#   EXACTFUSE_GIT_REV=<sha> bash scripts/gpu/run_next.sh a
#   EXACTFUSE_GIT_REV=<sha> bash scripts/gpu/run_next.sh b
# a, GPU 0: every W4A16 GPU test (the kernel gained KMAJOR after session 2's GPU run), the W4A16 sweep
#           with and without the K-major tile, the AOTInductor control.
#   GPU 1: the sparse benchmark (42 shapes), the activation tile sweep (d = 768), the moe sweep.
# b, both GPUs: the moe benchmark as two shards; then, here:
#   python3 scripts/merge_results.py benchmarks/results/h200 <files_at>/bench/s0/moe_silu_and_mul.json \
#     <files_at>/bench/s1/moe_silu_and_mul.json --plot benchmarks/results/h200/moe_silu_and_mul.png
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/bench"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=src:/tmp/site
bench() {  # gpu budget_s out_subdir op [extra args]
  local gpu=$1 budget=$2 sub=$3 op=$4; shift 4
  mkdir -p "$OUT/bench/$sub"
  CUDA_VISIBLE_DEVICES=$gpu timeout $((budget + 40)) python3 -m exactfuse bench --grid default --op "$op" \
    --time-budget "$budget" --out "$OUT/bench/$sub" --plot "$OUT/bench/$sub/{op}.png" "$@" > "$OUT/bench/$sub/$op.log" 2>&1
  echo "bench $sub/$op rc=$?" >> "$OUT/rc.txt"
}
run() {  # gpu limit_s name command...
  local gpu=$1 limit=$2 name=$3; shift 3
  CUDA_VISIBLE_DEVICES=$gpu timeout "$limit" "$@" > "$OUT/$name.txt" 2>&1
  echo "$name rc=$?" >> "$OUT/rc.txt"
}
case "${1:-a}" in
a)
  (
    run 0 150 t_w4a16 python3 -m pytest -m gpu -v --tb=short -p no:cacheprovider tests/ops/test_w4a16_gemm.py
    run 0 220 sweep_w4a16 python3 scripts/gpu/sweep_w4a16_decode.py
    run 0 150 aoti_control python3 scripts/gpu/aoti_control.py
  ) &
  (
    bench 1 250 sparse gelu_and_mul_sparse
    run 1 140 sweep_act python3 scripts/gpu/sweep_act_and_mul.py
    run 1 150 sweep_moe python3 scripts/gpu/sweep_moe.py --no-targets
  ) &
  wait
  cat "$OUT/rc.txt"
  echo "== w4a16 tests"; grep -E "FAILED|^E .*Error|passed|failed" "$OUT/t_w4a16.txt" | tail -6
  echo "== aoti"; grep -E "^(OK|FAIL|CRASH|step)" "$OUT/aoti_control.txt"
  echo "== w4a16 sweep"; tail -14 "$OUT/sweep_w4a16.txt" | cut -c1-220
  echo "== act sweep"; tail -14 "$OUT/sweep_act.txt" | cut -c1-160
  echo "== moe sweep"; grep -A6 DECISIONS "$OUT/sweep_moe.txt" | cut -c1-200
  ;;
b)
  bench 0 480 s0 moe_silu_and_mul --shard 0/2 &
  bench 1 480 s1 moe_silu_and_mul --shard 1/2 &
  wait
  cat "$OUT/rc.txt"
  ;;
esac
for f in "$OUT"/bench/*/*.log; do echo "== $f"; grep -E "time budget|wrote" "$f"; grep -A9 "speedup of exactfuse" "$f" | cut -c1-150 | head -10; done
tar czf "$OUT/bench.tgz" -C "$OUT" bench && rm -rf "$OUT/bench"
