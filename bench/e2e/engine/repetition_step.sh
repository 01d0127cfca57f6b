#!/usr/bin/env bash
# The repetition controls' cost on the GPU (issue 54's bar: with no_repeat_ngram_size or
# repetition_penalty on every sentence, batch-64 decode steps at most 10% longer than without).
# The demo model models/m30k-en-de-small through nmt-bench-e2e --ids-model (random source ids,
# exactly --tgt-len decode steps a sentence, so ms_per_step is one step of the whole batch),
# beam 4, batch 64, float16 and float32: no control (two steps in flight, following), then
# no_repeat_ngram_size 3, then repetition_penalty 1.2 (the CUDA engine computes their edits on
# the device and the steps follow as without; before that the host computed them with one step
# in flight: docs/decoding.md, "Repetition controls"). Rounds alternate the three so
# that drift hits them alike; the summary line per precision is the median of each.
# usage: bench/e2e/engine/repetition_step.sh [OUT_DIR]   (nmt-bench-e2e on PATH)
set -uo pipefail
out=${1:-${OUT:-/tmp/repetition-step}}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
repo=${NMT_REPO:-$(cd "$here/../../.." && pwd)}  # NMT_REPO: the script run from a copy
model=$repo/models/m30k-en-de-small
log=$out/results.jsonl
rounds=${ROUNDS:-3}
run() { echo "+ $*" >&2; "$@" 2>&1 | tee -a "$out/repetition.log" | grep '^RESULT ' | sed 's/^RESULT //' >> "$log"; }
common=(--ids-model "$model" --batches 64 --sentences 256 --src-len 20 --tgt-len 32 --repeat 3)
for p in float16 float32; do
  for r in $(seq "$rounds"); do
    run nmt-bench-e2e "${common[@]}" --precision $p
    run nmt-bench-e2e "${common[@]}" --precision $p --no-repeat-ngram-size 3
    run nmt-bench-e2e "${common[@]}" --precision $p --repetition-penalty 1.2
  done
done
python3 - "$log" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for p in ("float16", "float32"):
    def med(f):
        v = [r["ms_per_step"] for r in rows if r["precision"] == p and f(r)]
        return statistics.median(v) if v else float("nan")
    none = med(lambda r: r["no_repeat_ngram_size"] == 0 and r["repetition_penalty"] == 1)
    ngram = med(lambda r: r["no_repeat_ngram_size"] == 3)
    pen = med(lambda r: r["repetition_penalty"] != 1)
    print(f"RESULT {json.dumps({'bench': 'repetition_step', 'precision': p, 'batch': 64, 'beam': 4, 'ms_per_step_none': none, 'ms_per_step_ngram3': ngram, 'ms_per_step_penalty1.2': pen, 'ngram3_vs_none': ngram / none - 1, 'penalty_vs_none': pen / none - 1})}")
PY
