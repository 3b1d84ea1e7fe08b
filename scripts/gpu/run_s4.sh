#!/usr/bin/env bash
# Session 4's device calls on nvidia-h200-x2 (two GPUs, two lanes):
#   bash scripts/gpu/run_s4.sh a   # sparse: GPU tests (whole / looped / split), split sweep, bench of the
#                                  # changed shapes; silu small-T probe; ncu profile of the W4A16 decode
#   bash scripts/gpu/run_s4.sh b   # W4A16 single-launch split-K: GPU tests, tile/split sweep, ncu; sparse
#                                  # split and mid-T warps sweeps; verify of both ops
#   bash scripts/gpu/run_s4.sh c   # after b: GPU tests, split-K fixup A/B, benchmarks (w4a16 M <= 128,
#                                  # all sparse shapes in two shards), silu small-T probe
#   bash scripts/gpu/run_s4.sh d   # split-K fixup for decode only: W4A16 tests, M 32-128 re-benchmarked,
#                                  # the other GPU tests (AOTI excepted; cut by its 280 s limit)
#   bash scripts/gpu/run_s4.sh e   # registry and harness GPU tests, verify of w4a16 and sparse
#   bash scripts/gpu/run_s4.sh f   # gated-activation and moe GPU tests
source "$(dirname "$0")/lib.sh"
case "${1:-a}" in
a)
  (
    run 0 300 t_sparse python3 -m pytest -m gpu -q -rfE --durations=8 -p no:cacheprovider tests/ops/test_gelu_and_mul_sparse.py -k "not aot_inductor"
    bench 0 170 sp gelu_and_mul_sparse --case 'T(1024|2048)-d(8192|16384|32768)$|T(1|4|16)-d32768$'
  ) &
  (
    run 1 220 sweep_split python3 scripts/gpu/sweep_sparse_chunks.py split
    run 1 100 probe_small_t python3 scripts/gpu/probe_small_t_gap.py
    w4_ncu 1 200
  ) &
  wait
  cat "$OUT/rc.txt"
  echo "== t_sparse"; grep -E "FAILED|passed|failed|s call" "$OUT/logs/t_sparse.txt" | tail -14 | cut -c1-200
  echo "== split sweep"; tail -32 "$OUT/logs/sweep_split.txt" | cut -c1-260
  echo "== probe"; tail -22 "$OUT/logs/probe_small_t.txt" | cut -c1-200
  echo "== ncu"; cut -c1-400 "$OUT/logs/ncu_summary.txt"; tail -5 "$OUT/logs/ncu_w4a16.err"
  ;;
b)  # the single-launch split-K fixup: W4A16 GPU tests and tile/split sweep; sparse split and warps sweeps
  (
    run 0 270 t_w4a16 python3 -m pytest -m gpu -q -rfE --durations=6 -p no:cacheprovider tests/ops/test_w4a16_gemm.py tests/ops/test_w4a16_linear.py
    run 0 300 sweep_w4a16 python3 scripts/gpu/sweep_w4a16_decode.py
  ) &
  (
    run 1 120 sweep_split python3 scripts/gpu/sweep_sparse_chunks.py split
    run 1 200 sweep_warps python3 scripts/gpu/sweep_sparse_warps.py --widths 500 1024 2048 3000 4096 8192 --tokens 1 16 64 128 256 512 1024
    w4_ncu 1 120
    run 1 150 verify python3 -m exactfuse verify --op gelu_and_mul_sparse --op w4a16_gemm
  ) &
  wait
  cat "$OUT/rc.txt"
  echo "== t_w4a16"; grep -E "FAILED|passed|failed|s call" "$OUT/logs/t_w4a16.txt" | tail -10 | cut -c1-200
  echo "== w4a16 sweep"; grep -A12 "geomean µs per" "$OUT/logs/sweep_w4a16.txt" | cut -c1-400
  echo "== split sweep"; grep -A8 "per d, geomean" "$OUT/logs/sweep_split.txt" | cut -c1-300
  echo "== warps sweep"; grep -A12 "per BD bucket" "$OUT/logs/sweep_warps.txt" | cut -c1-300
  echo "== ncu"; grep -E "^ +[0-9]|time_us" "$OUT/logs/ncu_summary.txt" | cut -c1-200
  echo "== verify"; grep -E "PASS|FAIL|ERROR" "$OUT/logs/verify.txt" | cut -c1-160 | tail -12
  ;;
c)  # after b's choices: GPU tests, the fixup A/B, benchmarks of every shape whose launch changed
  (
    run 0 150 t_w4a16 python3 -m pytest -m gpu -q -rfE -p no:cacheprovider tests/ops/test_w4a16_gemm.py tests/ops/test_w4a16_linear.py
    run 0 100 sweep_fixup python3 scripts/gpu/sweep_w4a16_ab.py fixup 1 4 16 32 64 128  # then sweep_w4a16_fixup.py
    bench 0 110 w4 w4a16_gemm --dtype bf16 --dtype fp16 --case '/M(1|2|4|8|16|32|64|128)-' \
      --provider triton --provider native --provider cublas-dense --provider torch-int4
    bench 0 160 sp1 gelu_and_mul_sparse --shard 1/2
  ) &
  (
    run 1 260 t_sparse python3 -m pytest -m gpu -q -rfE -p no:cacheprovider tests/ops/test_gelu_and_mul_sparse.py -k "not aot_inductor"
    bench 1 160 sp0 gelu_and_mul_sparse --shard 0/2
    run 1 70 probe_small_t python3 scripts/gpu/probe_small_t_gap.py
    run 1 70 verify python3 -m exactfuse verify --op gelu_and_mul_sparse
  ) &
  wait
  cat "$OUT/rc.txt"
  for t in t_w4a16 t_sparse; do echo "== $t"; grep -E "FAILED|passed|failed" "$OUT/logs/$t.txt" | tail -6 | cut -c1-200; done
  echo "== fixup"; tail -3 "$OUT/logs/sweep_fixup.txt" | cut -c1-200
  echo "== probe"; tail -10 "$OUT/logs/probe_small_t.txt" | cut -c1-200
  echo "== verify"; grep -E "PASS|FAIL|ERROR" "$OUT/logs/verify.txt" | cut -c1-160 | tail -4
  ;;
d)  # split-K fixup for decode only: W4A16 GPU tests, the M 32-128 shapes re-benchmarked; every other GPU test
  (
    run 0 170 t_w4a16 python3 -m pytest -m gpu -q -rfE -p no:cacheprovider tests/ops/test_w4a16_gemm.py tests/ops/test_w4a16_linear.py
    bench 0 70 w4 w4a16_gemm --dtype bf16 --dtype fp16 --case '/M(32|64|128)-' \
      --provider triton --provider native --provider cublas-dense --provider torch-int4
  ) &
  run 1 280 t_rest python3 -m pytest -m gpu -q -rfE -p no:cacheprovider tests -k "not aot_inductor" \
    --ignore=tests/ops/test_w4a16_gemm.py --ignore=tests/ops/test_w4a16_linear.py --ignore=tests/ops/test_gelu_and_mul_sparse.py &
  wait
  cat "$OUT/rc.txt"
  for t in t_w4a16 t_rest; do echo "== $t"; grep -E "FAILED|ERROR|passed|failed" "$OUT/logs/$t.txt" | tail -6 | cut -c1-200; done
  ;;
e)  # what d's time limit cut: the registry and harness GPU tests (all ops), verify of the changed ops
  run 0 240 t_reg python3 -m pytest -m gpu -q -rfE -p no:cacheprovider tests/registry tests/bench -k "not aot_inductor" &
  run 1 200 verify python3 -m exactfuse verify --op w4a16_gemm --op gelu_and_mul_sparse &
  wait
  cat "$OUT/rc.txt"
  echo "== t_reg"; grep -E "FAILED|ERROR|passed|failed" "$OUT/logs/t_reg.txt" | tail -6 | cut -c1-200
  echo "== verify"; grep -E "PASS|FAIL|ERROR" "$OUT/logs/verify.txt" | cut -c1-160 | tail -6
  ;;
f)  # the gated-activation and moe GPU tests at the final revision (their code is unchanged since session 3)
  run 0 280 t_act python3 -m pytest -m gpu -q -rfE --durations=5 -p no:cacheprovider tests/ops/test_activation.py -k "not aot_inductor" &
  run 1 280 t_moe python3 -m pytest -m gpu -q -rfE --durations=5 -p no:cacheprovider tests/ops/test_moe_silu_and_mul.py -k "not aot_inductor" &
  wait
  cat "$OUT/rc.txt"
  for t in t_act t_moe; do echo "== $t"; grep -E "FAILED|ERROR|passed|failed|s call" "$OUT/logs/$t.txt" | tail -8 | cut -c1-200; done
  ;;
esac
for f in "$OUT"/bench/*/*.log; do echo "== $f"; grep -E "time budget|wrote" "$f"; grep -A7 "speedup of exactfuse" "$f" | cut -c1-150 | head -8; done
tar czf "$OUT/all.tgz" -C "$OUT" bench logs && rm -rf "$OUT/bench" "$OUT/logs"
