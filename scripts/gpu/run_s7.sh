#!/usr/bin/env bash
# Session 7's device calls on nvidia-h200-x2 (two GPUs, two lanes):
#   bash scripts/gpu/run_s7.sh a   # the CUDA-core GEMV for M <= 4 (gemv.py): SASS under the machine's Triton,
#                                  # the W4A16 GPU tests and verify; the gemv bucket's tile x split sweep beside
#                                  # the decode tile at M in {1, 2, 4}
source "$(dirname "$0")/lib.sh"
case "${1:-a}" in
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
