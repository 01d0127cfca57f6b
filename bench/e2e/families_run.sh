#!/usr/bin/env bash
# One device run for the model families and the server's new layout (GPU machine, repository
# root): the build before the change and the build after it, side by side in the same run.
#   engine: bench/e2e/engine/compare_e2e.sh over both builds (demo model and Transformer-base shape,
#           float16, beam 4), interleaved before/after;
#   nllb:   the NLLB-200-distilled-600M shape (random weights, bench/e2e/engine/nllb_shape.py):
#           CTranslate2 4.8.1 float16 and the new build's engine, beam 4, the target language
#           token then exactly 32 tokens (the same decoder steps in both);
#   serve:  bench/e2e/server/serve_bench.sh with each build's server (2 decode loops; OFFLINE=0: the
#           offline figures from the engine part), ROUNDS interleaved passes.
# usage: bench/e2e/families_run.sh BEFORE_LABEL AFTER_LABEL [PARTS]   (PARTS: engine nllb serve)
#   .devbundle-base/bundle*.tar.xz and .devbundle-new/bundle*.tar.xz hold each build's
#   bin/nmt-bench-e2e (engine, nllb) or bin/nmt-server (serve), stripped; the new one's also
#   lib/ (the libraries the GPU machine lacks, by ../shared/tools/device-bundle.sh) and
#   bin/nmt-loadgen;
#   .devbundle-new/shared/data/multi30k holds test2016's source; .peers/ CTranslate2's
#   GPU tarball (../shared/peers/README.md).
# Writes $OUT/results.jsonl (RESULT objects with device, commit and date) and the logs.
set -uo pipefail
before=${1:?usage: families_run.sh BEFORE_LABEL AFTER_LABEL [PARTS]}
after=${2:?usage: families_run.sh BEFORE_LABEL AFTER_LABEL [PARTS]}
shift 2
parts=${*:-engine nllb serve}
out=${OUT:-/tmp/out}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
mkdir -p "$out" /tmp/base /tmp/new
for f in "$repo"/.devbundle-base/bundle*.tar.xz; do tar xJf "$f" -C /tmp/base; done
for f in "$repo"/.devbundle-new/bundle*.tar.xz; do tar xJf "$f" -C /tmp/new; done
export LD_LIBRARY_PATH=/tmp/new/lib:${LD_LIBRARY_PATH:-}
export NMT_SHARED=$repo/.devbundle-new/shared
device=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
date=$(date -u +%F)
tag() {  # RESULT lines of stdin -> JSON lines with device, commit and date, into results.jsonl
  grep '^RESULT ' | sed 's/^RESULT //' | python3 -c '
import json, sys
for line in sys.stdin:
    d = json.loads(line)
    d.update(device=sys.argv[1], commit=sys.argv[2], date=sys.argv[3], call="families run")
    print(json.dumps(d), flush=True)' "$device" "$1" "$date" >> "$out/results.jsonl"
}
for part in $parts; do
  echo "=== $part $(date -u +%T)"
  case $part in
    engine)
      NMT_E2E_BATCHES=${NMT_E2E_BATCHES:-1,64,256,1024} NMT_E2E_DEMO_COPIES=1 \
        bash "$here/engine/compare_e2e.sh" "$out/e2e" "$before=/tmp/base/bin" "$after=/tmp/new/bin" \
        "$before=/tmp/base/bin" "$after=/tmp/new/bin" > /dev/null
      cat "$out/e2e/results.jsonl" >> "$out/results.jsonl" ;;
    nllb)
      mkdir -p /tmp/ct2 && tar xJf "$repo"/.peers/ct2-4.8.1-sm90-py312.tar.xz -C /tmp/ct2
      python3 "$here/engine/nllb_shape.py" write --out /tmp/nllb 2>&1 | tee -a "$out/nllb.log" | tag "$after"
      # 27 source tokens, then 33 decoder steps in both engines: CTranslate2 the target-language
      # prefix and 32 tokens; ours (--ids-model: no tokenizer, so the model's first token is
      # not forced to a language; the same work a step) 33 tokens, EOS masked before the last.
      /tmp/new/bin/nmt-bench-e2e --ids-model /tmp/nllb --precision float16 --beam 4 \
        --src-len 27 --tgt-len 33 --batches 1,16,64,256 --sentences 512 --latency-sentences 20 \
        2>&1 | tee -a "$out/nllb.log" | tag "$after"
      PYTHONPATH=/tmp/ct2/site:${PYTHONPATH:-} python3 "$here/engine/nllb_shape.py" ct2 --model /tmp/nllb \
        --batches 1,16,64,256 2>&1 | tee -a "$out/nllb.log" | tag ctranslate2-4.8.1 ;;
    serve)
      # ROUNDS (default 1) interleaved passes: before, after, before, after, ...
      for round in $(seq "${ROUNDS:-1}"); do
        for spec in "$before=/tmp/base" "$after=/tmp/new"; do
          label=${spec%%=*} dir=${spec#*=} o=$out/serve-${spec%%=*}-$round
          PATH=$dir/bin:/tmp/new/bin:$PATH LD_LIBRARY_PATH=$dir/lib:$LD_LIBRARY_PATH NMT_COMMIT=$label \
            SECONDS_PER_PASS=${SECONDS_PER_PASS:-3} CLIENT_THREADS=4 \
            bash "$here/server/serve_bench.sh" "$o" 2 > "$o.txt" 2>&1
          python3 "$here/server/serve_summary.py" "$o/results.jsonl" >> "$o.txt" 2>&1
          cat "$o/results.jsonl" >> "$out/results.jsonl"
        done
      done ;;
  esac
done
echo "=== done $(date -u +%T)"
