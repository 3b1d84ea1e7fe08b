#!/usr/bin/env bash
# Session 5's device calls on nvidia-h200-x2 (two GPUs, two lanes). Modes a-e measured variants that
# were removed after them; they ran from this file as it was at the revision named (git show REV:<this file>).
# Modes f-h run as they ran:
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
#                                  # (ran at 41bb180; the two-read looped kernel and --looped3 were removed
#                                  # after it)
#   bash scripts/gpu/run_s5.sh f   # the final kernels: W4A16 and sparse GPU tests, verify of both,
#                                  # w4a16 bench at M <= 128, sparse ceiling probe
#   bash scripts/gpu/run_s5.sh g   # W4A16 decode tiles with more warps or smaller blocks; sparse looped
#                                  # kernel with L2 eviction hints (KEEP_GATE) side by side
#   bash scripts/gpu/run_s5.sh h   # the looped kernel's hints on above d = 16384: sparse GPU contract
#                                  # matrices (heuristic and forced looped), bench of the two changed shapes
#   bash scripts/gpu/run_s5.sh i   # the rest of the sparse GPU tests (AOTI excepted) and verify, hints on
source "$(dirname "$0")/lib.sh"
W4_TESTS="tests/ops/test_w4a16_gemm.py tests/ops/test_w4a16_linear.py tests/ops/test_w4a16_compile.py"
show_benches() {  # each bench log's output files and its summary table
  for f in "$OUT"/bench/*/*.log; do echo "== $f"; grep -E "time budget|wrote" "$f"; grep -B2 -A12 "speedup of exactfuse" "$f" | cut -c1-160 | head -16; done
}
case "${1:-i}" in
i)
  run 0 190 t_sparse python3 -m pytest -m gpu -q -rfE -p no:cacheprovider tests/ops/test_gelu_and_mul_sparse.py \
    -k "not aot_inductor and not test_gpu_contract_matrix and not (chunked and looped)" &
  run 1 120 verify python3 -m exactfuse verify --op gelu_and_mul_sparse &
  wait
  cat "$OUT/rc.txt"
  echo "== t_sparse"; grep -E "FAILED|passed|failed|Error" "$OUT/logs/t_sparse.txt" | tail -8 | cut -c1-200
  echo "== verify"; grep -E "PASS|FAIL|ERROR" "$OUT/logs/verify.txt" | cut -c1-160 | tail -5
  ;;
h)
  run 0 210 t_sparse python3 -m pytest -m gpu -q -rfE --durations=6 -p no:cacheprovider tests/ops/test_gelu_and_mul_sparse.py \
    -k "test_gpu_contract_matrix or (chunked and looped)" &
  bench 1 120 spk gelu_and_mul_sparse --case 'T(1024|2048)-d32768$' &
  wait
  cat "$OUT/rc.txt"
  echo "== t_sparse"; grep -E "FAILED|passed|failed|Error|s call" "$OUT/logs/t_sparse.txt" | tail -10 | cut -c1-200
  show_benches
  ;;
g)
  run 0 200 sweep_decode python3 scripts/gpu/sweep_w4a16_decode.py --bucket decode --rules p4 p8 --tiles \
    16,128,128,4,3 16,128,128,8,3 16,256,128,8,3 16,64,128,2,3 16,64,128,4,3 16,128,64,4,3 16,128,64,8,3 &
  run 1 120 sparse_keep python3 scripts/gpu/probe_sparse_ceiling.py --keep-gate &
  wait
  cat "$OUT/rc.txt"
  echo "== decode tiles"; grep -E "best|geomean|decode:|shipped|Error" "$OUT/logs/sweep_decode.txt" | cut -c1-330
  echo "== sparse keep-gate"; cut -c1-200 "$OUT/logs/sparse_keep.txt" | tail -15
  ;;
f)
  (
    run 0 200 t_w4a16 python3 -m pytest -m gpu -q -rfE --durations=3 -p no:cacheprovider $W4_TESTS
    run 0 90 verify python3 -m exactfuse verify --op w4a16_gemm --op gelu_and_mul_sparse
  ) &
  (
    bench 1 120 w4 w4a16_gemm --dtype bf16 --dtype fp16 --case '/M(1|2|4|8|16|32|64|128)-' \
      --provider triton --provider native --provider cublas-dense --provider torch-int4
    run 1 70 sparse_ceiling python3 scripts/gpu/probe_sparse_ceiling.py
  ) &
  wait
  cat "$OUT/rc.txt"
  echo "== t_w4a16"; grep -E "FAILED|passed|failed|Error" "$OUT/logs/t_w4a16.txt" | tail -8 | cut -c1-220
  echo "== verify"; grep -E "PASS|FAIL|ERROR" "$OUT/logs/verify.txt" | cut -c1-160 | tail -10
  echo "== sparse ceiling"; cut -c1-160 "$OUT/logs/sparse_ceiling.txt" | tail -14
  show_benches
  ;;
esac
(cd "$OUT" && tar czf /tmp/all.tgz . && rm -rf ./* && mv /tmp/all.tgz all.tgz)
