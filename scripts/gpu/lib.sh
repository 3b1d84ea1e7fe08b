# Shared by the run_s*.sh device-call scripts: output folders, the carried wheels, and two helpers.
#   bench GPU BUDGET_S SUBDIR OP [ARGS...]   exactfuse bench of one op into $OUT/bench/SUBDIR
#   run GPU LIMIT_S NAME COMMAND...          a command into $OUT/logs/NAME.txt
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
