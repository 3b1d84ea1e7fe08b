#!/usr/bin/env bash
# Next session's first device call (nvidia-h200-x2), about 9 minutes. EXACTFUSE_GIT_REV=<sha> bash scripts/gpu/run_next.sh
# GPU 0: the K-major W4A16 GPU test, the W4A16 sweep with the K-major tile, the AOTInductor control
#        (plain step without exactfuse imported), then moe bench shard 0/2.
# GPU 1: moe bench shard 1/2, then the sparse bench (42 shapes).
# Afterwards, here: python3 scripts/merge_results.py benchmarks/results/h200 <out>/bench/s0/moe_silu_and_mul.json \
#   <out>/bench/s1/moe_silu_and_mul.json --plot benchmarks/results/h200/moe_silu_and_mul.png
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/bench/s0" "$OUT/bench/s1" "$OUT/bench/sparse"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=src:/tmp/site
bench() {  # gpu budget_s out_subdir op [extra args]
  local gpu=$1 budget=$2 sub=$3 op=$4; shift 4
  CUDA_VISIBLE_DEVICES=$gpu timeout $((budget + 40)) python3 -m exactfuse bench --grid default --op "$op" \
    --time-budget "$budget" --out "$OUT/bench/$sub" --plot "$OUT/bench/$sub/{op}.png" "$@" > "$OUT/bench/$sub/$op.log" 2>&1
  echo "bench $sub/$op rc=$?" >> "$OUT/rc.txt"
}
(
  CUDA_VISIBLE_DEVICES=0 timeout 100 python3 -m pytest -m gpu -v --tb=short -p no:cacheprovider \
    tests/ops/test_w4a16_gemm.py -k kmajor > "$OUT/t_kmajor.txt" 2>&1
  CUDA_VISIBLE_DEVICES=0 timeout 200 python3 scripts/gpu/sweep_w4a16_decode.py > "$OUT/sweep_w4a16.txt" 2>&1
  CUDA_VISIBLE_DEVICES=0 timeout 120 python3 scripts/gpu/aoti_control.py > "$OUT/aoti_control.txt" 2>&1
  bench 0 260 s0 moe_silu_and_mul --shard 0/2
) &
(
  bench 1 300 s1 moe_silu_and_mul --shard 1/2
  bench 1 230 sparse gelu_and_mul_sparse
) &
wait
cat "$OUT/rc.txt"
echo "== kmajor"; grep -E "PASSED|FAILED|^E .*Error" "$OUT/t_kmajor.txt" | head
echo "== aoti"; grep -E "^(OK|FAIL|CRASH|step)" "$OUT/aoti_control.txt"
echo "== sweep"; tail -14 "$OUT/sweep_w4a16.txt" | cut -c1-220
tar czf "$OUT/bench.tgz" -C "$OUT" bench && rm -rf "$OUT/bench"
