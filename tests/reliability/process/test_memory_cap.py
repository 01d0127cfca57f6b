#!/usr/bin/python3
"""Memory caps of the decode loops. With --device-memory-limit-mb (the CPU engine's cap on the
blocks of its decode state, allocated as tokens arrive; the CUDA engine's allocator cap on a GPU):
  - a loop whose state cannot fit (on the CPU: not even one sentence of limits.max_input_tokens)
    stops the server at start with one line that names the keys;
  - a sentence that could never fit a loop (its beam over batching.max_active_rows) is refused
    RESOURCE_EXHAUSTED at once, alone, on unary calls and streams, and counted;
  - a KV cache that must grow past the cap (a long translation at a wide beam) fails the
    sentences that needed the growth RESOURCE_EXHAUSTED ("out of memory"), and the loop goes on
    serving what fits (bench/gpu_faults.py shows the same on a GPU, short requests decoding alongside).

    test_memory_cap.py REPO_ROOT NMT_SERVER
"""
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rel  # noqa: E402

check = rel.Checks()


def start_fails(binary, config):
    """A limit too small for the configured loop: exit non-zero with a reason, at once."""
    r = subprocess.run([binary, "--config", config, "--device", "cpu", "--port", str(rel.free_port()),
                        "--metrics-port", str(rel.free_port()), "--device-memory-limit-mb", "1"],
                       capture_output=True, text=True, timeout=120)
    out = r.stdout + r.stderr
    check(r.returncode != 0 and "batching.max_active_sentences" in out and "out of memory" in out,
          f"a 1 MiB cap under slots of 256 tokens: exit {r.returncode}: {out.strip()[-300:]}")


def main():
    repo, binary = os.path.abspath(sys.argv[1]), sys.argv[2]
    tmp, pb, pb_grpc, health_pb2, health_pb2_grpc = rel.setup(repo, "nmt-memcap-")
    model = os.path.join(repo, "models/m30k-en-de-small")
    config = os.path.join(tmp, "config.yaml")
    # The CPU's blocks of the demo model hold 16 tokens in 96 KiB: one sentence of 256 source
    # tokens takes 1.5 MiB.
    rel.write_config(config, model, limits={"max_input_tokens": 256},
                     batching={"max_active_sentences": 64, "max_active_rows": 256})
    start_fails(binary, config)

    # 4 slots of 64 tokens, 8 rows, a cap of 4 MiB: 42 blocks, which a sentence at beam 8 (8
    # rows, a block each per 16 positions) passes beyond 80 target tokens.
    rel.write_config(config, model, limits={"max_input_tokens": 64},
                     batching={"max_active_sentences": 4, "max_active_rows": 8})
    server = rel.json_server(binary, config, ["--device-memory-limit-mb", "4", "--workers", "1"])
    small = pb.TranslateRequest(texts=["A man is riding a bike."], options=pb.TranslateOptions(beam_size=1))
    wide = pb.TranslateRequest(texts=["Two dogs play in the snow."], options=pb.TranslateOptions(beam_size=16))
    long = pb.TranslateRequest(texts=["Two dogs play in the snow."],
                               options=pb.TranslateOptions(beam_size=8, min_decoding_length=100,
                                                           max_decoding_length=120))
    try:
        server.wait_serving(health_pb2, health_pb2_grpc)
        with rel.grpc.insecure_channel(server.target) as channel:
            stub = pb_grpc.TranslationServiceStub(channel)
            code, _, _, r = rel.call(stub.Translate, small, timeout=30)
            check(code == "OK" and r.translations[0].hypotheses[0].text, f"a sentence that fits: {code}")
            code, seconds, details, _ = rel.call(stub.Translate, wide, timeout=30)
            check(code == "RESOURCE_EXHAUSTED" and "beam 16" in details and seconds < 1,
                  f"beam 16 over 8 rows: {code} in {seconds * 1e3:.0f} ms: {details}")
            code, _, details, _ = rel.call(stub.Translate, long, timeout=60)
            check(code == "RESOURCE_EXHAUSTED" and "out of memory" in details,
                  f"a cache growth over the cap: {code}: {details}")
            code, _, _, _ = rel.call(stub.Translate, small, timeout=30)
            check(code == "OK", f"the loop serves after the failure: {code}")

            # Concurrent: refusals never take down the sentences that fit.
            results, lock = [], threading.Lock()
            stop = time.monotonic() + 5

            def client(request, kind):
                while time.monotonic() < stop:
                    r = rel.call(stub.Translate, request, timeout=60)
                    with lock:
                        results.append((kind, r[0]))

            threads = [threading.Thread(target=client, args=(wide if i % 2 else small, "wide" if i % 2 else "small"))
                       for i in range(6)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=120)
            smalls = [c for k, c in results if k == "small"]
            wides = [c for k, c in results if k == "wide"]
            check(smalls and set(smalls) == {"OK"}, f"{len(smalls)} concurrent small requests all OK: {set(smalls)}")
            check(wides and set(wides) == {"RESOURCE_EXHAUSTED"},
                  f"{len(wides)} concurrent beam-16 requests all RESOURCE_EXHAUSTED: {set(wides)}")

            responses = list(stub.TranslateStream(iter([small, wide, small]), timeout=60))
            codes = [r.status_code for r in responses]
            check(codes == [0, 8, 0], f"on a stream the refused message fails alone: status codes {codes}")

            refused = 2 + len(wides) + 1
            counted = rel.metric(server.metrics(), 'nmt_requests_total{code="RESOURCE_EXHAUSTED",model="m30k"}')
            check(counted == refused, f"nmt_requests_total{{code=RESOURCE_EXHAUSTED}} = {counted} (expected {refused})")
            health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
            check(health.status == health_pb2.HealthCheckResponse.SERVING, "still SERVING")
    except Exception as e:
        check(False, f"unexpected {type(e).__name__}: {e}")
    finally:
        rel.finish(check, server)


if __name__ == "__main__":
    main()
