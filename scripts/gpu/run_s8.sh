#!/usr/bin/env bash
# Session 8's device calls on nvidia-h200-x2 (two GPUs, two lanes):
#   bash scripts/gpu/run_s8.sh a   # the GEMV's 64-bit activation loads and scale tile: W4A16 GPU tests and
#                                  # verify (GPU 0); SASS under the machine's Triton, A/B of each change and
#                                  # both at M 1-2, the read floor of the five shapes, the gemv tile sweep (GPU 1)
#   bash scripts/gpu/run_s8.sh b   # gemv1 (M = 1: (64, 256), 16 programs per SM): W4A16 GPU tests and verify
#                                  # (GPU 0); A/B of the two load changes at the shipped M 1-2 configurations,
#                                  # the fp16 GEMV tiles beside the decode tile at M 1-2, Nsight Compute at M = 1
#   bash scripts/gpu/run_s8.sh c   # fp16 on the GEMV at M = 2 too: W4A16 GPU tests, verify, w4a16 bench at M 1-2
#                                  # (GPU 0); the scale tile's A/B at the shipped configurations (timing only), the
#                                  # fp16 GEMV beside the decode tile at its shipped rule (GPU 1)
#   bash scripts/gpu/run_s8.sh d   # the M = 2 GEMV's scales one per column: W4A16 GPU tests, verify, w4a16 bench
#                                  # at M 1-2 (GPU 0); the dense path's dequantization tiles, then the path
#                                  # against cuBLAS at M 1024 and 2048 (GPU 1)
#   bash scripts/gpu/run_s8.sh e   # scale tile back on at M = 2 (d: fp16 M = 2 1.21-1.29x slower without it), the
#                                  # dense path's dequantization at 8 warps: W4A16 GPU tests, verify, fp16 A/B of
#                                  # the two load changes (GPU 0); w4a16 bench at M >= 256 (GPU 1)
#   bash scripts/gpu/run_s8.sh f   # after the results' per-row runs (bench harness): bench and registry GPU tests
#   bash scripts/gpu/run_s8.sh g   # cProfile of the eager op call on this host (NOTES next step: where its host time goes)
#   bash scripts/gpu/run_s8.sh h   # after the test-file split (tests/w4a16_support.py, test_w4a16_gemv.py): W4A16 GPU tests
source "$(dirname "$0")/lib.sh"
GEMV_TILES="0,64,128,2,1 0,64,256,2,1 0,128,128,2,1 0,128,128,4,1 0,64,64,2,1 0,256,64,4,1"
case "${1:-a}" in
h)
  run 0 260 t_w4a16 python3 -m pytest -m gpu -q -rfE -p no:cacheprovider $W4_TESTS tests/bench
  cat "$OUT/rc.txt"
  grep -E "FAILED|passed|failed|Error" "$OUT/logs/t_w4a16.txt" | tail -8 | cut -c1-220
  pack_out
  ;;
g)
  run 0 120 profile python3 scripts/gpu/probe_launch_path.py --profile
  cat "$OUT/rc.txt"
  head -70 "$OUT/logs/profile.txt" | cut -c1-160
  pack_out
  ;;
f)
  run 0 240 t_bench python3 -m pytest -m gpu -q -rfE -p no:cacheprovider tests/bench tests/registry
  cat "$OUT/rc.txt"
  echo "== t_bench"; grep -E "FAILED|passed|failed|Error" "$OUT/logs/t_bench.txt" | tail -8 | cut -c1-220
  pack_out
  ;;
e)
  (
    w4_tests 0
    run 0 100 ab_tile_fp16 python3 scripts/gpu/sweep_w4a16_ab.py scale_tile --fp16 1 2
    run 0 100 ab_wide_fp16 python3 scripts/gpu/sweep_w4a16_ab.py wide_a --fp16 1 2
  ) &
  w4_bench 1 270 w4big '/M(256|1024|2048|4096)-' &
  wait
  cat "$OUT/rc.txt"
  echo "== t_w4a16"; grep -E "FAILED|passed|failed|Error" "$OUT/logs/t_w4a16.txt" | tail -8 | cut -c1-220
  echo "== verify"; tail -4 "$OUT/logs/verify.txt"
  for f in ab_tile_fp16 ab_wide_fp16; do echo "== $f"; tail -14 "$OUT/logs/$f.txt"; done
  show_benches
  pack_out
  ;;
d)
  (w4_tests 0; w4_bench 0 150 w4gemv '/M(1|2)-') &
  run 1 400 sweep_dequant python3 scripts/gpu/sweep_w4a16_dequant.py 1024 2048 &
  wait
  cat "$OUT/rc.txt"
  echo "== t_w4a16"; grep -E "FAILED|passed|failed|Error" "$OUT/logs/t_w4a16.txt" | tail -8 | cut -c1-220
  echo "== verify"; tail -4 "$OUT/logs/verify.txt"
  echo "== sweep_dequant"; grep -vE "^ +[0-9]+ +[0-9]+ +\(" "$OUT/logs/sweep_dequant.txt" | cut -c1-200
  show_benches
  pack_out
  ;;
c)
  (w4_tests 0; w4_bench 0 150 w4gemv '/M(1|2)-') &
  (
    run 1 100 ab_tile python3 scripts/gpu/sweep_w4a16_ab.py scale_tile 1 2
    run 1 100 ab_both python3 scripts/gpu/sweep_w4a16_ab.py wide_a+scale_tile 1 2
    run 1 150 sweep_fp16 python3 scripts/gpu/sweep_w4a16_decode.py --bucket gemv --dtype fp16 \
      --tiles 0,64,128,2,1 16,64,128,4,4 --rules p4w p8w
  ) &
  wait
  cat "$OUT/rc.txt"
  echo "== t_w4a16"; grep -E "FAILED|passed|failed|Error" "$OUT/logs/t_w4a16.txt" | tail -8 | cut -c1-220
  echo "== verify"; tail -4 "$OUT/logs/verify.txt"
  for f in ab_tile ab_both; do echo "== $f"; tail -14 "$OUT/logs/$f.txt"; done
  echo "== sweep_fp16"; grep -E "best|geomean|shipped|gemv:" "$OUT/logs/sweep_fp16.txt" | cut -c1-200
  show_benches
  pack_out
  ;;
b)
  w4_tests 0 &
  (
    run 1 100 ab_both python3 scripts/gpu/sweep_w4a16_ab.py wide_a+scale_tile 1 2
    run 1 100 ab_wide python3 scripts/gpu/sweep_w4a16_ab.py wide_a 1 2
    run 1 100 ab_tile python3 scripts/gpu/sweep_w4a16_ab.py scale_tile 1 2
    run 1 150 sweep_fp16 python3 scripts/gpu/sweep_w4a16_decode.py --bucket gemv --dtype fp16 \
      --tiles 0,64,256,2,1 0,64,128,2,1 16,64,128,4,4 --rules p8w p16w
    w4_ncu 1 150
  ) &
  wait
  cat "$OUT/rc.txt"
  echo "== t_w4a16"; grep -E "FAILED|passed|failed|Error" "$OUT/logs/t_w4a16.txt" | tail -8 | cut -c1-220
  echo "== verify"; tail -4 "$OUT/logs/verify.txt"
  for f in ab_both ab_wide ab_tile; do echo "== $f"; tail -14 "$OUT/logs/$f.txt"; done
  echo "== sweep_fp16"; grep -E "best|geomean|shipped|gemv:" "$OUT/logs/sweep_fp16.txt" | cut -c1-200
  echo "== ncu"; cat "$OUT/logs/ncu_summary.txt" | cut -c1-250
  pack_out
  ;;
a)
  w4_tests 0 &
  (
    run 1 120 sass python3 scripts/gpu/sass_w4a16.py
    run 1 100 ab_both python3 scripts/gpu/sweep_w4a16_ab.py wide_a+scale_tile 1 2
    run 1 100 ab_wide python3 scripts/gpu/sweep_w4a16_ab.py wide_a 1 2
    run 1 100 ab_tile python3 scripts/gpu/sweep_w4a16_ab.py scale_tile 1 2
    run 1 90 read_floor python3 scripts/gpu/probe_read_floor.py
    run 1 200 sweep_gemv python3 scripts/gpu/sweep_w4a16_decode.py --bucket gemv --tiles $GEMV_TILES
  ) &
  wait
  cat "$OUT/rc.txt"
  echo "== t_w4a16"; grep -E "FAILED|passed|failed|Error" "$OUT/logs/t_w4a16.txt" | tail -8 | cut -c1-220
  echo "== verify"; tail -4 "$OUT/logs/verify.txt"
  echo "== sass"; grep -A0 "gemv bucket\|^bf16 BM=[12]" "$OUT/logs/sass.txt" | cut -c1-170
  for f in ab_both ab_wide ab_tile; do echo "== $f"; tail -1 "$OUT/logs/$f.txt"; done
  echo "== read_floor"; cat "$OUT/logs/read_floor.txt"
  echo "== sweep_gemv"; grep -E "best|geomean|shipped|gemv:" "$OUT/logs/sweep_gemv.txt" | cut -c1-200
  pack_out
  ;;
esac
