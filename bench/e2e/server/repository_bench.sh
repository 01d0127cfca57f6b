#!/usr/bin/env bash
# The model repository on a GPU machine (issue 13), one device run, with nmt-server and
# nmt-loadgen on PATH and python3 with torch + transformers (for the Transformer-base folder):
#   for 1 GPU (devices: [0]) and then every visible GPU (devices: all), a fresh server over
#   a repository holding the demo model and a random-weight Transformer-base:
#   1. load on demand: the first request of each model (client latency, and the server's
#      nmt_model_load_seconds);
#   2. 256 concurrent single-sentence clients (beam 4) on each model, after a warm-up. The
#      random Transformer-base never says EOS: limits.max_decoding_length (64) ends its
#      sentences, 64 target tokens each (the demo's outputs are far shorter).
# Input: synthetic English sentences (no data set needed). The server logs at warn (a line
# per request at info costs host time that the GPUs then wait for). Prints RESULT lines
# (JSON) and a summary with the throughput ratios. usage: bench/e2e/server/repository_bench.sh OUT_DIR
set -uo pipefail
out=${1:?usage: repository_bench.sh OUT_DIR}
seconds=${SECONDS_PER_PASS:-10}
clients=${CLIENTS:-256}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
mkdir -p "$out"
work=$(mktemp -d)
gpus=$(nvidia-smi -L | wc -l)
device=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
results=$out/results.jsonl

mkdir -p "$work/repo"
cp -r "$repo/models/m30k-en-de-small" "$work/repo/opus-mt-en-de"
python3 "$here/write_base_repository_model.py" "$work/repo/transformer-base" \
  "$repo/models/m30k-en-de-small" > "$out/write-base.log" 2>&1 || echo "no Transformer-base folder (see write-base.log)"
python3 - "$work/input.en" <<'PY'
import itertools, random, sys
random.seed(7)
subjects = ["A man", "A woman", "Two children", "The old dog", "A group of people", "The girl", "A young boy", "Three workers"]
verbs = ["is walking", "is sitting", "plays", "is running", "stands", "is waiting", "is reading a book", "is riding a bike"]
places = ["in the park.", "on the street.", "near the river.", "at the beach.", "in a small kitchen.", "under a tree.", "by the window.", "on a red bench."]
lines = [" ".join(t) for t in itertools.product(subjects, verbs, places)]
random.shuffle(lines)
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
PY

scrape() {  # port -> the /metrics page
  python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=10).read().decode())' "$1"
}
metric() {  # port series -> value
  scrape "$1" | awk -v s="$2" 'index($0, s " ") == 1 {print $2}'
}
port=50900
for devices in "[0]" "all"; do
  [ "$devices" = all ] && [ "$gpus" -lt 2 ] && break
  config=$work/config-$port.yaml
  printf 'limits:\n  max_decoding_length: 64\nmodel_repository:\n  path: %s\n  devices: %s\n  workers: 2\n' \
    "$work/repo" "$devices" > "$config"
  # Without the translation cache: loads and decodes, not answers from memory.
  nmt-server --config "$config" --host 127.0.0.1 --port $port --metrics-port $((port + 1)) --log-level warn \
    --translation-cache-mb 0 > "$out/server-$port.log" 2>&1 &
  pid=$!
  for _ in $(seq 120); do nmt-loadgen --health-check --target 127.0.0.1:$port > /dev/null 2>&1 && break; sleep 0.5; done
  for model in opus-mt-en-de transformer-base; do
    [ -d "$work/repo/$model" ] || continue
    start=$(date +%s.%N)
    nmt-loadgen --target 127.0.0.1:$port --input "$work/input.en" --model "$model" --clients 1 \
      --count 1 --beam 4 --timeout-ms 120000 > "$out/first-$model-$port.txt" 2>&1
    first_ms=$(python3 -c "import sys; print(round((float(sys.argv[2]) - float(sys.argv[1])) * 1e3, 1))" "$start" "$(date +%s.%N)")
    load_s=$(metric $((port + 1)) "nmt_model_load_seconds_sum{model=\"$model\"}")
    line="{\"bench\":\"load_on_demand\",\"model\":\"$model\",\"devices\":\"$devices\",\"load_ms\":$(python3 -c "print(round(${load_s:-0} * 1e3, 1))"),\"first_request_ms\":$first_ms,\"device\":\"$device\"}"
    echo "$line" >> "$results"; echo "RESULT $line"
  done
  for model in opus-mt-en-de transformer-base; do
    [ -d "$work/repo/$model" ] || continue
    nmt-loadgen --target 127.0.0.1:$port --input "$work/input.en" --model $model --clients "$clients" \
      --beam 4 --duration 3 --timeout-ms 60000 > /dev/null 2>&1  # warm-up
    r=$(nmt-loadgen --target 127.0.0.1:$port --input "$work/input.en" --model $model --clients "$clients" \
      --beam 4 --duration "$seconds" --timeout-ms 60000 --json 2>/dev/null)
    line=$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); r.update(bench="clients", model=sys.argv[4], devices=sys.argv[2], device=sys.argv[3]); print(json.dumps(r))' "$r" "$devices" "$device" "$model")
    echo "$line" >> "$results"; echo "RESULT $line"
  done
  scrape $((port + 1)) | grep -E '^nmt_(gpu_memory_bytes|model_load|models_loaded|active_sentences)' > "$out/metrics-$port.txt"
  kill "$pid"; wait "$pid"
  port=$((port + 10))
done
python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows:
    if r["bench"] == "load_on_demand":
        print(f"load on demand: {r['model']:<18} devices {r['devices']:<4} load {r['load_ms']} ms, first request {r['first_request_ms']} ms")
tp = {(r["model"], r["devices"]): r for r in rows if r["bench"] == "clients"}
for (model, d), r in tp.items():
    print(f"clients: {model:<18} devices {d:<4} {r['sentences_per_s']:.0f} sentences/s, "
          f"p50 {r['latency_ms']['p50']:.1f} ms, p99 {r['latency_ms']['p99']:.1f} ms, errors {r['errors']}")
for model in sorted({m for m, _ in tp}):
    if (model, "[0]") in tp and (model, "all") in tp:
        ratio = tp[(model, "all")]["sentences_per_s"] / tp[(model, "[0]")]["sentences_per_s"]
        print(f"ratio all/[0] {model}: {ratio:.2f}x")
PY
