#!/bin/bash
# prefix-score's one GPU call: transformers references (tools/conformance/controls/prefix_score.py),
# then the CUDA tests that read them (nmt-test-cuda-all: PrefixScoreCuda, the top-k kernels).
set -u
# Carry the bundle (../shared/tools/device-bundle.sh of nmt-test-cuda-all, with prefix_score.py
# and __init__.py beside it) as .devbundle-prefix-score.
repo=$PWD; B=$repo/.devbundle-prefix-score
mkdir -p /tmp/b && tar xJf $B/bundle.tar.xz -C /tmp/b
export LD_LIBRARY_PATH=/tmp/b/lib:${LD_LIBRARY_PATH:-}
# the tests find the repository where it was built (NMT_REPO_ROOT, compiled in)
{ mkdir -p /work/wt && ln -sfn "$repo" /work/wt/prefix-score; } || echo "cannot link /work/wt/prefix-score"
mkdir -p tools/conformance/controls && cp $B/prefix_score.py $B/__init__.py tools/conformance/controls/
start=$(date +%s)
timeout 140 python3 -m tools.conformance.controls.prefix_score --out "$repo/tests/conformance/controls/prefix_score" > $OUT/generate.log 2>&1
echo "generate rc=$? $(( $(date +%s) - start ))s" >> $OUT/generate.log
mkdir -p $OUT/prefix_score && cp tests/conformance/controls/prefix_score/* $OUT/prefix_score/ 2>/dev/null
tail -8 $OUT/generate.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 75 /tmp/b/bin/nmt-test-cuda-all --gtest_filter='PrefixScoreCuda.*:BeamTopkCuda*' > $OUT/gpu.log 2>&1
echo "gpu rc=$?"
grep -E "^\[  (PASSED|FAILED|SKIPPED)|identical|Failure|Expected|Which is|tests ran" $OUT/gpu.log | head -40
