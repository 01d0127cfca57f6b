#!/usr/bin/env bash
# nmt-translate --device cpu beside CTranslate2 (../shared/peers' CPU build, oneDNN) on the
# same sentences, interleaved: for each setting both engines run back to back, REPS times,
# and the median of each is printed with the load average (this machine is shared).
#   bench/cpu_compare.sh [BUILD_DIR]
# Env: SENTENCES (300: the first N of test2016), REPS (3), THREADS ("1 2"), BATCHES ("1 8 32"),
# BEAMS ("4 1"), PRECISIONS ("float32 int8"), CT2_DIR (/tmp/ct2cpu: unpacked here if absent),
# SHARED_DIR (../shared).
# Target tokens/s count the tokens without EOS for both engines (CTranslate2's count).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build}/bin/nmt-translate
n=${SENTENCES:-300} reps=${REPS:-3}
shared=${SHARED_DIR:-../shared}
ct2=${CT2_DIR:-/tmp/ct2cpu}
if [ ! -d "$ct2/python" ]; then
  mkdir -p "$ct2" && tar xJf "$shared"/peers/ct2-cpu-4.8.1-debian12-py311.tar.xz -C "$ct2"
fi
src=$(mktemp)
trap 'rm -f "$src"' EXIT
gzip -dc "$shared"/data/multi30k/test_2016_flickr.en.gz | head -n "$n" > "$src"

ours() {  # precision threads beam batch -> "sentences/s tokens/s"
  "$bin" --device cpu --precision "$1" --threads "$2" --beam "$3" --batch-size "$4" --input "$src" 2>&1 >/dev/null |
    tr '\r' '\n' | sed -n 's/^nmt-translate: \([0-9]*\) sentences, \([0-9]*\) target tokens in \([0-9.]*\) s.*/\1 \2 \3/p' |
    awk '{printf "%.1f %.0f\n", $1 / $3, ($2 - $1) / $3}'
}
theirs() {
  LD_LIBRARY_PATH=$ct2/lib PYTHONPATH=$ct2/python /usr/bin/python3 bench/ct2_cpu_translate.py \
    "$ct2/models/m30k-en-de-small" models/m30k-en-de-small/source.spm "$src" --compute-type "$1" \
    --threads "$2" --beam "$3" --batch-size "$4" |
    sed -n 's/.*s, \([0-9.]*\) sentences\/s, \([0-9]*\) target.*/\1 \2/p'
}
median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

echo "engine precision threads beam batch sentences/s target_tok/s (median of $reps, $n sentences) load"
for threads in ${THREADS:-1 2}; do
  for prec in ${PRECISIONS:-float32 int8}; do
    for beam in ${BEAMS:-4 1}; do
      for batch in ${BATCHES:-1 8 32}; do
        a=() b=()
        for ((r = 0; r < reps; ++r)); do a+=("$(ours "$prec" "$threads" "$beam" "$batch")"); b+=("$(theirs "$prec" "$threads" "$beam" "$batch")"); done
        load=$(cut -d' ' -f1 /proc/loadavg)
        for e in nmt ct2; do
          if [ $e = nmt ]; then v=("${a[@]}"); else v=("${b[@]}"); fi
          s=$(printf '%s\n' "${v[@]}" | cut -d' ' -f1 | median)
          t=$(printf '%s\n' "${v[@]}" | cut -d' ' -f2 | median)
          echo "$e $prec $threads $beam $batch $s $t $load"
        done
      done
    done
  done
done
