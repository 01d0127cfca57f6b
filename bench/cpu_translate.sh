#!/usr/bin/env bash
# CPU throughput of nmt-translate on Multi30k test2016 (1000 sentences), beam 4, float32.
#   bench/cpu_translate.sh [BUILD_DIR]      (prints one line per batch size)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build}/bin/nmt-translate
src=$(mktemp)
trap 'rm -f "$src"' EXIT
gzip -dc ../shared/data/multi30k/test_2016_flickr.en.gz > "$src"
for bs in 1 16 32 64; do
  printf 'batch %-3s ' "$bs"
  "$bin" --device cpu --beam 4 --batch-size "$bs" --input "$src" 2>&1 >/dev/null | grep '^nmt-translate:' || true
done
