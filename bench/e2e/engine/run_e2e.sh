#!/usr/bin/env bash
# End-to-end benchmark on the GPU machine: nmt-serve's CUDA engine (nmt-bench-e2e) and
# transformers' generate (hf_baseline.py) in the same run, on
#   1. the demo model models/m30k-en-de-small, all 1000 test2016 sentences, beam 4:
#      batches 64 and 128 (target tokens/s), and one sentence at a time (latency);
#   2. random-weight Transformer-base (d 512, 6+6 layers, 8 heads, ffn 2048, vocab 58101) and
#      Transformer-big (opus-mt-tc-big's shape: d 1024, 16 heads, ffn 4096, same layers and
#      vocab), 27 source tokens, exactly 32 target tokens, beam 4, float16: batch 64 and 1.
# usage: bench/e2e/engine/run_e2e.sh [OUT_DIR]
#   needs nmt-bench-e2e on PATH, python3 with torch + transformers, and the Multi30k data in
#   ../shared/data (or NMT_SHARED=DIR). Prints RESULT lines (JSON) and writes OUT_DIR/results.jsonl.
set -uo pipefail
out=${1:-${OUT:-/tmp/e2e}}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
shared=${NMT_SHARED:-$repo/../shared}
model=$repo/models/m30k-en-de-small
work=$(mktemp -d)
src=$work/test2016.en
gzip -dc "$shared/data/multi30k/test_2016_flickr.en.gz" > "$src"
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv
log=$out/results.jsonl
run() { echo "+ $*" >&2; "$@" 2>&1 | tee -a "$out/e2e.log" | grep '^RESULT ' | sed 's/^RESULT //' >> "$log"; }

# 1. demo model
for p in float16 float32; do
  run nmt-bench-e2e --model "$model" --source "$src" --precision $p --batches 64,128,1
done
NMT_CUDA_GRAPHS=0 run nmt-bench-e2e --model "$model" --source "$src" --precision float16 --batches 64,128,1 --latency-sentences 200
run python3 "$here/hf_baseline.py" demo --model "$model" --source "$src" --batches 64,128 --latency 50

# 2. Transformer-base and Transformer-big shaped, random weights
for shape in base big; do
  python3 "$here/hf_baseline.py" write-random --shape $shape --out "$work/transformer-$shape" >&2
  run nmt-bench-e2e --ids-model "$work/transformer-$shape" --precision float16 --batches 64,1 --sentences 256
  run python3 "$here/hf_baseline.py" random --model "$work/transformer-$shape" --batches 64,1
  rm -rf "$work/transformer-$shape"
done
nvidia-smi --query-gpu=memory.used --format=csv
rm -rf "$work"
cat "$log"
