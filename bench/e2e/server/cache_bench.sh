#!/usr/bin/env bash
# The translation cache's bars (issue 56), in one run on the default config:
#   1. a load that repeats half its sentences (nmt-loadgen --repeat-fraction 0.5: the input's
#      first 100 lines, the rest each sent once), served with the cache on against the same
#      load with the cache off, in turns for ROUNDS rounds: bar >= 1.8x the sentences a second
#      (the medians);
#   2. the cache off at 64 and 256 single-sentence clients against a build from before the
#      cache (BEFORE_SERVER; the decode path's figures): bar within 3%.
# Each server gets a warm-up pass per load; each pair (off/on, before/after) runs ROUNDS times
# in turn (before, after, before, after ...) so that the machine's drift falls on both. Every figure
# is a RESULT line (nmt-loadgen's JSON plus name, build, cache, round, device, commit, date)
# appended to OUT_DIR/results.jsonl; cache_summary.py prints the ratios against the bars.
#
# usage: bench/e2e/server/cache_bench.sh OUT_DIR
#   with nmt-server and nmt-loadgen on PATH (or NMT_SERVER, NMT_LOADGEN) and the Multi30k
#   test2016 source in $NMT_SHARED (default ../shared); INPUT=FILE[.gz] another source (bar 1's
#   fresh half cycles through the lines after the first 100, so a short input makes a pass
#   wrap: nmt-loadgen then suffixes them, but Multi30k's train.en.gz keeps them plain).
#   BEFORE_SERVER=PATH an older nmt-server for bar 2 (omitted: bar 2 is not measured);
#   BEFORE_CONFIG=FILE its config (default: this tree's configs/default.yaml);
#   BEFORE_NO_CACHE_ARGS its flags that turn the cache off (default --translation-cache-mb 0;
#   empty for a build without the cache).
#   DEVICE=cuda|cpu (default cuda), PRECISION (default float16 on cuda, float32 on cpu);
#   SECONDS_PER_PASS (10), ROUNDS (2), REPEAT_CLIENTS (64: the clients of bar 1),
#   CLIENTS ("64 256": bar 2's loads); CLIENT_THREADS=4 / CONNECTIONS=16 as serve_bench.sh
#   (many clients driven from a few threads / sharing connections; recorded); BARS ("1 2":
#   the bars measured, e.g. BARS=2 for bar 2's rounds alone). SERVER_CPUS=0-7 CLIENT_CPUS=8-15 pin
#   the servers and the load generator to disjoint cores (taskset, as serve_bench.sh), so that
#   the clients' threads cannot slow the server under test; recorded in the results.
# The CPU check at small scale (here, two cores): DEVICE=cpu SECONDS_PER_PASS=8 ROUNDS=1
#   REPEAT_CLIENTS=8 CLIENTS="4 8" BEFORE_SERVER=/work/main/build-cpu/bin/nmt-server ...
set -uo pipefail
out=${1:?usage: cache_bench.sh OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
shared=${NMT_SHARED:-$repo/../shared}
server_bin=${NMT_SERVER:-nmt-server}
loadgen_bin=${NMT_LOADGEN:-nmt-loadgen}
device=${DEVICE:-cuda}
if [ "$device" = cuda ]; then precision=${PRECISION:-float16}; else precision=${PRECISION:-float32}; fi
seconds=${SECONDS_PER_PASS:-10}
rounds=${ROUNDS:-2}
repeat_clients=${REPEAT_CLIENTS:-64}
clients=${CLIENTS:-64 256}
bars=" ${BARS:-1 2} "
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
src=$work/source.en
input=${INPUT:-$shared/data/multi30k/test_2016_flickr.en.gz}
case $input in *.gz) gzip -dc "$input" > "$src" ;; *) cp "$input" "$src" ;; esac
device_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
[ -n "$device_name" ] || device_name="cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"
commit=${NMT_COMMIT:-$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)}
results=$out/results.jsonl
many=()
[ -n "${CLIENT_THREADS:-}" ] && many=(--client-threads "$CLIENT_THREADS")
[ -n "${CONNECTIONS:-}" ] && many+=(--connections "$CONNECTIONS")

port=51700
pid=""
start() {  # name binary config [flags]: a server on $port, its log OUT_DIR/server-NAME.log
  local name=$1 binary=$2 config=$3
  shift 3
  sed -e "s|path: ../models|path: $repo/models|" "$config" > "$work/$name.yaml"
  port=$((port + 10))
  # exec: $! is the server itself, so that stop() ends it (serve_bench.sh says why).
  local pin=()
  [ -n "${SERVER_CPUS:-}" ] && pin=(taskset -c "$SERVER_CPUS")
  (exec "${pin[@]}" "$binary" --config "$work/$name.yaml" --device "$device" --precision "$precision" \
     --host 127.0.0.1 --port $port --metrics-port $((port + 1)) "$@") > "$out/server-$name.log" 2>&1 &
  pid=$!
  # (a server that exits at start, e.g. on a config key it does not know, ends the wait)
  for _ in $(seq 240); do
    "$loadgen_bin" --health-check --target 127.0.0.1:$port > /dev/null 2>&1 && break
    kill -0 "$pid" 2> /dev/null || break
    sleep 0.5
  done
  kill -0 "$pid" 2> /dev/null || { echo "nmt-server $name did not start: $(tail -2 "$out/server-$name.log")" >&2; exit 1; }
}
stop() {
  kill "$pid" 2> /dev/null
  wait "$pid" 2> /dev/null
  if curl -s -o /dev/null 127.0.0.1:$((port + 1))/metrics; then echo "a server is still running on $port" >&2; exit 1; fi
}
scrape() { curl -s 127.0.0.1:$((port + 1))/metrics; }
# The server totals a pass is read against (JSON, each summed over its series): the cache's
# counters, and the decode loops' steps and admissions, which say whether a slower build takes
# more steps a request or longer ones (both builds export them).
totals=(nmt_cache_hits_total nmt_cache_misses_total nmt_step_duration_seconds_count nmt_step_duration_seconds_sum
        nmt_admitted_sentences_count nmt_admitted_sentences_sum nmt_output_tokens_total)
metric_totals() {
  scrape | awk -v names="${totals[*]}" '
    BEGIN { n = split(names, m, " "); for (i = 1; i <= n; i++) s[m[i]] = 0 }
    { for (i = 1; i <= n; i++) if ($1 == m[i] || index($1, m[i] "{") == 1) s[m[i]] += $2 }
    END { printf "{"; for (i = 1; i <= n; i++) printf "%s\"%s\": %.9g", (i > 1 ? ", " : ""), m[i], s[m[i]]; print "}" }'
}
load() {  # name build cache round clients repeat [nmt-loadgen flags]: a warm-up, then a measured pass
  local name=$1 build=$2 cache=$3 round=$4 n=$5 repeat=$6
  shift 6
  local flags=(--target 127.0.0.1:$port --input "$src" --beam 4 --clients "$n" --timeout-ms 60000 "$@")
  local lg=("$loadgen_bin")
  [ -n "${CLIENT_CPUS:-}" ] && lg=(taskset -c "$CLIENT_CPUS" "$loadgen_bin")
  # A repeating load warms up on its repeated sentences alone (--repeat-fraction 1): the
  # measured pass starts its sentences from the first again, and a warm-up's fresh ones
  # would be hits in it.
  local warm=() measured=()
  [ -n "$repeat" ] && warm=(--repeat-fraction 1) && measured=(--repeat-fraction "$repeat")
  "${lg[@]}" "${flags[@]}" "${warm[@]}" --duration 3 > /dev/null 2>&1
  local before
  before=$(metric_totals)
  # To a file first: the counters after the pass (arguments of a pipeline's last command
  # would be read as the pass starts).
  "${lg[@]}" "${flags[@]}" "${measured[@]}" --duration "$seconds" --json > "$work/report.json" 2> /dev/null
  local after
  after=$(metric_totals)
  python3 -c '
import json, sys
r = json.load(sys.stdin)
name, build, cache, rnd, before, after, dev, commit, date, threads, conns, scpus, ccpus = sys.argv[1:14]
# the pass'"'"'s share of each server total (metric_totals)
d = {k: v - b for (k, v), b in zip(json.loads(after).items(), json.loads(before).values())}
r.update(engine="nmt-server", name=name, build=build, cache=cache, round=int(rnd),
         cache_hits=round(d.pop("nmt_cache_hits_total")), cache_misses=round(d.pop("nmt_cache_misses_total")),
         server_metrics=d, device=dev, commit=commit, date=date, client_threads_env=threads,
         connections_env=conns, server_cpus=scpus, client_cpus=ccpus)
steps, admissions = d["nmt_step_duration_seconds_count"], d["nmt_admitted_sentences_count"]
# where a loss lies: more loop steps (of all loops, over the requests answered: not one
# request'"'"'s own steps), or longer ones (the loop'"'"'s own clock)
r["server_steps_per_request"] = steps / r["requests"] if r.get("requests") else None
r["server_step_ms"] = 1e3 * d["nmt_step_duration_seconds_sum"] / steps if steps else None
r["server_sentences_per_admission"] = d["nmt_admitted_sentences_sum"] / admissions if admissions else None
print(json.dumps(r))' "$name" "$build" "$cache" "$round" "$before" "$after" \
    "$device_name" "$commit" "$(date -u +%F)" "${CLIENT_THREADS:-}" "${CONNECTIONS:-}" \
    "${SERVER_CPUS:-}" "${CLIENT_CPUS:-}" < "$work/report.json" >> "$results"
  tail -1 "$results" | python3 -c '
import json, sys
r = json.load(sys.stdin)
print("{:>12} {:>6} cache {:>3} round {}: {:,.1f} sentences/s, p50 {:.2f} ms, errors {}, cache hits {} misses {}".format(
    r["name"], r["build"], r["cache"], r["round"], r["sentences_per_s"], r["latency_ms"]["p50"], r["errors"],
    r["cache_hits"], r["cache_misses"]))'
}

# Bar 1: the same half-repeated load, the cache off then on (one build: this one).
if [[ $bars == *" 1 "* ]]; then
  echo "=== bar 1: --repeat-fraction 0.5 at $repeat_clients clients, the cache off and on, $rounds rounds"
  # A fresh server each pass: the cache-on one would hold the last pass's fresh sentences.
  for round in $(seq "$rounds"); do
    start after-cache-off-$round "$server_bin" "$repo/configs/default.yaml" --translation-cache-mb 0
    load repeat50 after off "$round" "$repeat_clients" 0.5 "${many[@]}"
    stop
    start after-cache-on-$round "$server_bin" "$repo/configs/default.yaml" --translation-cache-mb 64
    load repeat50 after on "$round" "$repeat_clients" 0.5 "${many[@]}"
    stop
  done
fi

# Bar 2: the cache off, this build against the one before, in turns.
if [[ $bars == *" 2 "* ]] && [ -n "${BEFORE_SERVER:-}" ]; then
  echo "=== bar 2: the cache off at $clients clients, before and after, $rounds rounds"
  for round in $(seq "$rounds"); do
    # shellcheck disable=SC2086  # BEFORE_NO_CACHE_ARGS: flags, split on purpose
    start before-$round "$BEFORE_SERVER" "${BEFORE_CONFIG:-$repo/configs/default.yaml}" ${BEFORE_NO_CACHE_ARGS---translation-cache-mb 0}
    for n in $clients; do load clients-$n before off "$round" "$n" "" "${many[@]}"; done
    stop
    start after-$round "$server_bin" "$repo/configs/default.yaml" --translation-cache-mb 0
    for n in $clients; do load clients-$n after off "$round" "$n" "" "${many[@]}"; done
    stop
  done
fi
python3 "$here/cache_summary.py" "$results"
