#!/usr/bin/env bash
# Session 6's device calls on nvidia-h200-x2 (two GPUs, two lanes):
#   bash scripts/gpu/run_s6.sh a   # W4A16 kernel variants load3d and swap_ab: SASS under the machine's
#                                  # Triton, their GPU tests, side-by-side A/B of each and of both; the
#                                  # decode tile sweep with swap_ab; the silu small-T launch-path probe
#                                  # (ran at 8d25591; load3d became the only load, swap_ab was removed)
#   bash scripts/gpu/run_s6.sh b   # the 3-D load: W4A16 GPU tests, verify, tile sweep of all three fused
#                                  # buckets, w4a16 bench of all 120 shapes (M <= 128 and M >= 256 in two lanes)
#                                  # (ran at fe2c1dd; the decode tile changed after it, the bench was re-run in c)
#   bash scripts/gpu/run_s6.sh c   # decode tile (16, 64, 128, 4, 4) p4w and direct eager launches: the
#                                  # launch-path probe, W4A16, registry, bench-harness and activation GPU
#                                  # tests, verify w4a16, benchmarks: w4a16 (120 shapes), silu, gelu,
#                                  # sparse at T <= 16
#   bash scripts/gpu/run_s6.sh d   # tile sweeps of the three fused buckets with more warps per tile and
#                                  # BM = 128 (one dequantization per weight tile at M = 128); moe bench M <= 6
#   bash scripts/gpu/run_s6.sh e   # the m64 / m128 buckets: W4A16 GPU tests, verify, w4a16 bench at M 32-128;
#                                  # moe and sparse GPU tests with the direct eager launches
#   bash scripts/gpu/run_s6.sh f   # fused (m128 tile) against dense path at M 64-384 (the crossover);
#                                  # a second run of the w4a16 bench at M >= 1024 (run-to-run spread)
#   bash scripts/gpu/run_s6.sh g   # Nsight Compute profile of the new decode tile at M = 1 (against tinygemm
#                                  # and cuBLAS), as session 4's
#   bash scripts/gpu/run_s6.sh h   # decode and m32 tiles under a register cap (TileConfig.max_registers), for
#                                  # more programs per SM (ran at 22de330; the field was removed after it)
#   bash scripts/gpu/run_s6.sh i   # direct launches by the thread-local flag: registry, bench-harness and
#                                  # activation GPU tests; launch-path probe with the whole op call
source "$(dirname "$0")/lib.sh"
case "${1:-i}" in
i)
  run 0 200 t_other python3 -m pytest -m gpu -q -rfE -p no:cacheprovider tests/registry tests/bench \
    tests/ops/test_activation.py -k "not aot_inductor" &
  run 1 60 launch_path python3 scripts/gpu/probe_launch_path.py &
  wait
  cat "$OUT/rc.txt"
  echo "== t_other"; grep -E "FAILED|passed|failed|Error" "$OUT/logs/t_other.txt" | tail -6 | cut -c1-220
  echo "== launch_path"; tail -8 "$OUT/logs/launch_path.txt" | cut -c1-160
  ;;
h)
  run 0 200 sweep_decode python3 scripts/gpu/sweep_w4a16_decode.py --bucket decode --rules p4w p6w p8w --tiles \
    16,64,128,4,4 16,64,128,4,4,96 16,64,128,4,3,96 16,64,128,4,3,80 16,64,128,4,3 &
  run 1 200 sweep_m32 python3 scripts/gpu/sweep_w4a16_decode.py --bucket m32 --rules p2 p4w --tiles \
    32,64,128,4,4 32,64,128,4,4,96 32,64,128,4,3,96 32,64,128,4,3 &
  wait
  cat "$OUT/rc.txt"
  for f in sweep_decode sweep_m32; do
    echo "== $f"; grep -E "best|geomean|decode:|m32:|shipped|Error" "$OUT/logs/$f.txt" | cut -c1-400
  done
  ;;
g)
  w4_ncu 0 200
  cat "$OUT/rc.txt"
  echo "== ncu"; cut -c1-400 "$OUT/logs/ncu_summary.txt"; tail -5 "$OUT/logs/ncu_w4a16.err"
  ;;
f)
  run 0 200 paths python3 scripts/gpu/sweep_w4a16_paths.py 64 128 192 256 384 &
  bench 1 110 w4big2 w4a16_gemm --dtype bf16 --dtype fp16 --case '/M(1024|2048|4096)-' \
    --provider triton --provider cublas-dense &
  wait
  cat "$OUT/rc.txt"
  echo "== paths"; grep -E "geomean|  M |Error|FAILED" "$OUT/logs/paths.txt" | tail -12 | cut -c1-200
  show_benches
  ;;
e)
  (
    w4_tests 0
    w4_bench 0 110 w4mid '/M(32|64|128)-'
  ) &
  run 1 380 t_moe_sparse python3 -m pytest -m gpu -q -rfE --durations=5 -p no:cacheprovider \
    tests/ops/test_moe_silu_and_mul.py tests/ops/test_gelu_and_mul_sparse.py -k "not aot_inductor" &
  wait
  cat "$OUT/rc.txt"
  for f in t_w4a16 t_moe_sparse; do echo "== $f"; grep -E "FAILED|passed|failed|Error|s call" "$OUT/logs/$f.txt" | tail -9 | cut -c1-220; done
  echo "== verify"; grep -E "PASS|FAIL|ERROR" "$OUT/logs/verify.txt" | cut -c1-160 | tail -4
  show_benches
  ;;
d)
  (
    run 0 150 sweep_decode python3 scripts/gpu/sweep_w4a16_decode.py --bucket decode --rules p4w p8w --tiles \
      16,64,128,4,4 16,64,128,8,4 16,128,128,8,4 16,64,64,4,4 16,64,256,8,3
    run 0 150 sweep_m32 python3 scripts/gpu/sweep_w4a16_decode.py --bucket m32 --rules p2 p4w p8w --tiles \
      32,64,128,4,4 32,64,128,8,4 32,64,64,8,4 32,128,64,8,4 32,128,128,8,3
    bench 0 70 moe moe_silu_and_mul --case 'M(1|6)-'
  ) &
  (
    run 1 300 sweep_m128 python3 scripts/gpu/sweep_w4a16_decode.py --bucket m128 --rules p8-nocap p4-nocap p2 --tiles \
      64,64,64,4,4 128,64,64,8,3 64,64,64,8,4 128,128,64,8,3 128,64,128,8,3 128,64,64,4,3
  ) &
  wait
  cat "$OUT/rc.txt"
  for f in sweep_decode sweep_m32 sweep_m128; do
    echo "== $f"; grep -E "best|geomean|decode:|m32:|m128:|shipped|Error" "$OUT/logs/$f.txt" | cut -c1-330
  done
  show_benches
  ;;
c)
  (
    w4_tests 0
    w4_bench 0 120 w4big '/M(256|1024|2048|4096)-'
    bench 0 90 act silu_and_mul
    bench 0 60 sp gelu_and_mul_sparse --case 'T(1|4|16)-'
  ) &
  (
    run 1 60 launch_path python3 scripts/gpu/probe_launch_path.py
    run 1 200 t_other python3 -m pytest -m gpu -q -rfE -p no:cacheprovider tests/registry tests/bench \
      tests/ops/test_activation.py -k "not aot_inductor"
    w4_bench 1 160 w4small '/M(1|2|4|8|16|32|64|128)-'
    bench 1 90 act gelu_and_mul
  ) &
  wait
  cat "$OUT/rc.txt"
  echo "== launch_path"; tail -6 "$OUT/logs/launch_path.txt" | cut -c1-160
  for f in t_w4a16 t_other; do echo "== $f"; grep -E "FAILED|passed|failed|Error" "$OUT/logs/$f.txt" | tail -6 | cut -c1-220; done
  echo "== verify"; grep -E "PASS|FAIL|ERROR" "$OUT/logs/verify.txt" | cut -c1-160 | tail -4
  show_benches
  ;;
b)
  (
    w4_tests 0
    w4_bench 0 150 w4big '/M(256|1024|2048|4096)-'
  ) &
  (
    run 1 240 sweep_tiles python3 scripts/gpu/sweep_w4a16_decode.py
    w4_bench 1 180 w4small '/M(1|2|4|8|16|32|64|128)-'
  ) &
  wait
  cat "$OUT/rc.txt"
  echo "== t_w4a16"; grep -E "FAILED|passed|failed|Error" "$OUT/logs/t_w4a16.txt" | tail -8 | cut -c1-220
  echo "== verify"; grep -E "PASS|FAIL|ERROR" "$OUT/logs/verify.txt" | cut -c1-160 | tail -6
  echo "== sweep_tiles"; grep -E "geomean|decode:|m32:|m128:|shipped|Error" "$OUT/logs/sweep_tiles.txt" | cut -c1-330
  show_benches
  ;;
a)
  (
    run 0 120 sass python3 scripts/gpu/sass_w4a16.py
    run 0 120 ab_load3d python3 scripts/gpu/sweep_w4a16_ab.py load3d 1 4 16 32 64 128 256 1024
    run 0 100 ab_swap python3 scripts/gpu/sweep_w4a16_ab.py swap_ab 1 4 16 32 64 128
    run 0 80 ab_both python3 scripts/gpu/sweep_w4a16_ab.py load3d+swap_ab 1 16 64 128
  ) &
  (
    run 1 150 t_variants python3 -m pytest -m gpu -q -rfE -p no:cacheprovider tests/ops/test_w4a16_gemm.py -k variants
    run 1 200 sweep_swap python3 scripts/gpu/sweep_w4a16_decode.py --bucket decode --rules p4 p8 --fields swap_ab \
      --tiles 16,128,128,4,3 16,128,128,4,4 16,64,128,4,3 16,64,128,4,4 16,256,128,8,3 16,128,64,4,4
    run 1 90 small_t python3 scripts/gpu/probe_small_t_gap.py
  ) &
  wait
  cat "$OUT/rc.txt"
  echo "== sass"; grep -E "SASS" "$OUT/logs/sass.txt" | cut -c1-120
  echo "== t_variants"; grep -E "FAILED|passed|failed|Error" "$OUT/logs/t_variants.txt" | tail -6 | cut -c1-220
  for f in ab_load3d ab_swap ab_both; do echo "== $f"; tail -3 "$OUT/logs/$f.txt" | cut -c1-200; done
  echo "== sweep_swap"; grep -E "geomean|decode:|shipped|Error" "$OUT/logs/sweep_swap.txt" | cut -c1-330
  echo "== small_t"; tail -14 "$OUT/logs/small_t.txt" | cut -c1-160
  ;;
esac
pack_out
