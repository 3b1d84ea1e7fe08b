export OMP_NUM_THREADS=2 EXACTFUSE_GIT_REV=4e4e79a
T0=$(date +%s)
EXACTFUSE_OUT=$OUT/a EXACTFUSE_RUN_SECONDS=150 bash scripts/gpu/run.sh suite --only big_memory
mkdir -p $OUT/q
for i in cold warm; do s=$(date +%s); TRITON_CACHE_DIR=/tmp/tcq PYTHONPATH=src timeout $([ $i = cold ] && echo 110 || echo 40) python3 -m exactfuse verify --quick > $OUT/q/verify_$i.txt 2>&1; echo "verify --quick $i: rc=$? $(( $(date +%s) - s )) s" | tee -a $OUT/q/times.txt; done
s=$(date +%s); TRITON_CACHE_DIR=/tmp/tcq PYTHONPATH=src:/tmp/site timeout 70 python3 -m exactfuse bench --quick > $OUT/q/bench_quick.txt 2>&1; echo "bench --quick (after verify): rc=$? $(( $(date +%s) - s )) s" | tee -a $OUT/q/times.txt
(cd w4snap && mkdir -p $OUT/w4 && EXACTFUSE_OUT=$OUT/w4 PYTHONPATH=src timeout 125 python3 scripts/gpu/probe_w4a16_persistent.py --warps 4 8 --chunks 2 4 --rep-ms 2 > $OUT/w4/probe.log 2>&1; echo "w4 probe rc=$?")
left=$(( 555 - ($(date +%s) - T0) ))
EXACTFUSE_OUT=$OUT/b EXACTFUSE_RUN_SECONDS=$left bash scripts/gpu/run.sh \
  bench causal_conv1d_update --dtype bf16 --dtype fp16 --provider triton --provider fla -- \
  bench causal_conv1d_fn_backward --dtype bf16 --dtype fp16 --provider triton --provider fla --provider eager-autograd -- \
  bench causal_conv1d --dtype fp16 --provider triton --provider fla --provider fla-plain
cat $OUT/q/times.txt; tail -40 $OUT/w4/probe.log
