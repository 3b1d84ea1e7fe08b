#!/usr/bin/env bash
# Session 7's device calls on nvidia-h200-x2 (two GPUs, two lanes):
#   bash scripts/gpu/run_s7.sh a   # the CUDA-core GEMV for M <= 4 (gemv.py): SASS under the machine's Triton,
#                                  # the W4A16 GPU tests and verify; the gemv bucket's tile x split sweep beside
#                                  # the decode tile at M in {1, 2, 4}
#   bash scripts/gpu/run_s7.sh b   # the gemv bucket at M <= 2: W4A16 GPU tests and verify; A/B of its 16-bit
#                                  # pair dequantization against fp32; w4a16 bench at M 1 and 2; Nsight Compute
#                                  # of M = 1 against tinygemm and cuBLAS
#   bash scripts/gpu/run_s7.sh c   # the GEMV's next-step prefetch of the packed words: A/B at the shipped tile,
#                                  # the gemv tile sweep with and without it (ran at 7ab5887; prefetch removed)
#   bash scripts/gpu/run_s7.sh d   # the gemv bucket at (64, 128, 2 warps) p8w, fp16 at M = 1 only: W4A16 GPU
#                                  # tests and verify; the fp16 GEMV against the decode tile at M 1-2; w4a16 bench
#                                  # at M 1-2
#   bash scripts/gpu/run_s7.sh e   # the cheaper eager op call (registry): registry, bench-harness, activation,
#                                  # moe and sparse GPU tests; verify of every op; the launch-path probe (ran
#                                  # at 639487e: the probe finished, the tests and verify hit their limits)
#   bash scripts/gpu/run_s7.sh f   # those GPU tests again in two lanes with longer limits, no verify
#   bash scripts/gpu/run_s7.sh g   # W4A16 GPU tests after the review's launcher change (packed_math reads is_cuda)
source "$(dirname "$0")/lib.sh"
case "${1:-a}" in
g)
  run 0 300 t_w4a16 python3 -m pytest -m gpu -q -rfE -p no:cacheprovider $W4_TESTS
  cat "$OUT/rc.txt"
  echo "== t_w4a16"; grep -E "FAILED|passed|failed|Error" "$OUT/logs/t_w4a16.txt" | tail -8 | cut -c1-220
  ;;
f)
  run 0 420 t_registry python3 -m pytest -m gpu -q -rfE -p no:cacheprovider tests/registry tests/bench \
    tests/ops/test_activation.py -k "not aot_inductor" &
  run 1 420 t_moe_sparse python3 -m pytest -m gpu -q -rfE -p no:cacheprovider tests/ops/test_moe_silu_and_mul.py \
    tests/ops/test_gelu_and_mul_sparse.py -k "not aot_inductor" &
  wait
  cat "$OUT/rc.txt"
  for f in t_registry t_moe_sparse; do
    echo "== $f"; grep -E "FAILED|passed|failed|Error" "$OUT/logs/$f.txt" | tail -6 | cut -c1-220
  done
  ;;
e)
  run 0 300 t_other python3 -m pytest -m gpu -q -rfE -p no:cacheprovider tests/registry tests/bench \
    tests/ops/test_activation.py tests/ops/test_moe_silu_and_mul.py tests/ops/test_gelu_and_mul_sparse.py \
    -k "not aot_inductor" &
  (
    run 1 60 launch_path python3 scripts/gpu/probe_launch_path.py
    run 1 240 verify_all python3 -m exactfuse verify
  ) &
  wait
  cat "$OUT/rc.txt"
  echo "== t_other"; grep -E "FAILED|passed|failed|Error" "$OUT/logs/t_other.txt" | tail -6 | cut -c1-220
  echo "== launch_path"; tail -8 "$OUT/logs/launch_path.txt" | cut -c1-160
  echo "== verify_all"; grep -E "PASS|FAIL|hold|Error" "$OUT/logs/verify_all.txt" | cut -c1-160 | tail -24
  ;;
d)
  w4_tests 0 &
  (
    run 1 150 sweep_fp16 python3 scripts/gpu/sweep_w4a16_decode.py --bucket gemv --dtype fp16 \
      --tiles 0,64,128,2,1 16,64,128,4,4 0,128,128,4,1 --rules p8w p4w
    w4_bench 1 120 w4gemv '/M(1|2)-'
  ) &
  wait
  cat "$OUT/rc.txt"
  echo "== t_w4a16"; grep -E "FAILED|passed|failed|Error" "$OUT/logs/t_w4a16.txt" | tail -8 | cut -c1-220
  echo "== verify"; tail -4 "$OUT/logs/verify.txt" | cut -c1-160
  echo "== sweep_fp16"; grep -E "best|geomean|gemv:|Error" "$OUT/logs/sweep_fp16.txt" | cut -c1-600
  show_benches
  ;;
c)
  run 0 150 ab_prefetch python3 scripts/gpu/sweep_w4a16_ab.py prefetch 1 2 &
  (
    TILES="0,128,128,4,1 16,64,128,4,4 0,64,64,2,1 0,128,64,4,1 0,64,128,2,1"
    run 1 150 sweep_plain python3 scripts/gpu/sweep_w4a16_decode.py --bucket gemv --tiles $TILES
    mv "$OUT/sweep_w4a16_decode_gemv.json" "$OUT/sweep_w4a16_decode_gemv_plain.json"
    run 1 150 sweep_prefetch python3 scripts/gpu/sweep_w4a16_decode.py --bucket gemv --tiles $TILES --fields prefetch
  ) &
  wait
  cat "$OUT/rc.txt"
  echo "== ab_prefetch"; tail -3 "$OUT/logs/ab_prefetch.txt" | cut -c1-200
  for f in sweep_plain sweep_prefetch; do
    echo "== $f"; grep -E "geomean|gemv:|shipped|Error" "$OUT/logs/$f.txt" | cut -c1-600
  done
  ;;
b)
  w4_tests 0 &
  (
    run 1 120 ab_packed python3 scripts/gpu/sweep_w4a16_ab.py packed_math 1 2
    w4_bench 1 120 w4gemv '/M(1|2)-'
    w4_ncu 1 200
  ) &
  wait
  cat "$OUT/rc.txt"
  echo "== t_w4a16"; grep -E "FAILED|passed|failed|Error" "$OUT/logs/t_w4a16.txt" | tail -8 | cut -c1-220
  echo "== verify"; tail -4 "$OUT/logs/verify.txt" | cut -c1-160
  echo "== ab_packed"; tail -4 "$OUT/logs/ab_packed.txt" | cut -c1-200
  show_benches
  echo "== ncu"; cut -c1-300 "$OUT/logs/ncu_summary.txt"; tail -3 "$OUT/logs/ncu_w4a16.err"
  ;;
a)
  (
    run 0 120 sass python3 scripts/gpu/sass_w4a16.py
    w4_tests 0
  ) &
  run 1 420 sweep_gemv python3 scripts/gpu/sweep_w4a16_decode.py --bucket gemv &
  wait
  cat "$OUT/rc.txt"
  echo "== sass"; grep -E "SASS" "$OUT/logs/sass.txt" | cut -c1-120
  echo "== t_w4a16"; grep -E "FAILED|passed|failed|Error" "$OUT/logs/t_w4a16.txt" | tail -8 | cut -c1-220
  echo "== verify"; tail -4 "$OUT/logs/verify.txt" | cut -c1-160
  echo "== sweep_gemv"; grep -E "best|geomean|gemv:|shipped|Error|s$" "$OUT/logs/sweep_gemv.txt" | cut -c1-600
  ;;
esac
pack_out
