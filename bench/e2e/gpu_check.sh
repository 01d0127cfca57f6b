#!/usr/bin/env bash
# Everything the GPU machine checks in one device run, logs under $OUT:
#   1. kernel tests (CPU references, CUDA kernels) and CUDA engine tests (CPU engine, golden);
#   2. end-to-end benchmark with transformers in the same run (run_e2e.sh);
#   3. the server on the GPU against the engine's offline throughput (serve_bench.sh);
#   4. where a batch-64 decode step's GPU time goes (ncu, per kernel);
#   5. kernel benchmarks with the PyTorch baseline, compute-sanitizer memcheck of the kernel tests.
# $OUT gets tests.log (tests, server, summaries), e2e/{results.jsonl,e2e.log}, ncu.txt,
# ours.csv and tables.md (the device tool returns at most 8 files).
# usage (device run, repository root, bundle made by
#   ../shared/tools/device-bundle.sh DIR .devbundle-cuda with the golden/Multi30k files
#   copied to .devbundle-cuda/shared; DIR = build-cuda, or a folder holding only the
#   executables the PARTS need when all nine make the travelling tree exceed 64 MiB):
#   bench/e2e/gpu_check.sh [PARTS]
# PARTS: any of tests e2e server ncu kernel-bench memcheck (default: all).
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out" /tmp/b
repo=$PWD
tar xJf .devbundle-cuda/bundle.tar.xz -C /tmp/b
export PATH=/tmp/b/bin:$PATH LD_LIBRARY_PATH=/tmp/b/lib:${LD_LIBRARY_PATH:-}
# The tests read ../shared next to the compiled-in repository root (/work/main).
shared=$repo/.devbundle-cuda/shared
export NMT_SHARED=$shared
[ -e /work/main ] || { mkdir -p /work && ln -s "$repo" /work/main; }
for d in /work/shared "$(dirname "$repo")/shared"; do
  [ -e "$d" ] || { mkdir -p "$(dirname "$d")" && ln -s "$shared" "$d"; }
done
log=$out/tests.log
parts=${1:-tests e2e server ncu kernel-bench memcheck}
step() { echo "=== $* ($(date -u +%T))" | tee -a "$log"; }
want() { [[ " $parts " == *" $1 "* ]]; }
src=/tmp/test2016.en
gzip -dc "$shared/data/multi30k/test_2016_flickr.en.gz" > $src

if want tests; then
step tests
(nmt-test-kernels-cpu --gtest_brief=1; nmt-test-kernels-cuda --gtest_brief=1) 2>&1 | tail -40 >> "$log"
timeout 240 test_cuda_engine 2>&1 | grep -v "^\[ *\(RUN\|OK\) " | tail -30 >> "$log"
timeout 240 test_cuda_engine_families 2>&1 | grep -v "^\[ *\(RUN\|OK\) " | tail -30 >> "$log"
timeout 240 test_cuda_engine_errors 2>&1 | grep -v "^\[ *\(RUN\|OK\) " | tail -30 >> "$log"
timeout 240 test_golden_cuda 2>&1 | grep -v "^\[ *\(RUN\|OK\) " | tail -30 >> "$log"
fi

if want e2e; then
step e2e
NMT_CUDA_PROFILE=1 timeout 300 bash bench/e2e/engine/run_e2e.sh "$out/e2e" > /tmp/e2e.out 2>&1
grep -E "nmt cuda profile|memory|MiB|H100|H200" /tmp/e2e.out | tail -30 >> "$log"
fi

if want server; then
step server
# served throughput and latency against the engine's offline figures, in this run
timeout 420 bash bench/e2e/server/serve_bench.sh "$out/serve" 1 2 >> "$log" 2>&1
fi

if want ncu; then
step ncu
# fp16 batch 64, demo model and Transformer-base: 4000 launches skipped (warm-up pass,
# encodes, graph captures), then 400 kernels (about 9 decode steps)
timeout 100 ncu --launch-skip 4000 --launch-count 400 --metrics gpu__time_duration.sum --csv \
  --log-file /tmp/ncu-demo.csv nmt-bench-e2e --model models/m30k-en-de-small --source $src \
  --precision float16 --batches 64 --repeat 1 > /dev/null 2>&1
python3 bench/e2e/engine/hf_baseline.py write-random --shape base --out /tmp/base > /dev/null 2>&1
timeout 100 ncu --launch-skip 4000 --launch-count 400 --metrics gpu__time_duration.sum --csv \
  --log-file /tmp/ncu-base.csv nmt-bench-e2e --ids-model /tmp/base --precision float16 \
  --batches 64 --repeat 1 --sentences 256 > /dev/null 2>&1
for m in demo base; do
echo "--- $m" >> "$out/ncu.txt"
python3 - /tmp/ncu-$m.csv >> "$out/ncu.txt" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
start = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
rows = rows[start:]
head = rows[0]; name = head.index("Kernel Name"); val = head.index("Metric Value")
unit = head.index("Metric Unit") if "Metric Unit" in head else None
scale = {"nsecond": 1, "ns": 1, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6}
tot = collections.defaultdict(float); cnt = collections.Counter()
for r in rows[1:]:
    try: v = float(r[val].replace(",", "")) * (scale.get(r[unit], 1) if unit is not None else 1)
    except ValueError: continue
    k = r[name][:90]; tot[k] += v; cnt[k] += 1
all_ns = sum(tot.values())
print(f"{len(rows) - 1} kernels, {all_ns / 1e3:.1f} us GPU time in total")
for k, v in sorted(tot.items(), key=lambda kv: -kv[1]):
    print(f"{v / 1e3:9.1f} us {100 * v / all_ns:5.1f}% {cnt[k]:4d}x {v / cnt[k] / 1e3:7.2f} us  {k}")
PY
done
fi

if want kernel-bench; then
step kernel-bench
timeout 120 nmt-bench-kernels > "$out/ours.csv" 2> /tmp/bench.log
timeout 120 python3 bench/kernels/torch_baseline.py --ours "$out/ours.csv" > "$out/tables.md" 2>> /tmp/bench.log
tail -8 /tmp/bench.log >> "$log"
fi

if want memcheck; then
step memcheck
timeout $((570 - SECONDS > 30 ? 570 - SECONDS : 30)) compute-sanitizer --tool memcheck nmt-test-kernels-cuda --gtest_brief=1 2>&1 | tail -15 >> "$log"
fi
step done
