#!/usr/bin/env bash
# Served throughput against the engine's offline throughput, in one device run (issue:
# step-level batching). On the GPU machine, with nmt-bench-e2e, nmt-server and nmt-loadgen
# on PATH and the Multi30k test2016 source in $NMT_SHARED (default ../shared):
#   1. offline: nmt-bench-e2e on test2016 x 4, batches 64, 128, 256 and 512 (sentences/s: 512
#      matches 64 clients of 8 sentences a request), and one
#      sentence at a time over all of test2016 (p50 latency: the sentences the single client
#      cycles through);
#   2. served, for each WORKERS value (decode loops of the model): a closed loop of
#      Health.Check calls (the transport's round trip alone), then nmt-loadgen with 1 client
#      (blocking in its call, then again polling for the answer: --busy-poll leaves out the
#      client thread's wake-up), 64, 128 and 256 single-sentence clients, and 64 clients of 8
#      sentences per request, each after a warm-up pass; and 256 clients of Health.Check calls:
#      the most calls a second this machine's transport carries with 256 connections, the
#      ceiling of the 256-client figure where it is lower than the engine's (server run 21).
# Every figure is a RESULT line (JSON, with device, commit and date) appended to
# OUT_DIR/results.jsonl; a summary with the served/offline ratios goes to stdout.
# usage: bench/e2e/server/serve_bench.sh OUT_DIR [WORKERS...]   (default workers: 1 2)
#   SERVER_ARGS="--max-admit-delay-steps 4" adds flags to nmt-server (recorded in the results);
#   SERVE_CONFIG=FILE: the config the servers start from (default configs/default.yaml; an older
#   build's own, for a before/after run); NO_CACHE_ARGS: the flags that turn the translation
#   cache off (default --translation-cache-mb 0; empty for a build without the cache);
#   OFFLINE=0 skips the offline figures (a second configuration in the same run);
#   SERVER_CPUS=0-7 CLIENT_CPUS=8-15 pin the server and the load generator to disjoint cores
#   (taskset), so that the clients' threads cannot delay the server's (recorded in the results);
#   CLIENT_THREADS=4 drives the many-client loads (64, 256, 64 x 8, the 256-client ping) from 4
#   threads' completion queues (nmt-loadgen --client-threads) instead of a thread per client,
#   leaving the server the cores 256 blocking client threads take (server run 23); the single
#   client keeps its own thread.
#   CONNECTIONS=16 lets the many-client loads share 16 connections (nmt-loadgen --connections:
#   their calls multiplexed as HTTP/2 streams, as behind a proxy that pools its upstream
#   connections) instead of one each (recorded in the results).
#   TRANSPORT=unix sends the loads over the server's Unix domain socket (server.unix_socket)
#   instead of TCP on the loopback (recorded in the results).
# Each server's log (a line per request, with its decoder steps) is OUT_DIR/server-W.log, and
# the lines of each measured load (its warm-up left out) OUT_DIR/server-W-LOAD.log:
# bench/e2e/server/tail_by_steps.py reads a load's latency tail against each request's own steps
# (printed for the 64- and 256-client loads).
set -uo pipefail
out=${1:?usage: serve_bench.sh OUT_DIR [WORKERS...]}
shift
workers=${*:-1 2}
transport=${TRANSPORT:-tcp}
precision=${PRECISION:-float16}
seconds=${SECONDS_PER_PASS:-10}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
shared=${NMT_SHARED:-$repo/../shared}
model=$repo/models/m30k-en-de-small
mkdir -p "$out"
work=$(mktemp -d)
src=$work/test2016.en
gzip -dc "$shared/data/multi30k/test_2016_flickr.en.gz" > "$src"
for _ in 1 2 3 4; do cat "$src"; done > "$work/test2016x4.en"
device=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
commit=${NMT_COMMIT:-$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)}
stamp() {  # adds device, commit and date to a JSON object
  python3 -c 'import json,sys; r=json.loads(sys.argv[1]); r.update(device=sys.argv[2], commit=sys.argv[3], date=sys.argv[4]); print(json.dumps(r))' \
    "$1" "$device" "$commit" "$(date -u +%F)"
}
results=$out/results.jsonl
exec_pinned() {  # cpus command...: the command on those cores, or anywhere when cpus is empty,
  local cpus=$1  # replacing the (sub)shell that runs it
  shift
  if [ -n "$cpus" ]; then exec taskset -c "$cpus" "$@"; else exec "$@"; fi
}
pin() { (exec_pinned "$@"); }  # the same in a subshell of its own

if [ "${OFFLINE:-1}" = 1 ]; then
echo "=== offline ($precision)"
nmt-bench-e2e --model "$model" --source "$work/test2016x4.en" --precision "$precision" --batches 64,128,256,512 --repeat 2 \
  2>&1 | grep '^RESULT ' | sed 's/^RESULT //' | while read -r line; do stamp "$line" >> "$results"; done
nmt-bench-e2e --model "$model" --source "$src" --precision "$precision" --batches 1 \
  2>&1 | grep '^RESULT ' | sed 's/^RESULT //' | while read -r line; do stamp "$line" >> "$results"; done
fi

port=50900
for w in $workers; do
  echo "=== served, workers $w"
  config=$work/serve-$w.yaml
  sed -e "s/^    workers: .*/    workers: $w/" -e "s|path: ../models|path: $repo/models|" \
    "${SERVE_CONFIG:-$repo/configs/default.yaml}" > "$config"
  # exec: $! is then the server itself, so that the kill below stops it (a function run in
  # the background is a subshell whose child survives the subshell's kill: until this was
  # fixed every configuration's server kept running beside the next ones, and a second pass's
  # server found its metrics port taken and exited, so that its loads reached the first's).
  # The decode path's figures: without the translation cache, which would answer the input's
  # repeated sentences from memory (SERVER_ARGS="--translation-cache-mb 64" measures it).
  (exec_pinned "${SERVER_CPUS:-}" nmt-server --config "$config" --device cuda --precision "$precision" --host 127.0.0.1 --port $port \
    --metrics-port $((port + 1)) --unix-socket "$work/grpc-$w.sock" ${NO_CACHE_ARGS---translation-cache-mb 0} ${SERVER_ARGS:-}) \
    > "$out/server-$w.log" 2>&1 &
  pid=$!
  for _ in $(seq 120); do nmt-loadgen --health-check --target 127.0.0.1:$port > /dev/null 2>&1 && break; sleep 0.5; done
  # Ours, not another server left on the port (which the health check would also answer).
  kill -0 "$pid" || { echo "nmt-server of workers $w did not start: $(tail -1 "$out/server-$w.log")" >&2; exit 1; }
  record() {  # name: nmt-loadgen's JSON report on stdin -> a RESULT line of this configuration
    local r
    r=$(python3 -c 'import json,sys; r=json.load(sys.stdin); r.update(engine="nmt-server", name=sys.argv[1], workers=int(sys.argv[2]), precision=sys.argv[3], server_args=sys.argv[4], server_cpus=sys.argv[5], client_cpus=sys.argv[6], transport=sys.argv[7]); print(json.dumps(r))' \
      "$1" "$w" "$precision" "${SERVER_ARGS:-}" "${SERVER_CPUS:-}" "${CLIENT_CPUS:-}" "$transport")
    stamp "$r" >> "$results"
  }
  target=127.0.0.1:$port
  [ "$transport" = unix ] && target=unix:$work/grpc-$w.sock
  loadgen() { pin "${CLIENT_CPUS:-}" nmt-loadgen --target "$target" "$@"; }
  load() {  # name clients sentences_per_request [nmt-loadgen flags]
    local flags=(--input "$src" --beam 4 --clients "$2" --sentences-per-request "$3" "${@:4}")
    loadgen "${flags[@]}" --duration 3 > /dev/null 2>&1  # warm-up
    local logged
    logged=$(wc -l < "$out/server-$w.log")
    loadgen "${flags[@]}" --duration "$seconds" --json 2>/dev/null | record "$1"
    tail -n +$((logged + 1)) "$out/server-$w.log" > "$out/server-$w-$1.log"
  }
  # The transport alone: the same client's closed loop of Health.Check calls (no work).
  loadgen --ping --clients 1 --duration 3 --json 2>/dev/null | record ping
  load single-client 1 1
  load single-client-busy-poll 1 1 --busy-poll
  many=()
  [ -n "${CLIENT_THREADS:-}" ] && many=(--client-threads "$CLIENT_THREADS")
  [ -n "${CONNECTIONS:-}" ] && many+=(--connections "$CONNECTIONS")
  load clients-64 64 1 "${many[@]}"
  load clients-128 128 1 "${many[@]}"
  load clients-256 256 1 "${many[@]}"
  # The transport's call rate at the same concurrency, with no work behind the calls.
  loadgen --ping --clients 256 "${many[@]}" --duration 3 > /dev/null 2>&1
  loadgen --ping --clients 256 "${many[@]}" --duration "$seconds" --json 2>/dev/null | record ping-256
  load clients-64x8 64 8 "${many[@]}"
  curl -s 127.0.0.1:$((port + 1))/metrics | grep -E "^nmt_(admitted_sentences|step_duration_seconds|time_to_first_step_seconds|encode_duration_seconds)_(sum|count|bucket)" > "$out/metrics-$w.txt"
  kill "$pid"; wait "$pid"
  for name in clients-64 clients-256; do
    echo "=== workers $w, $name: the tail against each request's steps"
    python3 "$here/tail_by_steps.py" "$out/server-$w-$name.log"
  done
  if curl -s -o /dev/null 127.0.0.1:$((port + 1))/metrics; then echo "the server of workers $w is still running" >&2; exit 1; fi
  port=$((port + 10))
done
python3 "$here/serve_summary.py" "$results"
