#!/usr/bin/env bash
# The CPU server at 64 concurrent clients beside the engine's offline throughput (issue 16):
# for each precision, nmt-server --device cpu (one decode loop on all cores) under
# nmt-loadgen's closed loop (one sentence per request, beam 4, on the same cores), then
# nmt-translate --batch-size 64 on the same sentences; REPS rounds, interleaved, each printed
# with the load average (this machine is shared).
#   bench/cpu_serve_compare.sh [BUILD_DIR]
# Env: SENTENCES (300: the first N of test2016), REPS (2), PRECISIONS ("float32 int8"),
# CLIENTS (64), DURATION (20 s, after a 5 s warm-up), SHARED_DIR (../shared), PORT (50871).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build}/bin
n=${SENTENCES:-300} reps=${REPS:-2} clients=${CLIENTS:-64} seconds=${DURATION:-20}
shared=${SHARED_DIR:-../shared} port=${PORT:-50871}
src=$(mktemp)
server=
trap 'rm -f "$src" "$src.served"; [ -n "$server" ] && kill "$server" 2>/dev/null; true' EXIT
gzip -dc "$shared"/data/multi30k/test_2016_flickr.en.gz | sed -n "1,${n}p" > "$src"  # sed reads to the end: no SIGPIPE for gzip

served() {  # precision -> sentences/s and p50 latency of the measured window
  # Without the translation cache: the decode path against CTranslate2's.
  "$bin"/nmt-server --config configs/default.yaml --device cpu --precision "$1" --workers 1 \
    --host 127.0.0.1 --port "$port" --metrics-port $((port + 1)) --log-level warn \
    --translation-cache-mb 0 >/dev/null 2>&1 &
  server=$!
  for _ in $(seq 100); do
    "$bin"/nmt-loadgen --health-check --target 127.0.0.1:"$port" >/dev/null 2>&1 && break
    sleep 0.2
  done
  # Ours, not another server left on the port (which the health check would also answer).
  kill -0 "$server" || { echo "nmt-server did not start (port $port taken?)" >&2; exit 1; }
  local load=("$bin"/nmt-loadgen --target 127.0.0.1:"$port" --clients "$clients" --beam 4 --input "$src")
  "${load[@]}" --duration 5 >/dev/null
  "${load[@]}" --duration "$seconds" --json |
    /usr/bin/python3 -c 'import json,sys; r=json.load(sys.stdin); print("%.1f %.0f" % (r["sentences_per_s"], r["latency_ms"]["p50"]))'
  kill "$server"
  wait "$server" || true
  server=
}
offline() {  # precision -> sentences/s
  "$bin"/nmt-translate --model models/m30k-en-de-small --device cpu --precision "$1" --beam 4 \
    --batch-size 64 --input "$src" 2>&1 >/dev/null |
    tr '\r' '\n' | sed -n 's/^nmt-translate: \([0-9]*\) sentences, .* in \([0-9.]*\) s.*/\1 \2/p' |
    awk '{printf "%.1f\n", $1 / $2}'
}

printf '%-8s %-4s %-22s %-10s %-6s %s\n' precision rep "served s/s (p50 ms)" "offline" ratio load
for ((rep = 1; rep <= reps; ++rep)); do
  for p in ${PRECISIONS:-float32 int8}; do
    served "$p" > "$src.served"  # not in a subshell: the server's pid must reach the trap
    read -r rate p50 < "$src.served"
    cli=$(offline "$p")
    printf '%-8s %-4s %-22s %-10s %-6s %s\n' "$p" "$rep" "$rate ($p50)" "$cli" \
      "$(awk -v a="$rate" -v b="$cli" 'BEGIN { printf "%.2f", a / b }')" "$(cut -d' ' -f1-3 /proc/loadavg)"
  done
done
