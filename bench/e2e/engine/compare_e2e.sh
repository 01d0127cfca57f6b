#!/usr/bin/env bash
# The CUDA engine of two builds (e.g. the previous commit and this one) and CTranslate2 in the
# same run, on the shapes of the engine-speed issue (GPU machine, float16, beam 4):
#   demo model: test2016 x4 (4000 sentences; NMT_E2E_DEMO_COPIES) at batch 64..1024, batch 1
#     p50 over 300 sentences;
#   Transformer-base shape (random weights, hf_baseline.py write-random): 27 -> 32 tokens,
#     1024 sentences at batch 64..1024, batch 1 over 20 sentences (ms per decode step).
# usage: bench/e2e/engine/compare_e2e.sh OUT_DIR LABEL=BIN_DIR [LABEL=BIN_DIR ...]
#   BIN_DIR holds that build's nmt-bench-e2e; LABEL (its commit) goes into each RESULT line
#   as "commit". CTranslate2 is measured when python3 can import ctranslate2 (see
#   ../shared/peers/README.md); the Multi30k data comes from NMT_SHARED (default ../shared).
#   NMT_CUDA_PROFILE=1 adds the engine's per-step GPU time to the log. NMT_E2E_BATCHES (default
#   1,64,128,256,512,1024) measures other batch sizes, NMT_E2E_BASE_SENTENCES (default 1024) the
#   Transformer-base shape over more sentences (batches past 1024 need them),
#   NMT_E2E_DEMO_COPIES (default 4) the demo model over fewer copies of test2016 (small batches
#   beside CTranslate2, whose batch 2 over 4000 sentences takes minutes); a LABEL given
#   twice runs twice, in order (interleaved rounds: old=A new=B old=A new=B).
# Writes OUT_DIR/results.jsonl (RESULT objects with device, commit and date) and OUT_DIR/e2e.log.
set -uo pipefail
out=${1:?usage: compare_e2e.sh OUT_DIR LABEL=BIN_DIR...}
shift
mkdir -p "$out"
batches=${NMT_E2E_BATCHES:-1,64,128,256,512,1024}
base_sentences=${NMT_E2E_BASE_SENTENCES:-1024}
demo_copies=${NMT_E2E_DEMO_COPIES:-4}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
shared=${NMT_SHARED:-$repo/../shared}
model=$repo/models/m30k-en-de-small
work=$(mktemp -d)
src=$work/test2016x$demo_copies.en
for _ in $(seq "$demo_copies"); do gzip -dc "$shared/data/multi30k/test_2016_flickr.en.gz"; done > "$src"
device=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
date=$(date -u +%F)
python3 "$here/hf_baseline.py" write-random --shape base --out "$work/base" >> "$out/e2e.log" 2>&1
# run LABEL CMD...: the RESULT lines of CMD, tagged with device, commit and date
run() {
  local label=$1
  shift
  echo "+ [$label] $*" >> "$out/e2e.log"
  "$@" 2>&1 | tee -a "$out/e2e.log" | grep '^RESULT ' | sed 's/^RESULT //' |
    python3 -c '
import json, sys
for line in sys.stdin:
    d = json.loads(line)
    d.update(device=sys.argv[1], commit=sys.argv[2], date=sys.argv[3])
    print(json.dumps(d), flush=True)' "$device" "$label" "$date" >> "$out/results.jsonl"
}
for spec in "$@"; do
  label=${spec%%=*} bin=${spec#*=}
  run "$label" "$bin/nmt-bench-e2e" --model "$model" --source "$src" --precision float16 \
    --batches "$batches" --latency-sentences 300
  run "$label" "$bin/nmt-bench-e2e" --ids-model "$work/base" --precision float16 \
    --batches "$batches" --sentences "$base_sentences"
done
if python3 -c "import ctranslate2" 2> /dev/null; then
  v=ctranslate2-$(python3 -c "import ctranslate2; print(ctranslate2.__version__)")
  run "$v" python3 "$here/ct2_gpu_bench.py" demo --model "$model" --source "$src" \
    --batches "$batches" --latency-sentences 300 --repeat 2
  run "$v" python3 "$here/ct2_gpu_bench.py" random --model "$work/base" \
    --batches "$batches" --sentences "$base_sentences" --repeat 2
fi
rm -rf "$work"
cat "$out/results.jsonl"
