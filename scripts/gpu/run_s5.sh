#!/usr/bin/env bash
# Session 5's device calls on nvidia-h200-x2 (two GPUs, two lanes):
#   bash scripts/gpu/run_s5.sh a   # W4A16 gemv kernel: GPU tests, verify; gemv sweep, ncu of the M = 1 call
#                                  # (ran at 69c7649; the gemv kernel and its sweep script were removed after it)
#   bash scripts/gpu/run_s5.sh b   # W4A16 dequantization without I2F: GPU tests, verify, A/B against I2F,
#                                  # stream lookup probe, benchmark of all 120 shapes (ran at 8547007;
#                                  # I2F won, so the fp32 trick and the i2f field were removed)
#   bash scripts/gpu/run_s5.sh c   # W4A16 16-bit unpack: GPU tests, verify, A/B against the shift/I2F
#                                  # unpack, SASS counts under the machine's Triton, benchmark of all shapes
#                                  # (ran at a8066a1; the A/B stopped at its bitwise check, see NOTES)
#   bash scripts/gpu/run_s5.sh d   # 16-bit unpack for the dense path only: GPU tests, verify, the A/B,
#                                  # benchmark of all shapes; sparse ceiling probe (ran at c194fbd; the
#                                  # 16-bit unpack was removed after it)
#   bash scripts/gpu/run_s5.sh e   # sparse looped kernel with two gate reads: sparse GPU tests, ceiling
#                                  # probe with session 4's kernel side by side, sparse bench (42 shapes),
#                                  # w4a16 bench at M >= 256 (the dense path back to session 4's), verify
source "$(dirname "$0")/lib.sh"
NCU_SECTIONS="--section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats --section WarpStateStats --section MemoryWorkloadAnalysis"
W4_TESTS="tests/ops/test_w4a16_gemm.py tests/ops/test_w4a16_linear.py tests/ops/test_w4a16_compile.py"
ncu_w4a16() {  # ncu_w4a16 GPU LIMIT_S: profile_w4a16_decode.py under Nsight Compute, then its summary
  CUDA_VISIBLE_DEVICES=$1 timeout "$2" ncu --profile-from-start off --clock-control none --csv --page raw $NCU_SECTIONS \
    --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
    python3 scripts/gpu/profile_w4a16_decode.py > "$OUT/logs/ncu_w4a16.csv" 2> "$OUT/logs/ncu_w4a16.err"
  echo "ncu rc=$?" >> "$OUT/rc.txt"
  python3 scripts/gpu/profile_w4a16_decode.py --summary "$OUT/logs/ncu_w4a16.csv" > "$OUT/logs/ncu_summary.txt" 2>&1
}
case "${1:-a}" in
a)
  (
    run 0 300 t_w4a16 python3 -m pytest -m gpu -q -rfE --durations=6 -p no:cacheprovider $W4_TESTS
    run 0 150 verify python3 -m exactfuse verify --op w4a16_gemm
  ) &
  (
    run 1 330 sweep_gemv python3 scripts/gpu/sweep_w4a16_gemv.py
    ncu_w4a16 1 120
  ) &
  wait
  cat "$OUT/rc.txt"
  echo "== t_w4a16"; grep -E "FAILED|passed|failed|s call|Error" "$OUT/logs/t_w4a16.txt" | tail -14 | cut -c1-220
  echo "== verify"; grep -E "PASS|FAIL|ERROR" "$OUT/logs/verify.txt" | cut -c1-160 | tail -6
  echo "== gemv sweep"; cat "$OUT"/sweep_w4a16_gemv_phase1.txt; grep -A6 "geomean µs over" "$OUT"/sweep_w4a16_gemv.txt | cut -c1-400
  tail -5 "$OUT/logs/sweep_gemv.txt" | cut -c1-300
  echo "== ncu"; grep -E "^ +[0-9]|time_us|stalls" "$OUT/logs/ncu_summary.txt" | cut -c1-300
  ;;
b)
  (
    run 0 200 t_w4a16 python3 -m pytest -m gpu -q -rfE --durations=4 -p no:cacheprovider $W4_TESTS
    run 0 100 verify python3 -m exactfuse verify --op w4a16_gemm
  ) &
  (
    run 1 200 ab_i2f python3 scripts/gpu/sweep_w4a16_ab.py i2f 1 16 64 256 1024
    run 1 30 probe_stream python3 scripts/gpu/probe_stream_lookup.py
    bench 1 230 w4 w4a16_gemm --dtype bf16 --dtype fp16 \
      --provider triton --provider native --provider cublas-dense --provider torch-int4
  ) &
  wait
  cat "$OUT/rc.txt"
  echo "== t_w4a16"; grep -E "FAILED|passed|failed|Error" "$OUT/logs/t_w4a16.txt" | tail -8 | cut -c1-220
  echo "== verify"; grep -E "PASS|FAIL|ERROR" "$OUT/logs/verify.txt" | cut -c1-160 | tail -4
  echo "== i2f A/B"; cat "$OUT/sweep_w4a16_i2f.txt" | cut -c1-120; tail -3 "$OUT/logs/ab_i2f.txt" | cut -c1-300
  echo "== stream"; cat "$OUT/logs/probe_stream.txt" | tail -3
  for f in "$OUT"/bench/*/*.log; do echo "== $f"; grep -E "time budget|wrote" "$f"; grep -A9 "speedup of exactfuse" "$f" | cut -c1-150 | head -10; done
  ;;
c)
  (
    run 0 200 t_w4a16 python3 -m pytest -m gpu -q -rfE --durations=4 -p no:cacheprovider $W4_TESTS
    run 0 100 verify python3 -m exactfuse verify --op w4a16_gemm
    run 0 60 sass python3 scripts/gpu/sass_w4a16.py
  ) &
  (
    run 1 200 ab_unpack16 python3 scripts/gpu/sweep_w4a16_ab.py unpack16 1 16 64 256 1024
    bench 1 230 w4 w4a16_gemm --dtype bf16 --dtype fp16 \
      --provider triton --provider native --provider cublas-dense --provider torch-int4
  ) &
  wait
  cat "$OUT/rc.txt"
  echo "== t_w4a16"; grep -E "FAILED|passed|failed|Error" "$OUT/logs/t_w4a16.txt" | tail -8 | cut -c1-220
  echo "== verify"; grep -E "PASS|FAIL|ERROR" "$OUT/logs/verify.txt" | cut -c1-160 | tail -4
  echo "== unpack16 A/B"; cut -c1-120 "$OUT/sweep_w4a16_unpack16.txt"; tail -3 "$OUT/logs/ab_unpack16.txt" | cut -c1-300
  echo "== sass"; grep -E "SASS|^Triton" "$OUT/logs/sass.txt"
  for f in "$OUT"/bench/*/*.log; do echo "== $f"; grep -E "time budget|wrote" "$f"; grep -A9 "speedup of exactfuse" "$f" | cut -c1-150 | head -10; done
  ;;
d)
  (
    run 0 200 t_w4a16 python3 -m pytest -m gpu -q -rfE --durations=4 -p no:cacheprovider $W4_TESTS
    run 0 100 verify python3 -m exactfuse verify --op w4a16_gemm
    run 0 100 sparse_ceiling python3 scripts/gpu/probe_sparse_ceiling.py
  ) &
  (
    run 1 200 ab_unpack16 python3 scripts/gpu/sweep_w4a16_ab.py unpack16 1 16 64 256 1024
    bench 1 230 w4 w4a16_gemm --dtype bf16 --dtype fp16 \
      --provider triton --provider native --provider cublas-dense --provider torch-int4
  ) &
  wait
  cat "$OUT/rc.txt"
  echo "== t_w4a16"; grep -E "FAILED|passed|failed|Error" "$OUT/logs/t_w4a16.txt" | tail -8 | cut -c1-220
  echo "== verify"; grep -E "PASS|FAIL|ERROR" "$OUT/logs/verify.txt" | cut -c1-160 | tail -4
  echo "== unpack16 A/B"; tail -4 "$OUT/sweep_w4a16_unpack16.txt" | cut -c1-200; tail -3 "$OUT/logs/ab_unpack16.txt" | cut -c1-300
  echo "== sparse ceiling"; cut -c1-160 "$OUT/logs/sparse_ceiling.txt" | tail -15
  for f in "$OUT"/bench/*/*.log; do echo "== $f"; grep -E "time budget|wrote" "$f"; grep -A9 "speedup of exactfuse" "$f" | cut -c1-150 | head -10; done
  ;;
e)
  (
    run 0 250 t_sparse python3 -m pytest -m gpu -q -rfE --durations=4 -p no:cacheprovider tests/ops/test_gelu_and_mul_sparse.py -k "not aot_inductor"
    bench 0 160 sp0 gelu_and_mul_sparse --shard 0/2
    run 0 80 verify python3 -m exactfuse verify --op gelu_and_mul_sparse --op w4a16_gemm
  ) &
  (
    run 1 90 sparse_ceiling python3 scripts/gpu/probe_sparse_ceiling.py --looped3
    bench 1 120 w4 w4a16_gemm --dtype bf16 --dtype fp16 --case '/M(256|1024|2048|4096)-' \
      --provider triton --provider native --provider cublas-dense --provider torch-int4
    bench 1 160 sp1 gelu_and_mul_sparse --shard 1/2
  ) &
  wait
  cat "$OUT/rc.txt"
  echo "== t_sparse"; grep -E "FAILED|passed|failed|Error" "$OUT/logs/t_sparse.txt" | tail -8 | cut -c1-220
  echo "== verify"; grep -E "PASS|FAIL|ERROR" "$OUT/logs/verify.txt" | cut -c1-160 | tail -10
  echo "== sparse ceiling"; cut -c1-190 "$OUT/logs/sparse_ceiling.txt" | tail -22
  for f in "$OUT"/bench/*/*.log; do echo "== $f"; grep -E "time budget|wrote" "$f"; grep -A9 "speedup of exactfuse" "$f" | cut -c1-150 | head -10; done
  ;;
esac
(cd "$OUT" && tar czf /tmp/all.tgz . && rm -rf ./* && mv /tmp/all.tgz all.tgz)
