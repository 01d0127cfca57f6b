#!/usr/bin/env bash
# The NLLB speed run of one device call (GPU machine, repository root): two builds' engines on
# the NLLB-200 600M and 1.3B shapes (random weights, bench/e2e/engine/nllb_shape.py; float16,
# beam 4, 27 source tokens, 33 decoder steps) beside CTranslate2 4.8.1 float16 (the target
# language token then 32 tokens: the same steps); ncu of the after build's batch-1 and batch-64
# steps on the 600M shape (bench/e2e/engine/ncu_step.py); the Marian shapes before and after
# (compare_e2e.sh, two interleaved rounds at batches 1 and 256).
# usage: bench/e2e/engine/nllb_speed_run.sh BEFORE_BIN_DIR AFTER_BIN_DIR
#   each BIN_DIR holds an nmt-bench-e2e (a wrapper script that sets an environment switch will
#   do); CTranslate2's GPU tarball at $CT2_TARBALL (default .peers/ct2-4.8.1-sm90-py312.tar.xz,
#   ../shared/peers/README.md), the Multi30k data under $NMT_SHARED.
# Writes $OUT/results.jsonl (label "before SHAPE", "after SHAPE", "ct2 SHAPE"), $OUT/nllb.log,
# $OUT/ncu-b1.csv, $OUT/ncu-b64.csv and $OUT/marian/results.jsonl.
set -uo pipefail
before=${1:?usage: nllb_speed_run.sh BEFORE_BIN_DIR AFTER_BIN_DIR}
after=${2:?usage: nllb_speed_run.sh BEFORE_BIN_DIR AFTER_BIN_DIR}
out=${OUT:-/tmp/out}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out" /tmp/ct2
tar xJf "${CT2_TARBALL:-.peers/ct2-4.8.1-sm90-py312.tar.xz}" -C /tmp/ct2
tag() {  # RESULT lines of stdin -> JSON lines labelled $1
  python3 -c '
import json, sys
for line in sys.stdin:
    if line.startswith("RESULT "):
        d = json.loads(line[7:]); d.update(label=sys.argv[1]); print(json.dumps(d), flush=True)' "$1" >> "$out/results.jsonl"
}
args="--precision float16 --beam 4 --src-len 27 --tgt-len 33 --batches 1,16,64,256 --sentences 512"
for shape in 600m 1.3b; do
  python3 "$here/nllb_shape.py" write --shape $shape --out /tmp/nllb-$shape 2>&1 | grep wrote
  for spec in "before=$before" "after=$after"; do
    "${spec#*=}/nmt-bench-e2e" --ids-model /tmp/nllb-$shape $args 2>&1 | tee -a "$out/nllb.log" | tag "${spec%%=*} $shape"
  done
  PYTHONPATH=/tmp/ct2/site:${PYTHONPATH:-} timeout 150 python3 "$here/nllb_shape.py" ct2 --model /tmp/nllb-$shape \
    --repeat 2 --latency-sentences 20 2>&1 | tee -a "$out/nllb.log" | tag "ct2 $shape"
  if [ $shape = 600m ]; then
    # ~5 steps (batch 1) and ~3 (batch 64) of the first measured sentence's decoding
    metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
    for b in 1 64; do
      skip=$([ $b = 1 ] && echo 1200 || echo 1400)
      timeout 80 ncu --csv --print-units base --clock-control none --cache-control none --metrics $metrics \
        --launch-skip $skip --launch-count 560 --log-file "$out/ncu-b$b.csv" "$after/nmt-bench-e2e" \
        --ids-model /tmp/nllb-600m $args --batches $b --sentences $([ $b = 1 ] && echo 2 || echo 64) --repeat 1 > /dev/null 2>&1
      python3 "$here/ncu_step.py" "$out/ncu-b$b.csv" --top 12 --title "600M batch $b"
    done
  fi
  rm -rf /tmp/nllb-$shape
done
NMT_E2E_BATCHES=1,256 NMT_E2E_DEMO_COPIES=1 NMT_E2E_BASE_SENTENCES=512 timeout 200 \
  bash "$here/compare_e2e.sh" "$out/marian" before="$before" after="$after" before="$before" after="$after" > /dev/null 2>&1
