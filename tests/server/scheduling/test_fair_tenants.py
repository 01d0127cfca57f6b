#!/usr/bin/python3
"""Fair queueing across tenants with the real server (issue 56; docs/server.md, "Fairness,
quotas and the cache"). Two API keys: `hog` opens 200 TranslateStream calls, each pushing 16
requests of 4 sentences without ever reading an answer; `good` sends unary Translate calls
one after another. Before the hog starts, the good tenant's latency is measured on the idle
server; then again while the hog's backlog decodes.

What the code guarantees, and so what is checked:
- the hog holds at most batching.tenant_queue_share of the queue: its excess is refused
  RESOURCE_EXHAUSTED naming the share, and the good tenant is never refused;
- a good sentence starts at the queue's virtual time (server/scheduling/fair_queue.h), so it
  waits behind at most one hog sentence, then for a free slot of the loop (a hog sentence
  finishing: its sentences decode at most 8 tokens, so within 8 steps), and decodes in a
  batch of at most max_active_sentences (4 here) sentences, the hog's of one cache row each
  (beam 1). Fairness orders the queue; it does not make a shared batch's step as cheap as a
  lone sentence's, so the hog's sentences are kept light: what is compared is the queueing.
  So the median contested latency is within 2x the idle median, plus an absolute floor for
  the two busy cores the hog's client shares with the server (FLOOR). First come, first
  served, a good call would wait behind the hog's ~1000 queued sentences (~2000 steps:
  seconds);
- the hog's backlog was still being decoded when the good calls ended (else nothing was
  contested): a hog answer is logged after the last good one.

    test_fair_tenants.py REPO_ROOT NMT_SERVER
"""
import os
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "reliability"))

import grpc  # noqa: E402

import harness  # noqa: E402
import rel  # noqa: E402  (its request_lines)

STREAMS, MESSAGES, SENTENCES = 200, 16, 4
GOOD_CALLS = 15
FLOOR = 0.1  # seconds
TEXTS = [
    "A little girl in a pink dress is reading a book on a bench in the park.",
    "Several people are standing outside a building waiting for the bus.",
    "A woman sings on a stage while a man plays the guitar behind her.",
    "Children are jumping into a swimming pool on a hot summer day.",
    "An old man with a white beard sells fruit at a market.",
]

check = harness.Checks()


def exhausted(metrics_text):
    total = 0.0
    for line in metrics_text.splitlines():
        if line.startswith("nmt_requests_total{") and 'code="RESOURCE_EXHAUSTED"' in line:
            total += float(line.split()[-1])
    return total


def main():
    repo, binary = os.path.abspath(sys.argv[1]), sys.argv[2]
    tmp = harness.temp_dir("nmt-fair-tenants-")
    harness.generate_stubs(repo, tmp)
    import health_pb2
    import health_pb2_grpc
    from nmt.v1 import translation_pb2 as pb
    from nmt.v1 import translation_pb2_grpc as pb_grpc

    tokens = os.path.join(tmp, "tokens.txt")
    with open(tokens, "w") as f:
        f.write("hog-token-0123 name=hog\ngood-token-4567 name=good\n")
    config = os.path.join(tmp, "config.yaml")
    harness.write_config(config, os.path.join(repo, "models/m30k-en-de-small"),
                         batching={"max_active_sentences": 4, "max_active_rows": 16},
                         server={"auth_token_file": tokens, "translation_cache_mb": 0})
    server = harness.Server(binary, config, ["--log-format", "json"])
    good_auth = [("authorization", "Bearer good-token-4567")]
    hog_auth = [("authorization", "Bearer hog-token-0123")]
    release = threading.Event()
    calls = []
    try:
        server.wait_serving(health_pb2, health_pb2_grpc)
        good_channel = grpc.insecure_channel(server.target)
        good = pb_grpc.TranslationServiceStub(good_channel)

        def timed_calls(prefix):
            times, codes = [], []
            for i in range(GOOD_CALLS):
                start = time.monotonic()
                try:
                    good.Translate(pb.TranslateRequest(texts=["A man is riding a bike."], request_id=f"{prefix}{i}"),
                                   metadata=good_auth, timeout=60)
                    codes.append("OK")
                except grpc.RpcError as e:
                    codes.append(e.code().name + " " + (e.details() or ""))
                times.append(time.monotonic() - start)
            return times, codes

        timed_calls("warm")
        idle, idle_codes = timed_calls("idle")
        check(all(c == "OK" for c in idle_codes), f"idle server: {GOOD_CALLS} good calls OK")

        hog_options = pb.TranslateOptions(beam_size=1, max_decoding_length=8)
        hog_channel = grpc.insecure_channel(server.target, options=[("grpc.http2.bdp_probe", 0)])
        hog = pb_grpc.TranslationServiceStub(hog_channel)

        def messages(stream):
            for m in range(MESSAGES):
                texts = [f"{TEXTS[(stream + m + k) % len(TEXTS)]} {stream} {m} {k}" for k in range(SENTENCES)]
                yield pb.TranslateRequest(texts=texts, request_id=f"hog-{stream}-{m}", options=hog_options)
            release.wait(120)  # the stream stays open, its answers unread

        for s in range(STREAMS):
            calls.append(hog.TranslateStream(messages(s), metadata=hog_auth, timeout=300))
        # The hog's share is full once the server refuses it.
        end = time.monotonic() + 60
        while time.monotonic() < end and exhausted(server.metrics()) == 0:
            time.sleep(0.05)
        check(exhausted(server.metrics()) > 0, "the hog's streams fill its share of the queue")
        # Then the burst of its refusals settles (every stream has sent its 16): what is left
        # is its backlog, decoding, and its unread answers.
        last, stable_since = exhausted(server.metrics()), time.monotonic()
        while time.monotonic() < end and time.monotonic() - stable_since < 1.0:
            time.sleep(0.1)
            now = exhausted(server.metrics())
            if now != last:
                last, stable_since = now, time.monotonic()

        contested, codes = timed_calls("good")
        check(all(c == "OK" for c in codes), f"under the hog: {GOOD_CALLS} good calls OK ({set(codes)})")
        idle_median, median = statistics.median(idle), statistics.median(contested)
        check(median <= 2 * idle_median + FLOOR,
              f"under the hog: median {median * 1e3:.1f} ms <= 2 x idle median {idle_median * 1e3:.1f} ms "
              f"+ {FLOOR * 1e3:.0f} ms (max {max(contested) * 1e3:.1f} ms)")

        # A hog answer logged after the last good one: its backlog outlasted the good calls.
        hog_after = []
        end = time.monotonic() + 10
        while not hog_after and time.monotonic() < end:
            lines = rel.request_lines(server)
            last_good = max(i for i, o in enumerate(lines) if o.get("request_id", "").startswith("good"))
            hog_after = [o for o in lines[last_good:]
                         if o.get("request_id", "").startswith("hog") and o.get("code") == "OK"]
            time.sleep(0.1)
        check(len(hog_after) > 0, "the hog's backlog still decoded after the last good call")
        refusals = [o for o in lines if o.get("code") == "RESOURCE_EXHAUSTED"]
        check(all(o.get("request_id", "").startswith("hog") for o in refusals),
              f"only the hog is refused ({len(refusals)} refusals)")
        check(any("tenant_queue_share" in o.get("error", "") for o in refusals), "the refusal names the share")
    finally:
        release.set()
        for c in calls:
            c.cancel()
    harness.stop_and_report(check, server)
    check.exit()


if __name__ == "__main__":
    main()
