#!/usr/bin/env bash
# Default-grid benchmark of every declared op on this GPU, in one process.
#
# Writes <op>.csv, <op>.json and <op>.png for each op to $OUT if set, else to
# benchmarks/results/h200. Extra arguments go to `exactfuse bench`
# (e.g. `--dtype bf16 --dtype fp16`, `--op silu_and_mul`, `--quick`).
#
# If .whl/ holds wheels (Liger-Kernel, prepared with `pip download` on a
# machine with network, see benchmarks/results/h200/README.md), they are
# installed into /tmp/site first so that the `liger` peer is timed; without
# them the run is the same minus that column.
#
# Set EXACTFUSE_GIT_REV=<sha> when the tree has no .git (the results record it).
# Each op's files are written as soon as it finishes, so a run cut short keeps
# the ops done so far. Expected time on an H200 (estimate, to be confirmed by
# the first run): 4-6 minutes for silu_and_mul, gelu_and_mul, moe_silu_and_mul
# and gelu_and_mul_sparse (torch.compile of each shape dominates); w4a16_gemm's
# 60 GEMM shapes add several minutes more. Under a 10-minute limit per command,
# run it in two parts:
#   bash scripts/gpu/bench_all.sh --op silu_and_mul --op gelu_and_mul \
#       --op moe_silu_and_mul --op gelu_and_mul_sparse
#   bash scripts/gpu/bench_all.sh --op w4a16_gemm
set -uo pipefail
cd "$(dirname "$0")/../.."

out="${OUT:-benchmarks/results/h200}"
export PYTHONPATH=src
if compgen -G ".whl/*.whl" >/dev/null; then
    if python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl; then
        export PYTHONPATH=src:/tmp/site
    else
        echo "bench_all: could not install .whl/*.whl; peers from them are skipped" >&2
    fi
fi

if [ -f src/exactfuse/__main__.py ]; then
    bench=(python3 -m exactfuse bench)
else
    bench=(python3 -m exactfuse.bench.cli)  # before the top-level CLI exists
fi

mkdir -p "$out"
start=$(date +%s)
"${bench[@]}" --grid default --out "$out" --plot "$out/{op}.png" "$@"
status=$?
echo "bench_all: exit $status after $(($(date +%s) - start)) s; results in $out"
ls -l "$out"
exit $status
