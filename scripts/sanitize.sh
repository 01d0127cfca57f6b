#!/usr/bin/env bash
# Sanitizer runs of the test suite, CPU-only builds in their own folders:
#   scripts/sanitize.sh asan   AddressSanitizer + UndefinedBehaviorSanitizer on the unit and
#                              integration tests (build-asan/)
#   scripts/sanitize.sh tsan   ThreadSanitizer on the scheduler and server concurrency tests
#                              (build-tsan/)
# Any sanitizer report fails the run (halt_on_error, and ctest sees the non-zero exit).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:?usage: scripts/sanitize.sh asan|tsan}
GENERATOR=()
command -v ninja >/dev/null && GENERATOR=(-G Ninja)
case "$mode" in
  asan)
    dir=build-asan; flags=address,undefined
    # The golden suites translate 1000 sentences several times: minutes natively, far longer
    # under ASan, and they exercise no code the smaller model tests do not.
    # The soak's and the stream flow-control test's bars are resident memory, which ASan's
    # quarantine and shadow make meaningless (flow control under ASan: +76 MB, bar 64); they
    # run natively in the main suite.
    # Alignments.OnlyTheAsking...: on a CPU without AVX-512 (oneDNN's AVX2 kernels) its sentence's
    # score batched and alone differ in the last bit under ASan, with the sanitizer build's
    # baseline-x86-64 code; not with ONEDNN_MAX_CPU_ISA=AVX, and not in the release build, where
    # the main suite runs it. Cause not found: the same with the engine's buffers 64-byte
    # aligned, with ASan's malloc fill off and with one thread.
    select=(-E 'GoldenCpu|deploy_|Golden|reliability\.(soak|streams\.stream_flow_control)|Alignments\.OnlyTheAskingSentence')
    # Run once, in the main suite: the browser tests (label browser: chromium, npm clients)
    # test the page and the clients, not the server's memory; the document round trip (label
    # documents) and format html/markdown through the real server (label markup) translate
    # many blocks through the binary, and their parsers are under ASan in their unit tests
    # and the fuzzers.
    select+=(-LE '^(browser|documents|markup)$')
    export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:abort_on_error=0
    export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
    ;;
  tsan)
    dir=build-tsan; flags=thread
    # The scheduler's, the request pipeline's (its answers come on scheduler threads) and the
    # offline text worker's unit tests, then the real server under concurrent load: integration,
    # lifecycle, the HTTP API's threads, the model repository (loads, evictions, reload under
    # load), concurrent requests for several languages of one model, overload, disconnect
    # storms, SIGTERM under load, the memory cap, the 1000 concurrent streams, /metrics under
    # hostile connections, and the connection limits (a frozen client's stream cancelled by
    # the keepalive).
    select=(-R '^server\.(scheduling\.Scheduler|pipeline\.(RequestPipeline|languages)|grpc\.(integration|call_limits|QueueThreadsTest)|app\.lifecycle|http\.(http_api|MetricsEndpoint)|repository\.model_repository)|^reliability\.(process\.(overload|sigterm|memory_cap)|connections\.(disconnect|hostile|metrics_endpoint|connection_limits)|streams\.streams)|^TextWorkerTest\.')
    export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/reliability/tsan.supp"
    ;;
  *) echo "unknown mode $mode (asan|tsan)" >&2; exit 2 ;;
esac
# -g1: line tables only, enough for file:line in every report; full debug information made
# these builds, most of these steps' time on CI's two cores, about twice as long to compile.
opt="-O2 -g1 -DNDEBUG"
cmake -S . -B "$dir" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNMT_ENABLE_CUDA=OFF \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$opt" -DCMAKE_C_FLAGS_RELWITHDEBINFO="$opt" \
  -DNMT_SANITIZE="$flags" >/dev/null
cmake --build "$dir" -j "$(nproc)"
cd "$dir"
ctest --output-on-failure -j "$(nproc)" --timeout 1500 "${select[@]}"
