#!/bin/bash
# Issue 52's GPU check (engine run 49): the kernel and CUDA engine tests of a build, and
# nmt-bench-e2e of a base build ("nmt-bench-e2e-base") and the new one on Transformer-base
# (random weights), two interleaved rounds; engine memory as loaded, at its peak under load,
# right after a batch drained and once the engine gave back what it retains.
# usage (device run, repository root): bench/e2e/memory_run.sh, with .devbundle-mem-cuda/
#   holding bundle.tar.xz (bin/: the test executables, nmt-bench-e2e, nmt-bench-e2e-base; lib/)
#   and a copy of hf_baseline.py; $OUT gets tests.log and bench.log.
set -u
out=${OUT:-/tmp/out}; mkdir -p "$out" /tmp/b
tar xJf .devbundle-mem-cuda/bundle.tar.xz -C /tmp/b
export PATH=/tmp/b/bin:$PATH LD_LIBRARY_PATH=/tmp/b/lib:${LD_LIBRARY_PATH:-}
[ -e /work/wt-mem-cuda ] || { mkdir -p /work && ln -s "$PWD" /work/wt-mem-cuda; }
log=$out/tests.log
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv > "$log"
(python3 .devbundle-mem-cuda/hf_baseline.py write-random --shape base --out /tmp/tb > /tmp/wr.log 2>&1; echo "write rc=$?" >> /tmp/wr.log) &
wr=$!
t0=$(date +%s)
el() { echo "=== $* at $(( $(date +%s) - t0 )) s" >> "$log"; }
el kernels
timeout 100 nmt-test-kernels-cuda --gtest_brief=1 > /tmp/k.log 2>&1; echo "kernels rc=$?" >> "$log"; tail -25 /tmp/k.log >> "$log"
timeout 10 nmt-test-kernels-cpu --gtest_brief=1 2>&1 | tail -3 >> "$log"
el engine
timeout 60 test_cuda_engine --gtest_brief=1 2>&1 | grep -v "^\[ *\(RUN\|OK\) " | tail -12 >> "$log"
wait $wr; tail -3 /tmp/wr.log >> "$log"
el bench
for r in 1 2; do
  for b in nmt-bench-e2e-base nmt-bench-e2e; do
    timeout 50 $b --ids-model /tmp/tb --precision float16 --batches 1,64,256 --sentences 512 2>&1 | grep RESULT | sed "s/^/$b r$r /" >> "$out/bench.log"
  done
done
el conformance
:
el done
