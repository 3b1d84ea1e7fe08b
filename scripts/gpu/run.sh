#!/usr/bin/env bash
# The one GPU entry point: run named steps on a CUDA machine, write their logs and results into the output
# folder (EXACTFUSE_OUT, below), print a short summary last.
#
#   bash scripts/gpu/run.sh STEP [ARGS...] [-- STEP [ARGS...]]... [// STEP [ARGS...] [-- ...]]...
#
# Steps (run in the order given; "--" separates steps, so a step's own arguments cannot contain a bare "--"):
#   suite [ARGS...]          the whole GPU suite, every @pytest.mark.gpu test (scripts/gpu/gpu_suite.py: xdist workers
#                            each held to a share of the card, then the big_memory tests, two workers on an H100); its report
#                            into results/gpu_suite.txt, written also when the run's time limit stops it (--budget)
#   tests [PYTEST_ARGS...]   python3 -m pytest -m gpu -q -rfE PYTEST_ARGS (default: the whole suite); each result
#                            streams into logs/<label>.stream as it finishes (scripts/gpu/pytest_stream.py)
#   verify [ARGS...]         python3 -m exactfuse verify ARGS            (e.g. --op w4a16_gemm --quick)
#   bench OP [ARGS...]       python3 -m exactfuse bench --grid default --op OP ARGS, results into
#                            bench/<step label>/ (OP "all": every op); e.g. bench w4a16_gemm --case '/M(1|2)-'
#   sweep NAME [ARGS...]     python3 scripts/gpu/sweep_NAME.py ARGS       (e.g. sweep w4a16_ab wide_a 1 2)
#   probe NAME [ARGS...]     python3 scripts/gpu/probe_NAME.py ARGS       (e.g. probe aoti_load plain)
#   ncu NAME [ARGS...]       Nsight Compute over python3 scripts/gpu/ncu_NAME.py ARGS (CSV), then
#                            that script's --summary of it                (e.g. ncu w4a16_m1)
#   vllm [ARGS...]           python3 scripts/gpu/vllm_e2e.py ARGS: exactfuse's vLLM plugin in a vllm.LLM engine, with
#                            and without it (needs .vllm/ and .whl/ from scripts/vllm_wheels.sh; docs/vllm.md)
#   sanitize TOOL verify|tests [ARGS...]
#                            compute-sanitizer --tool TOOL (memcheck, racecheck, ...) over exactfuse verify
#                            (one process) or pytest -m gpu; fails on any error it reports
#                            (e.g. sanitize memcheck verify --quick; sanitize racecheck tests -k split_fixup)
#
# "//" starts another lane: lanes run at the same time, lane i on GPU i (CUDA_VISIBLE_DEVICES=i), for the
# machines with several GPUs; with one lane the GPUs are left as they are. Example (two GPUs):
#   bash scripts/gpu/run.sh tests tests/ops/test_w4a16_gemm.py -- verify --op w4a16_gemm \
#       // bench w4a16_gemm --case '/M(1|2)-'
#
# Environment:
#   EXACTFUSE_OUT          the output folder (OUT when EXACTFUSE_OUT is unset; default /tmp/exactfuse-run); when
#                          set, the results are packed into one archive: everything but summary.txt goes into
#                          run.tgz, and tar xzf run.tgz gives logs/ (one log per step), bench/ and the sweeps' own
#                          files (results/).
#   EXACTFUSE_RUN_SECONDS  a time limit for the whole run (default 570): each step is stopped when it is spent,
#                          so the summary and the packing always happen.
#   EXACTFUSE_GIT_REV      recorded in bench results; set it when the tree has no .git, or a .git that may lag the
#                          working tree: EXACTFUSE_GIT_REV=$(git rev-parse ...).
#   EXACTFUSE_PTXAS_XZ     an xz-compressed ptxas (e.g. .whl/ptxas-13.5.xz, docs/measuring.md): unpacked, and
#                          Triton compiles every step with it (TRITON_PTXAS_PATH); the summary names it.
# Wheels in .whl/ (downloaded on a machine with network, e.g. by scripts/vllm_wheels.sh) are installed into
# /tmp/site first.
set -uo pipefail
cd "$(dirname "$0")/../.."

OUT_DIR=${EXACTFUSE_OUT:-${OUT:-}}
PACK=${OUT_DIR:+1}
OUT_DIR=${OUT_DIR:-/tmp/exactfuse-run}
BUDGET=${EXACTFUSE_RUN_SECONDS:-570}
START=$(date +%s)
LOGS=$OUT_DIR/logs
mkdir -p "$LOGS" "$OUT_DIR/results"
export PYTHONPATH=src PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" >/dev/null; then
  if python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl; then
    export PYTHONPATH=src:/tmp/site
  else
    echo "run.sh: could not install .whl/*.whl; going on without them" >&2
  fi
fi
if [ -n "${EXACTFUSE_PTXAS_XZ:-}" ]; then
  mkdir -p /tmp/exactfuse-ptxas
  if python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'))" \
    "$EXACTFUSE_PTXAS_XZ" /tmp/exactfuse-ptxas/ptxas && chmod +x /tmp/exactfuse-ptxas/ptxas &&
    /tmp/exactfuse-ptxas/ptxas --version >"$OUT_DIR/ptxas.txt"; then
    export TRITON_PTXAS_PATH=/tmp/exactfuse-ptxas/ptxas
  else
    echo "run.sh: could not unpack and run $EXACTFUSE_PTXAS_XZ; Triton's own ptxas compiles" >&2
  fi
fi
if [ -z "${EXACTFUSE_GIT_REV:-}" ] && git rev-parse --short=12 HEAD >/dev/null 2>&1; then
  EXACTFUSE_GIT_REV=$(git rev-parse --short=12 HEAD)
  export EXACTFUSE_GIT_REV
fi
SUITE_MARGIN=40 # seconds: an interrupted pytest's grace (gpu_suite.STOP_GRACE, 20) and the report
NCU_SECTIONS=(--section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats
  --section WarpStateStats --section MemoryWorkloadAnalysis
  --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio')

# step LANE INDEX NAME [ARGS...]: run one step with what is left of the budget; one line into status.tsv
step() {
  local lane=$1 index=$2 name=$3
  shift 3
  local label="$lane.$index-$name${1:+-${1//[^A-Za-z0-9_]/}}"
  local log="$LOGS/$label.log" left=$((BUDGET - ($(date +%s) - START) - 10))
  local t0 rc
  t0=$(date +%s)
  if [ "$left" -le 0 ]; then
    echo -e "$label\tskipped\t0" >>"$OUT_DIR/status.tsv"
    return
  fi
  case "$name" in
    tests)
      EXACTFUSE_STREAM=$LOGS/$label.stream PYTHONPATH=$PYTHONPATH:scripts/gpu timeout "$left" \
        python3 -m pytest -m gpu -q -rfE -p no:cacheprovider -p pytest_stream "$@" >"$log" 2>&1
      ;;
    suite)
      # the suite stops itself SUITE_MARGIN seconds before the step's limit, so that its report is written
      EXACTFUSE_STREAM=$LOGS/$label.stream PYTHONPATH=$PYTHONPATH:scripts/gpu timeout "$left" \
        python3 scripts/gpu/gpu_suite.py --out "$OUT_DIR/results/gpu_suite.txt" --budget $((left > SUITE_MARGIN ? left - SUITE_MARGIN : 1)) \
        -p pytest_stream "$@" >"$log" 2>&1
      ;;
    verify) timeout "$left" python3 -m exactfuse verify "$@" >"$log" 2>&1 ;;
    bench)
      local op=${1:?bench needs an op name (or all)}
      shift
      local dir="$OUT_DIR/bench/$label" ops=(--op "$op")
      [ "$op" = all ] && ops=()
      mkdir -p "$dir"
      timeout "$left" python3 -m exactfuse bench --grid default "${ops[@]}" --out "$dir" --plot "$dir/{op}.png" \
        "$@" >"$log" 2>&1
      ;;
    vllm) EXACTFUSE_OUT=$OUT_DIR/results timeout "$left" python3 scripts/gpu/vllm_e2e.py "$@" >"$log" 2>&1 ;;
    sweep | probe)
      local script=scripts/gpu/${name}_${1:?$name needs a script name}.py
      shift
      EXACTFUSE_OUT=$OUT_DIR/results timeout "$left" python3 "$script" "$@" >"$log" 2>&1
      ;;
    ncu)
      local script=scripts/gpu/ncu_${1:?ncu needs a script name}.py
      shift
      timeout "$left" ncu --profile-from-start off --clock-control none --csv --page raw "${NCU_SECTIONS[@]}" \
        python3 "$script" "$@" >"$OUT_DIR/results/$label.csv" 2>"$log"
      rc=$?
      python3 "$script" --summary "$OUT_DIR/results/$label.csv" >>"$log" 2>&1
      (exit $rc)
      ;;
    sanitize)
      local tool=${1:?sanitize needs a tool (memcheck, racecheck, ...)} what=${2:?sanitize needs verify or tests}
      shift 2
      local cmd=(python3 -m exactfuse verify --jobs 1 "$@")
      [ "$what" = tests ] && cmd=(python3 -m pytest -m gpu -q -rfE -p no:cacheprovider "$@")
      timeout "$left" compute-sanitizer --tool "$tool" --error-exitcode 99 --print-limit 50 "${cmd[@]}" >"$log" 2>&1
      ;;
    *)
      echo "run.sh: unknown step '$name' (suite, tests, verify, bench, vllm, sweep, probe, ncu, sanitize)" >"$log"
      false
      ;;
  esac
  rc=$?
  echo -e "$label\trc=$rc\t$(($(date +%s) - t0))" >>"$OUT_DIR/status.tsv"
}

# lane LANE ARGS...: the lane's steps one after another
lane() {
  local lane=$1 index=0 args=()
  shift
  for arg in "$@" --; do
    if [ "$arg" = -- ]; then
      if [ ${#args[@]} -gt 0 ]; then
        index=$((index + 1))
        step "$lane" "$index" "${args[@]}"
      fi
      args=()
    else
      args+=("$arg")
    fi
  done
}

[ $# -gt 0 ] || {
  sed -n '2,/^set -uo/p' "$0" | sed '$d'
  exit 2
}
lanes=() current=()
for arg in "$@" //; do
  if [ "$arg" = // ]; then
    lanes+=("$(printf '%q ' "${current[@]}")")
    current=()
  else
    current+=("$arg")
  fi
done
: >"$OUT_DIR/status.tsv"
if [ ${#lanes[@]} -eq 1 ]; then
  eval "lane 0 ${lanes[0]}"
else
  for i in "${!lanes[@]}"; do
    (
      export CUDA_VISIBLE_DEVICES=$i
      eval "lane $i ${lanes[$i]}"
    ) &
  done
  wait
fi

# the summary: each step's status and the end of its log
{
  echo "exactfuse run: $(nvidia-smi -L 2>/dev/null | head -1); git ${EXACTFUSE_GIT_REV:-?}; $(($(date +%s) - START)) s"
  [ -n "${TRITON_PTXAS_PATH:-}" ] && echo "ptxas: $TRITON_PTXAS_PATH, $(grep -o 'release [0-9.]*' "$OUT_DIR/ptxas.txt" 2>/dev/null)"
  sort "$OUT_DIR/status.tsv" | while IFS=$'\t' read -r label rc seconds; do
    echo "== $label: $rc, $seconds s"
    log="$LOGS/$label.log"
    [ -f "$log" ] || continue
    case "$label" in
      *-tests*|*-suite*)
        case "$label" in
          *-suite*) grep -E "^(commit|total|shared|big_memory|failure|error|skipped|stopped|not run):? " "$log" | head -40 ;;
          *) grep -E "passed|failed|error" "$log" | tail -1 ;;
        esac
        stream="$LOGS/$label.stream"
        [ -f "$stream" ] || continue
        echo "   finished: $(grep -cvE '^(start| )' "$stream"); not passed:"
        grep -E '^(failed|error|passed-in|failed-in)' "$stream" | sed 's/^/   /'
        echo "   still running when stopped:"
        awk '$1 == "start" { run[$2] = 1 } $1 != "start" && !/^ / { delete run[$3] } END { for (t in run) print "   " t }' "$stream"
        echo "   slowest:"
        grep -vE '^(start| )' "$stream" | sort -k2 -rn | head -8 | sed 's/^/   /'
        ;;
      *-verify*) grep -E "FAIL|PASS|error" "$log" | grep -vc PASS | sed 's/^/   lines not PASS: /'; tail -3 "$log" ;;
      *-sanitize*) grep -E "ERROR SUMMARY|passed|failed|all contracts hold|row\(s\) failed" "$log" | tail -4 ;;
      *-bench*) grep -E "wrote|time budget|geomean" "$log" | tail -8 ;;
      *) tail -8 "$log" ;;
    esac | cut -c1-200
  done
} >"$OUT_DIR/summary.txt"
if [ -n "$PACK" ]; then
  (cd "$OUT_DIR" && tar czf /tmp/exactfuse-run.tgz --exclude summary.txt . && find . -mindepth 1 -maxdepth 1 ! -name summary.txt -exec rm -rf {} + && mv /tmp/exactfuse-run.tgz run.tgz)
fi
cat "$OUT_DIR/summary.txt"
