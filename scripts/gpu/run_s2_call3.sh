#!/usr/bin/env bash
# Session 2, device call 3 (nvidia-h200-x2). GPU 0: silu / gelu / moe benchmarks. GPU 1: the W4A16
# tile x split sweep alone, then (concurrently, correctness only) moe verify and the AOTInductor
# control experiment, then the sparse benchmark. Usage: EXACTFUSE_GIT_REV=<sha> bash scripts/gpu/run_s2_call3.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/bench"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=src:/tmp/site
bench() {  # gpu limit op [extra args]
  local gpu=$1 limit=$2 op=$3; shift 3
  CUDA_VISIBLE_DEVICES=$gpu timeout "$limit" python3 -m exactfuse bench --grid default --op "$op" \
    --out "$OUT/bench" --plot "$OUT/bench/{op}.png" "$@" > "$OUT/bench/$op.log" 2>&1
  echo "bench $op rc=$? $(date +%s)" >> "$OUT/bench/rc.txt"
}
(
  bench 0 110 silu_and_mul
  bench 0 110 gelu_and_mul
  bench 0 330 moe_silu_and_mul
) &
(
  CUDA_VISIBLE_DEVICES=1 timeout 200 python3 scripts/gpu/sweep_w4a16_decode.py > "$OUT/sweep_decode.txt" 2>&1
  echo "sweep rc=$?" >> "$OUT/bench/rc.txt"
  CUDA_VISIBLE_DEVICES=1 timeout 170 python3 -m exactfuse verify --op moe_silu_and_mul > "$OUT/verify_moe.txt" 2>&1 &
  CUDA_VISIBLE_DEVICES=1 timeout 170 python3 scripts/gpu/aoti_control.py > "$OUT/aoti_control.txt" 2>&1 &
  wait
  bench 1 180 gelu_and_mul_sparse
) &
wait
cat "$OUT/bench/rc.txt"
echo "== verify moe"; grep -E "PASS|FAIL" "$OUT/verify_moe.txt" | tail -4
echo "== aoti control"; grep -E "^(OK|FAIL|CRASH|step)" "$OUT/aoti_control.txt" | tail -8
echo "== decode sweep"; tail -14 "$OUT/sweep_decode.txt" | cut -c1-200
for f in "$OUT"/bench/*.log; do echo "== $f"; grep -A9 "speedup of exactfuse" "$f" | cut -c1-150 | head -10; done
tar czf "$OUT/bench.tgz" -C "$OUT" bench && rm -rf "$OUT/bench"
