#!/usr/bin/env bash
# One device run of a change (GPU machine, repository root): the build before it and the build
# after it side by side, each part under a time limit so that the call ends inside the
# machine's per-command limit, in the order of what matters most.
#   tests:  the after build's CUDA tests (nmt-test-cuda-all: kernels, engine, conformance,
#           families, errors, concurrent engines) to $OUT/tests/all.log;
#   engine: bench/e2e/engine/compare_e2e.sh over both builds (demo model and Transformer-base
#           shape, float16, beam 4), interleaved before/after ROUNDS times;
#   nllb:   the NLLB-200 shapes of SHAPES (random weights, engine/nllb_shape.py): the after
#           build's engine (with its memory loaded, at peak and given back) and CTranslate2
#           4.8.1 float16, beam 4, the target language token then exactly 32 tokens (33 decoder
#           steps both);
#   nllb-serve: server/nllb_serve.sh on the 600M shape: 64 clients with mixed target languages
#           beside the engine offline at batch 64;
#   serve:  server/serve_bench.sh with each build's server (2 decode loops, OFFLINE=0),
#           ROUNDS interleaved passes;
#   soak:   server/soak_mixed.py with the after build (default config, SOAK_SECONDS, 510; SOAK_ARGS: more of its flags, e.g. --reload-every 15);
#   cache:  server/cache_bench.sh: the after build's cache on/off at half repeats over
#           Multi30k's train.en.gz (CACHE_INPUT), and its cache off against the before build's
#           server (BEFORE_CONFIG, default .devbundle-base/default.yaml; the before build has no
#           cache to turn off) at 64 and 256 clients;
#   score:  server/score_bench.py: the after build's Score RPC (test2016 pairs, 64 a request,
#           1 and 4 in flight) beside CTranslate2's score_batch at batch 64 (demo model).
# usage: bench/e2e/device_run.sh BEFORE_LABEL AFTER_LABEL [PARTS]
#   .devbundle-base/*.tar.xz: the before build's bin/nmt-bench-e2e and bin/nmt-server;
#   .devbundle-new/*.tar.xz: the after build's bin/ (those two, nmt-loadgen, nmt-test-cuda-all);
#   .devbundle-lib/*.tar.xz: lib/, the libraries the GPU machine lacks (as
#   ../shared/tools/device-bundle.sh collects them); any of the three may have come in an
#   earlier call (.devbundle-cache/); .devbundle-data/shared: the Multi30k data; .peers/:
#   CTranslate2's GPU tarball (../shared/peers/README.md).
#   .devbundle-base/default.yaml: the before build's configs/default.yaml (serve).
#   env: ROUNDS (1), SHAPES (600m), SECONDS_PER_PASS (3, serve), BUILD_ROOT (the after build's
#   repository path, which its tests have compiled in: linked to this one), BUNDLE (the
#   bundles' folder prefix, .devbundle: BUNDLE-base, BUNDLE-new, BUNDLE-lib), NMT_SHARED (the
#   data, default .devbundle-data/shared).
# Writes $OUT/results.jsonl (RESULT objects with device, commit and date) and the logs.
set -uo pipefail
before=${1:?usage: device_run.sh BEFORE_LABEL AFTER_LABEL [PARTS]}
after=${2:?usage: device_run.sh BEFORE_LABEL AFTER_LABEL [PARTS]}
shift 2
parts=${*:-tests engine nllb nllb-serve serve}
out=${OUT:-/tmp/out}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
mkdir -p "$out"
# A call's upload is bounded (64 MiB with the tree), so the bundles may come in several calls
# of one warm machine: each is unpacked into an ignored folder that stays between calls.
cache=$repo/.devbundle-cache
bundle=${BUNDLE:-.devbundle}
for b in base new lib; do
  for f in "$repo/$bundle-$b"/*.tar.xz; do [ -f "$f" ] && mkdir -p "$cache/$b" && tar xJf "$f" -C "$cache/$b"; done
done
base=$cache/base new=$cache/new
export LD_LIBRARY_PATH=$cache/lib/lib:${LD_LIBRARY_PATH:-}
export NMT_SHARED=${NMT_SHARED:-$repo/.devbundle-data/shared}
# The tests find the repository where it was built (NMT_REPO_ROOT, compiled in): BUILD_ROOT.
if [ -n "${BUILD_ROOT:-}" ] && [ ! -e "$BUILD_ROOT" ]; then mkdir -p "$(dirname "$BUILD_ROOT")" && ln -s "$repo" "$BUILD_ROOT"; fi
device=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
date=$(date -u +%F)
t0=$SECONDS
tag() {  # RESULT lines of stdin -> JSON lines with device, commit and date, into results.jsonl
  grep '^RESULT ' | sed 's/^RESULT //' | python3 -c '
import json, sys
for line in sys.stdin:
    d = json.loads(line)
    d.update(device=sys.argv[1], commit=sys.argv[2], date=sys.argv[3], call="device run")
    print(json.dumps(d), flush=True)' "$device" "$1" "$date" >> "$out/results.jsonl"
}
for part in $parts; do
  echo "=== $part at $((SECONDS - t0)) s"
  case $part in
    tests)
      mkdir -p "$out/tests"
      (cd "$repo" && timeout 300 "$new/bin/nmt-test-cuda-all" --gtest_brief=1 > "$out/tests/all.log" 2>&1)
      echo "nmt-test-cuda-all rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) |tests? ran' "$out/tests/all.log" | tr '\n' ' ')" ;;
    engine)
      specs=()
      for _ in $(seq "${ROUNDS:-1}"); do specs+=("$before=$base/bin" "$after=$new/bin"); done
      NMT_E2E_BATCHES=${NMT_E2E_BATCHES:-1,64,256} NMT_E2E_DEMO_COPIES=1 timeout 200 \
        bash "$here/engine/compare_e2e.sh" "$out/e2e" "${specs[@]}" > /dev/null
      cat "$out/e2e/results.jsonl" >> "$out/results.jsonl" ;;
    nllb)
      mkdir -p /tmp/ct2 && tar xJf "$repo"/.peers/ct2-4.8.1-sm90-py312.tar.xz -C /tmp/ct2
      for shape in ${SHAPES:-600m}; do
        timeout 120 python3 "$here/engine/nllb_shape.py" write --shape "$shape" --out /tmp/nllb-$shape 2>&1 | tee -a "$out/nllb.log" | grep wrote
        # ours (--ids-model: no tokenizer, so the first token is not forced to a language; the
        # same work a step) 33 tokens, EOS masked before the last
        timeout 90 $new/bin/nmt-bench-e2e --ids-model /tmp/nllb-$shape --precision float16 --beam 4 \
          --src-len 27 --tgt-len 33 --batches 1,16,64,256 --sentences 512 --latency-sentences 20 \
          2>&1 | tee -a "$out/nllb.log" | tag "$after nllb-$shape"
        PYTHONPATH=/tmp/ct2/site:${PYTHONPATH:-} timeout 150 python3 "$here/engine/nllb_shape.py" ct2 \
          --model /tmp/nllb-$shape --batches 1,16,64,256 --repeat 2 --latency-sentences 20 \
          2>&1 | tee -a "$out/nllb.log" | tag "ctranslate2-4.8.1 nllb-$shape"
      done ;;
    nllb-serve)
      PATH=$new/bin:$PATH MODEL_DIR=/tmp/nllb-600m NMT_COMMIT=$after SECONDS_PER_PASS=8 timeout 150 \
        bash "$here/server/nllb_serve.sh" "$out/nllb-serve" 2>&1 | tail -3
      cat "$out/nllb-serve/results.jsonl" >> "$out/results.jsonl" ;;
    serve)
      for round in $(seq "${ROUNDS:-1}"); do
        for spec in "$before=$base" "$after=$new"; do
          o=$out/serve-${spec%%=*}-$round
          # the before build starts from its own config, and has no translation cache to turn off
          config=() && [ "${spec#*=}" = "$base" ] && config=(SERVE_CONFIG="$repo/.devbundle-base/default.yaml" NO_CACHE_ARGS=)
          env "${config[@]}" PATH=${spec#*=}/bin:$new/bin:$PATH NMT_COMMIT=${spec%%=*} OFFLINE=0 \
            SECONDS_PER_PASS=${SECONDS_PER_PASS:-3} CLIENT_THREADS=4 timeout 120 \
            bash "$here/server/serve_bench.sh" "$o" 2 > "$o.txt" 2>&1
          python3 "$here/server/serve_summary.py" "$o/results.jsonl" >> "$o.txt" 2>&1
          cat "$o/results.jsonl" >> "$out/results.jsonl"
        done
      done ;;
    soak)
      # the server logs every failed request (millions in 9 minutes on a GPU): its tail comes back
      PATH=$new/bin:$PATH timeout 590 python3 "$here/server/soak_mixed.py" /tmp/soak --device cuda \
        --duration "${SOAK_SECONDS:-510}" ${SOAK_ARGS:-} > "$out/soak.txt" 2>&1
      echo "soak_mixed.py rc=$? $(grep -c '"pass": false' "$out/soak.txt") failing RESULT lines"
      mkdir -p "$out/soak" && cp /tmp/soak/samples.jsonl "$out/soak/" && tail -c 2000000 /tmp/soak/server.log > "$out/soak/server-tail.log"
      grep -v -E '\[(warning|info)\] request' /tmp/soak/server.log | tail -c 2000000 > "$out/soak/server-other.log"
      tag "$after soak" < "$out/soak.txt" ;;
    cache)
      PATH=$new/bin:$PATH NMT_COMMIT=$after BEFORE_SERVER=$base/bin/nmt-server BEFORE_NO_CACHE_ARGS= \
        BEFORE_CONFIG=${BEFORE_CONFIG:-$repo/.devbundle-base/default.yaml} \
        INPUT=${CACHE_INPUT:-$NMT_SHARED/data/multi30k/train.en.gz} SECONDS_PER_PASS=${SECONDS_PER_PASS:-5} \
        ROUNDS=${ROUNDS:-2} CLIENT_THREADS=4 timeout 300 bash "$here/server/cache_bench.sh" "$out/cache" 2>&1 | tail -12
      cat "$out/cache/results.jsonl" >> "$out/results.jsonl" ;;
    score)
      m30k=$NMT_SHARED/data/multi30k
      sed -e "s|path: ../models|path: $repo/models|" "$repo/configs/default.yaml" > /tmp/score.yaml
      # the cache off: every request is scored (the pairs repeat)
      (exec "$new/bin/nmt-server" --config /tmp/score.yaml --device cuda --precision float16 --host 127.0.0.1 \
        --port 50980 --metrics-port 50981 --translation-cache-mb 0) > "$out/score-server.log" 2>&1 &
      spid=$!
      for _ in $(seq 120); do "$new/bin/nmt-loadgen" --health-check --target 127.0.0.1:50980 > /dev/null 2>&1 && break; sleep 0.5; done
      for k in 1 4; do
        timeout 60 python3 "$here/server/score_bench.py" served --target 127.0.0.1:50980 --in-flight $k \
          --source "$m30k/test_2016_flickr.en.gz" --reference "$m30k/test_2016_flickr.de.gz" --seconds 8 2>&1 | tee -a "$out/score.log" | tag "$after score"
      done
      kill "$spid"; wait "$spid"
      mkdir -p /tmp/ct2 && tar xJf "$repo"/.peers/ct2-4.8.1-sm90-py312.tar.xz -C /tmp/ct2
      PYTHONPATH=/tmp/ct2/site:${PYTHONPATH:-} timeout 120 python3 "$here/server/score_bench.py" ct2 \
        --model "$repo/models/m30k-en-de-small" --source "$m30k/test_2016_flickr.en.gz" \
        --reference "$m30k/test_2016_flickr.de.gz" 2>&1 | tee -a "$out/score.log" | tag "ctranslate2-4.8.1 score" ;;
  esac
done
echo "=== done at $((SECONDS - t0)) s"
