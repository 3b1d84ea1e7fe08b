export OMP_NUM_THREADS=2 EXACTFUSE_GIT_REV=$(git rev-parse --short HEAD 2>/dev/null || echo head)
EXACTFUSE_OUT=$OUT/b EXACTFUSE_RUN_SECONDS=95 bash scripts/gpu/run.sh \
  bench causal_conv1d_fn_backward --dtype bf16 --provider triton --provider fla
(cd w4snap && EXACTFUSE_OUT=$OUT/w4 EXACTFUSE_RUN_SECONDS=85 bash scripts/gpu/run.sh ncu w4a16_persistent 1; tail -30 $OUT/w4/logs/*ncu*.log)
