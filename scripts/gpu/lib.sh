# Shared by the run_s*.sh device-call scripts: output folders, the carried wheels, and two helpers.
#   bench GPU BUDGET_S SUBDIR OP [ARGS...]   exactfuse bench of one op into $OUT/bench/SUBDIR
#   run GPU LIMIT_S NAME COMMAND...          a command into $OUT/logs/NAME.txt
#   w4_tests GPU / w4_bench GPU BUDGET SUBDIR CASE / show_benches / w4_ncu GPU LIMIT   the W4A16 steps (below)
# Each appends "NAME rc=N" to $OUT/rc.txt.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/bench" "$OUT/logs"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=src:/tmp/site
bench() {
  local gpu=$1 budget=$2 sub=$3 op=$4; shift 4
  mkdir -p "$OUT/bench/$sub"
  CUDA_VISIBLE_DEVICES=$gpu timeout $((budget + 60)) python3 -m exactfuse bench --grid default --op "$op" \
    --time-budget "$budget" --out "$OUT/bench/$sub" --plot "$OUT/bench/$sub/{op}.png" "$@" > "$OUT/bench/$sub/$op.log" 2>&1
  echo "bench $sub/$op rc=$?" >> "$OUT/rc.txt"
}
run() {
  local gpu=$1 limit=$2 name=$3; shift 3
  CUDA_VISIBLE_DEVICES=$gpu timeout "$limit" "$@" > "$OUT/logs/$name.txt" 2>&1
  echo "$name rc=$?" >> "$OUT/rc.txt"
}
W4_TESTS="tests/ops/test_w4a16_gemm.py tests/ops/test_w4a16_gemv.py tests/ops/test_w4a16_linear.py tests/ops/test_w4a16_compile.py"
w4_tests() {  # GPU: the W4A16 GPU tests, then verify w4a16
  run "$1" 220 t_w4a16 python3 -m pytest -m gpu -q -rfE --durations=3 -p no:cacheprovider $W4_TESTS
  run "$1" 90 verify python3 -m exactfuse verify --op w4a16_gemm
}
w4_bench() {  # GPU BUDGET SUBDIR CASE: the w4a16 bench of the shapes matching CASE, both dtypes, all baselines
  bench "$1" "$2" "$3" w4a16_gemm --dtype bf16 --dtype fp16 --case "$4" \
    --provider triton --provider native --provider cublas-dense --provider torch-int4
}
show_benches() {  # each bench log's output files and its summary table
  for f in "$OUT"/bench/*/*.log; do echo "== $f"; grep -E "time budget|wrote" "$f"; grep -B2 -A12 "speedup of exactfuse" "$f" | cut -c1-160 | head -16; done
}
w4_ncu() {  # GPU LIMIT_S: Nsight Compute of scripts/gpu/profile_w4a16_decode.py (M = 1), then its summary
  CUDA_VISIBLE_DEVICES=$1 timeout "$2" ncu --profile-from-start off --clock-control none --csv --page raw \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats \
    --section WarpStateStats --section MemoryWorkloadAnalysis \
    --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
    python3 scripts/gpu/profile_w4a16_decode.py > "$OUT/logs/ncu_w4a16.csv" 2> "$OUT/logs/ncu_w4a16.err"
  echo "ncu rc=$?" >> "$OUT/rc.txt"
  python3 scripts/gpu/profile_w4a16_decode.py --summary "$OUT/logs/ncu_w4a16.csv" > "$OUT/logs/ncu_summary.txt" 2>&1
}
pack_out() {  # everything under $OUT into $OUT/all.tgz (one file comes back)
  (cd "$OUT" && tar czf /tmp/all.tgz . && rm -rf ./* && mv /tmp/all.tgz all.tgz)
}
