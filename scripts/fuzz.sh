#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (+ASan/UBSan) in build-fuzz/ and runs each one for
# SECONDS (default 60) from its seed corpus in tests/fuzz/corpus/. Fails on any crash or leak.
#   scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(safetensors model_config tokenizer $(ls tests/fuzz/corpus | grep -vE '^(safetensors|config|tokenizer)$' || true))
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DNMT_FUZZ=ON -DNMT_ENABLE_CUDA=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz --target $(printf 'fuzz_%s ' "${targets[@]}")
status=0
for t in "${targets[@]}"; do
  corpus_dir=tests/fuzz/corpus/${t#model_}
  work=$(mktemp -d)
  cp -r "$corpus_dir"/. "$work"/
  log=$(mktemp)
  if (cd "$work" && "$OLDPWD/build-fuzz/bin/fuzz_$t" -max_total_time="$seconds" -print_final_stats=1 \
        -detect_leaks=1 -rss_limit_mb=4096 "$work" >"$log" 2>&1); then
    echo "fuzz_$t: $(grep -o 'number_of_executed_units: [0-9]*' "$log" | awk '{print $2}') executions in ${seconds}s, no crash"
  else
    echo "fuzz_$t: FAILED"; tail -40 "$log"; status=1
    ls "$work"/crash-* "$work"/leak-* 2>/dev/null || true
  fi
  rm -rf "$work" "$log"
done
exit $status
