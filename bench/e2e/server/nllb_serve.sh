#!/usr/bin/env bash
# Served throughput of an NLLB-200-shaped model with mixed target languages against the
# engine's offline throughput at the same batch, in one device run (issue 52's served bar).
# On the GPU machine, with nmt-bench-e2e, nmt-server and nmt-loadgen on PATH and torch +
# transformers in python3:
#   1. the model: ../engine/nllb_shape.py write (skipped when MODEL_DIR already holds one);
#   2. sources: SRC_LEN ids each ([eng_Latn] pieces </s>) as text, from random pieces of the
#      model's tokenizer (re-tokenized by the server: their lengths are in its log);
#   3. offline: nmt-bench-e2e --ids-model at batch CLIENTS, TGT_LEN decoder steps a sentence;
#   4. served: CLIENTS closed-loop clients of one sentence a request, the target language taken
#      in turn from LANGUAGES, every sentence TGT_LEN tokens (nmt-loadgen --decoding-length),
#      so that both sides run the same decoder steps; a warm-up pass, then SECONDS_PER_PASS.
# Every figure is a RESULT line appended to OUT_DIR/results.jsonl (with device, commit,
# date); the served/offline ratio goes to stdout.
# usage: bench/e2e/server/nllb_serve.sh OUT_DIR   (env: SHAPE=600m|1.3b MODEL_DIR CLIENTS=64
#   SRC_LEN=27 TGT_LEN=33 LANGUAGES=fra_Latn,deu_Latn,spa_Latn,zho_Hans SECONDS_PER_PASS=10
#   SERVER_ARGS: more nmt-server flags, e.g. "--max-admit-delay-steps 1")
set -euo pipefail
out=${1:?usage: nllb_serve.sh OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
shape=${SHAPE:-600m}
clients=${CLIENTS:-64}
src_len=${SRC_LEN:-27}
tgt_len=${TGT_LEN:-33}
languages=${LANGUAGES:-fra_Latn,deu_Latn,spa_Latn,zho_Hans}
seconds=${SECONDS_PER_PASS:-10}
mkdir -p "$out"
work=$(mktemp -d)
model=${MODEL_DIR:-$work/nllb-$shape}
[ -f "$model/config.json" ] || python3 "$here/../engine/nllb_shape.py" write --out "$model" --shape "$shape"
# The server reads the language codes from the tokenizer files: those of the conformance NLLB
# model (the same SentencePiece model and fairseq ids, every FLORES-200 code), where the
# writer's transformers saved none.
if ! python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); sys.exit("fra_Latn" not in str(c.get("extra_special_tokens")) + str(c.get("additional_special_tokens")))' \
    "$model/tokenizer_config.json"; then
  rm -f "$model"/tokenizer.json "$model"/tokenizer_config.json "$model"/special_tokens_map.json
  cp "$repo/tests/conformance/families/nllb/"{tokenizer.json,tokenizer_config.json} "$model/"
fi
device=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
commit=${NMT_COMMIT:-$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)}
results=$out/results.jsonl
stamp() {  # JSON object -> the same with shape, device, commit and date, appended to results
  python3 -c 'import json,sys; r=json.loads(sys.argv[1]); r.update(nllb_shape=sys.argv[2], device=sys.argv[3], commit=sys.argv[4], date=sys.argv[5]); print(json.dumps(r))' \
    "$1" "$shape" "$device" "$commit" "$(date -u +%F)" >> "$results"
}

python3 - "$model" "$src_len" 2048 > "$work/sources.txt" <<'EOF'
import random, sys
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
specials = set(tok.all_special_tokens)
pieces = [t for t, i in tok.get_vocab().items() if t not in specials and i > 3 and not (len(t) == 8 and t[3] == "_")]
rng = random.Random(52)
for _ in range(int(sys.argv[3])):  # [eng_Latn] + pieces + </s>: src_len ids
    print(tok.convert_tokens_to_string([rng.choice(pieces) for _ in range(int(sys.argv[2]) - 2)]).strip())
EOF

echo "=== offline, batch $clients"
nmt-bench-e2e --ids-model "$model" --precision float16 --batches "$clients" --src-len "$src_len" --tgt-len "$tgt_len" \
  --sentences $((clients * 8)) 2>&1 | tee "$out/offline.log" | grep '^RESULT ' | sed 's/^RESULT //' | while read -r line; do stamp "$line"; done

echo "=== served, $clients clients, targets $languages"
port=50950
config=$work/serve.yaml
# The model repository (configs/default.yaml's ../models, relative to the config) an empty
# folder of its own: from $work, ../models is no folder and the server refuses to start.
mkdir -p "$work/repository"
sed -e "s|^  - name: .*|  - name: nllb|" -e "s|path: ../models/.*|path: $model|" \
  -e "s|^  path: ../models\$|  path: $work/repository|" "$repo/configs/default.yaml" > "$config"
# Without the translation cache: the decode path's figures (the input repeats sentences). Without
# sentence splitting: each request is the one sentence the offline side decodes (random pieces
# hold full stops, and split, 10% of the texts were two or three sentences in server run 49,
# counted as one by the client).
nmt-server --config "$config" --device cuda --precision float16 --host 127.0.0.1 --port $port \
  --metrics-port $((port + 1)) --translation-cache-mb 0 --split-sentences false ${SERVER_ARGS:-} > "$out/server.log" 2>&1 &
pid=$!
for _ in $(seq 240); do nmt-loadgen --health-check --target 127.0.0.1:$port > /dev/null 2>&1 && break; sleep 0.5; done
kill -0 "$pid" || { echo "nmt-server did not start: $(tail -1 "$out/server.log")" >&2; exit 1; }
flags=(--target 127.0.0.1:$port --input "$work/sources.txt" --beam 4 --clients "$clients" --client-threads 4
  --source-language eng_Latn --target-languages "$languages" --decoding-length "$tgt_len")
nmt-loadgen "${flags[@]}" --duration 3 > /dev/null 2>&1  # warm-up
logged=$(wc -l < "$out/server.log")
nmt-loadgen "${flags[@]}" --duration "$seconds" --json > "$work/served.json"
tail -n +$((logged + 1)) "$out/server.log" > "$out/server-measured.log"
kill "$pid"; wait "$pid" || true
served=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); r.update(engine="nmt-server", name="nllb-mixed-targets", clients=int(sys.argv[2]), languages=sys.argv[3], tgt_len=int(sys.argv[4])); print(json.dumps(r))' \
  "$work/served.json" "$clients" "$languages" "$tgt_len")
stamp "$served"
python3 - "$results" "$out/server-measured.log" "$clients" <<'EOF'
import json, re, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
clients = int(sys.argv[3])
offline = [r for r in rows if r.get("batch") == clients and r.get("engine") != "nmt-server"][-1]
served = [r for r in rows if r.get("name") == "nllb-mixed-targets"][-1]
log = open(sys.argv[2]).read()
steps = [int(m.group(1)) for m in re.finditer(r"steps=(\d+)", log)]
tokens = [int(m.group(1)) for m in re.finditer(r"input_tokens=(\d+)", log)]
decoded = sum(int(m.group(1)) for m in re.finditer(r" sentences=(\d+)", log))  # as the server split them
off = clients * 1e3 / offline["ms_per_batch"]  # nmt-bench-e2e: ms a batch of `clients` sentences
srv = served["sentences_per_s"]
print(f"offline batch {clients}: {off:.1f} sentences/s ({offline.get('steps')} steps); served {clients} clients: "
      f"{srv:.1f} sentences/s (steps per request {min(steps)}-{max(steps)}, input tokens {min(tokens)}-{max(tokens)}, "
      f"errors {served.get('errors')}): {100 * srv / off:.1f}% of offline; the server decoded {decoded} sentences "
      f"for {served.get('requests')} requests")
EOF
