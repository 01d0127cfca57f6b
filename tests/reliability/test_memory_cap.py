#!/usr/bin/python3
"""Out of device memory during a batch: with --device-memory-limit-mb (the CPU engine's cap on
a batch's working memory; the CUDA engine's allocator cap on a GPU), a batch over the cap fails
its requests with RESOURCE_EXHAUSTED, and the server keeps serving everything that fits,
concurrently and on streams, and counts each refusal.

    test_memory_cap.py REPO_ROOT NMT_SERVER
"""
import os
import sys
import threading
import time

import rel

check = rel.Checks()


def main():
    repo, binary = os.path.abspath(sys.argv[1]), sys.argv[2]
    tmp, pb, pb_grpc, health_pb2, health_pb2_grpc = rel.setup(repo, "nmt-memcap-")
    config = os.path.join(tmp, "config.yaml")
    rel.write_config(config, os.path.join(repo, "models/m30k-en-de-small"))
    # 64 MiB: one sentence at beam 4 needs ~15 MiB (caches sized for 255 tokens), eight need ~120.
    server = rel.json_server(binary, config, ["--device-memory-limit-mb", "64"])
    small = pb.TranslateRequest(texts=[b"A man is riding a bike."], options=pb.TranslateOptions(beam_size=1))
    big = pb.TranslateRequest(texts=[s.encode() for s in rel.SENTENCES], options=pb.TranslateOptions(beam_size=4))
    try:
        server.wait_serving(health_pb2, health_pb2_grpc)
        with rel.grpc.insecure_channel(server.target) as channel:
            stub = pb_grpc.TranslationServiceStub(channel)
            code, _, _, r = rel.call(stub.Translate, small, timeout=30)
            check(code == "OK" and r.translations[0].hypotheses[0].text, f"a batch that fits: {code}")
            code, seconds, details, _ = rel.call(stub.Translate, big, timeout=30)
            check(code == "RESOURCE_EXHAUSTED" and "out of memory" in details,
                  f"a batch over the cap: {code} in {seconds * 1e3:.0f} ms: {details}")
            code, _, _, _ = rel.call(stub.Translate, small, timeout=30)
            check(code == "OK", f"the server serves after the refusal: {code}")

            # Concurrent: refusals never take down the batches that fit (different options
            # never share a batch).
            results, lock = [], threading.Lock()
            stop = time.monotonic() + 5

            def client(request, kind):
                while time.monotonic() < stop:
                    r = rel.call(stub.Translate, request, timeout=60)
                    with lock:
                        results.append((kind, r[0]))

            threads = [threading.Thread(target=client, args=(big if i % 2 else small, "big" if i % 2 else "small"))
                       for i in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=120)
            smalls = [c for k, c in results if k == "small"]
            bigs = [c for k, c in results if k == "big"]
            check(smalls and set(smalls) == {"OK"}, f"{len(smalls)} concurrent small requests all OK: {set(smalls)}")
            check(bigs and set(bigs) == {"RESOURCE_EXHAUSTED"},
                  f"{len(bigs)} concurrent big requests all RESOURCE_EXHAUSTED: {set(bigs)}")

            responses = list(stub.TranslateStream(iter([small, big, small]), timeout=60))
            codes = [r.status_code for r in responses]
            check(codes == [0, 8, 0], f"on a stream the big message fails alone: status codes {codes}")

            refused = 1 + len(bigs) + 1
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
