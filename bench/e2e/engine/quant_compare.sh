#!/usr/bin/env bash
# Issue 57's precision variants in one device call (GPU machine, repository root): for each
# SPEC, the demo model's test2016 agreement with float16 (the DemoModelAgreesWithFloat16 test of
# its precision: identical sentences and BLEU at batch 1, 8 and 64) and the NLLB-200-600M
# shape's speed (random weights, bench/e2e/engine/nllb_shape.py; beam 4, 27 source tokens, 33
# steps, batches 1 and 256, 512 sentences).
# usage: bench/e2e/engine/quant_compare.sh BIN_DIR SPEC...
#   BIN_DIR holds nmt-bench-e2e and nmt-test-cuda-all; SPEC is a precision, then the
#   environment it runs under, comma-separated: "float16", "fp8,NMT_CUDA_INT8_GEMM=tensor-cores".
#   A SPEC starting with "+" runs the quality test too (the golden references in ../shared);
#   float16 runs the speed part only.
# Writes $OUT/results.jsonl (each RESULT line labelled with its SPEC) and $OUT/quality.log.
set -uo pipefail
bin=${1:?usage: quant_compare.sh BIN_DIR SPEC...}
shift
out=${OUT:-/tmp/out}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
[ -d /tmp/nllb-600m ] || python3 "$here/nllb_shape.py" write --shape 600m --out /tmp/nllb-600m 2>&1 | grep wrote
for arg in "$@"; do
  spec=${arg#+}
  precision=${spec%%,*}
  envs=()
  [ "$spec" != "$precision" ] && IFS=, read -ra envs <<< "${spec#*,}"
  if [ "$arg" != "$spec" ] && [ "$precision" != float16 ]; then
    suite=$([ "$precision" = fp8 ] && echo CudaEngineFp8 || echo CudaEngineInt8)
    echo "== $spec" >> "$out/quality.log"
    env "${envs[@]}" timeout 240 "$bin/nmt-test-cuda-all" --gtest_filter="$suite.DemoModelAgreesWithFloat16" 2>&1 |
      grep -E "identical|OK|FAILED|SKIPPED" >> "$out/quality.log"
  fi
  env "${envs[@]}" timeout 120 "$bin/nmt-bench-e2e" --ids-model /tmp/nllb-600m --precision "$precision" --beam 4 \
    --src-len 27 --tgt-len 33 --batches 1,256 --sentences 512 2>&1 |
    python3 -c '
import json, sys
for line in sys.stdin:
    if line.startswith("RESULT "):
        d = json.loads(line[7:]); d.update(label=sys.argv[1]); print(json.dumps(d), flush=True)' "$spec" >> "$out/results.jsonl"
done
