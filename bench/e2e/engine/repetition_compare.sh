#!/usr/bin/env bash
# Issue 54's repetition bar before and after a change in one run: repetition_step.sh with the
# before build's nmt-bench-e2e, then the after build's, ROUNDS times interleaved (so that drift
# hits both alike); each build's summary (its last RESULT line per precision) is the median
# over all its rounds.
# usage: bench/e2e/engine/repetition_compare.sh BEFORE_BIN_DIR AFTER_BIN_DIR [OUT_DIR]
#   (each dir holds nmt-bench-e2e; env ROUNDS, default 2)
set -uo pipefail
before=${1:?usage: repetition_compare.sh BEFORE_BIN_DIR AFTER_BIN_DIR [OUT_DIR]}
after=${2:?usage: repetition_compare.sh BEFORE_BIN_DIR AFTER_BIN_DIR [OUT_DIR]}
out=${3:-${OUT:-/tmp/repetition-compare}}
here=$(cd "$(dirname "$0")" && pwd)
for r in $(seq "${ROUNDS:-2}"); do
  for label in before after; do
    dir=$before; [ $label = after ] && dir=$after
    mkdir -p "$out/$label"
    PATH=$dir:$PATH ROUNDS=1 bash "$here/repetition_step.sh" "$out/$label" > "$out/$label/summary-r$r.txt" 2>> "$out/$label.err" ||
      echo "$label round $r: rc=$?"
    grep '^RESULT ' "$out/$label/summary-r$r.txt" | sed "s/^/$label round $r: /"
  done
done
