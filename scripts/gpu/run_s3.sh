#!/usr/bin/env bash
# Session 3's device calls on nvidia-h200-x2:
#   EXACTFUSE_GIT_REV=<sha> bash scripts/gpu/run_s3.sh b    # sweeps, the rest of the moe grid, AOTI control
#   EXACTFUSE_GIT_REV=<sha> SPARSE_DONE=<sparse JSON of call a> bash scripts/gpu/run_s3.sh d
#     GPU tests, verify, benchmarks: w4a16 (dense path), silu/gelu (d = 768 block), the six sparse
#     shapes call a's run did not reach (the sparse kernel is unchanged since, comments aside)
#   EXACTFUSE_GIT_REV=<sha> bash scripts/gpu/run_s3.sh e    # verify and GPU tests that d's time limits cut
#   EXACTFUSE_GIT_REV=<sha> bash scripts/gpu/run_s3.sh f    # the looped sparse kernel (tests, sweep, bench)
source "$(dirname "$0")/lib.sh"
MOE_DONE=benchmarks/results/h200/moe_silu_and_mul.json
case "${1:-b}" in
b)
  (
    run 0 230 sweep_w4a16 python3 scripts/gpu/sweep_w4a16_paths.py
    bench 0 300 m0 moe_silu_and_mul --resume $MOE_DONE --shard 0/2
  ) &
  (
    AOTI_STEP_TIMEOUT=200 run 1 420 aoti_control python3 scripts/gpu/aoti_control.py plain sparse &
    run 1 150 sweep_sparse python3 scripts/gpu/sweep_sparse_load_order.py
    bench 1 300 m1 moe_silu_and_mul --resume $MOE_DONE --shard 1/2
    wait
  ) &
  wait
  cat "$OUT/rc.txt"
  echo "== aoti"; grep -E "^(OK|FAIL|CRASH|TIMEOUT|step)" "$OUT/logs/aoti_control.txt" | cut -c1-300
  echo "== w4a16 paths"; grep -A12 "per M, geomean" "$OUT/logs/sweep_w4a16.txt"; grep FAILED "$OUT/logs/sweep_w4a16.txt" | head -5
  echo "== sparse load order"; grep -A20 "per d, every T" "$OUT/logs/sweep_sparse.txt" | cut -c1-250
  ;;
d)
  (
    run 0 240 t_w4a16 python3 -m pytest -m gpu -q --tb=short -p no:cacheprovider tests/ops/test_w4a16_gemm.py tests/ops/test_w4a16_linear.py
    bench 0 150 w4 w4a16_gemm --dtype bf16 --dtype fp16 --provider triton --provider native --provider cublas-dense --provider torch-int4
    bench 0 80 silu silu_and_mul
  ) &
  (
    run 1 200 t_act python3 -m pytest -m gpu -q --tb=short -p no:cacheprovider tests/ops/test_activation.py tests/ops/test_gelu_and_mul_sparse.py tests/registry tests/bench -k "not aot_inductor"
    run 1 150 verify python3 -m exactfuse verify
    bench 1 80 gelu gelu_and_mul
    bench 1 80 sp gelu_and_mul_sparse --resume "$SPARSE_DONE"
  ) &
  wait
  cat "$OUT/rc.txt"
  for t in t_w4a16 t_act; do echo "== $t"; grep -E "FAILED|passed|failed" "$OUT/logs/$t.txt" | tail -8; done
  echo "== verify"; grep -E "PASS|FAIL|ERROR" "$OUT/logs/verify.txt" | cut -c1-160 | tail -30
  ;;
e)  # what d's limits cut: verify of the ops changed in session 3, the rest of the GPU tests
  run 0 290 verify python3 -m exactfuse verify --op silu_and_mul --op gelu_and_mul --op w4a16_gemm &
  run 1 290 t_rest python3 -m pytest -m gpu -q -rfE --durations=12 -p no:cacheprovider tests/ops/test_gelu_and_mul_sparse.py tests/registry tests/bench -k "not aot_inductor" &
  wait
  cat "$OUT/rc.txt"
  echo "== t_rest"; tail -22 "$OUT/logs/t_rest.txt" | cut -c1-160
  echo "== verify"; tail -30 "$OUT/logs/verify.txt" | cut -c1-160
  ;;
f)  # the looped sparse kernel: GPU tests, the sweep, and the wide-row shapes re-benchmarked
  (
    run 0 175 t_sparse python3 -m pytest -m gpu -q -rfE --durations=8 -p no:cacheprovider tests/ops/test_gelu_and_mul_sparse.py -k "not aot_inductor"
    run 0 95 sweep_loop python3 scripts/gpu/sweep_sparse_chunks.py looped
  ) &
  (
    bench 1 130 sp gelu_and_mul_sparse --case 'd(12288|32768)$'
    run 1 60 t_reg python3 -m pytest -m gpu -q -p no:cacheprovider tests/registry
  ) &
  wait
  cat "$OUT/rc.txt"
  for t in t_sparse t_reg; do echo "== $t"; grep -E "FAILED|passed|failed|s call" "$OUT/logs/$t.txt" | tail -12; done
  echo "== sweep"; tail -30 "$OUT/logs/sweep_loop.txt" | cut -c1-200
  ;;
esac
for f in "$OUT"/bench/*/*.log; do echo "== $f"; grep -E "time budget|wrote" "$f"; grep -A7 "speedup of exactfuse" "$f" | cut -c1-150 | head -8; done
tar czf "$OUT/all.tgz" -C "$OUT" bench logs && rm -rf "$OUT/bench" "$OUT/logs"
