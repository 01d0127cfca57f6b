#!/usr/bin/python3
"""API keys' quotas and the translation cache with the real server (issue 56; docs/server.md,
"Fairness, quotas and the cache").

Quotas (server.auth_token_file's fields): a key of 3 requests a minute gets 3, then
RESOURCE_EXHAUSTED naming requests_per_minute with a "retry after N s"; a key of 60
characters a minute is refused a request that would pass its allowance (naming
characters_per_minute), while another key is not touched; over HTTP the same refusal is 429
with Retry-After. SIGHUP re-reads the file: a raised limit lets the key through again. The
per-key metrics carry the keys' names, never a token.

Cache (on by default): the same request twice gives the same hypotheses, scores (bit for bit:
the float32 values compared exactly) and token ids, the second a hit; a paragraph
(split_sentences) that repeats one sentence and adds one decodes only the new one.

    test_keys_and_cache.py REPO_ROOT NMT_SERVER
"""
import json
import os
import signal
import sys
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))

import grpc  # noqa: E402

import harness  # noqa: E402

check = harness.Checks()

KEYS = ("few-requests-0123 name=few requests_per_minute=3\n"
        "few-chars-4567 name=chars characters_per_minute=60\n"
        "free-key-89ab name=free\n")


def series(text, name, **labels):
    """The value of a series of `name` whose labels include `labels` (any order), or 0."""
    for line in text.splitlines():
        if not (line.startswith(name + "{") or line.startswith(name + " ")):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.split()[-1])
    return 0.0


def main():
    repo, binary = os.path.abspath(sys.argv[1]), sys.argv[2]
    tmp = harness.temp_dir("nmt-keys-cache-")
    harness.generate_stubs(repo, tmp)
    import health_pb2
    import health_pb2_grpc
    from nmt.v1 import translation_pb2 as pb
    from nmt.v1 import translation_pb2_grpc as pb_grpc

    tokens = os.path.join(tmp, "tokens.txt")
    with open(tokens, "w") as f:
        f.write(KEYS)
    config = os.path.join(tmp, "config.yaml")
    harness.write_config(config, os.path.join(repo, "models/m30k-en-de-small"), server={"auth_token_file": tokens, "translation_cache_mb": 64})
    http_port = harness.free_port()
    server = harness.Server(binary, config, ["--http-host", "127.0.0.1", "--http-port", str(http_port)])
    try:
        server.wait_serving(health_pb2, health_pb2_grpc)
        with grpc.insecure_channel(server.target) as channel:
            stub = pb_grpc.TranslationServiceStub(channel)

            def translate(token, texts, **options):
                try:
                    r = stub.Translate(pb.TranslateRequest(texts=texts, options=pb.TranslateOptions(**options)),
                                       metadata=[("authorization", "Bearer " + token)], timeout=60)
                    return "OK", r
                except grpc.RpcError as e:
                    return e.code().name, e.details()

            # The cache: a repeat is the same answer, bit for bit, and a hit.
            before = server.metrics()
            nbest = dict(beam_size=4, num_hypotheses=3, return_scores=True, return_token_ids=True)
            code1, first = translate("free-key-89ab", ["A man is riding a bike."], **nbest)
            mid = server.metrics()
            code2, second = translate("free-key-89ab", ["A man is riding a bike."], **nbest)
            after = server.metrics()
            check(code1 == "OK" and code2 == "OK", f"two identical requests: {code1}, {code2}")
            hyps = lambda r: [(h.text, h.score, list(h.token_ids)) for h in r.translations[0].hypotheses]  # noqa: E731
            check(len(hyps(first)) == 3 and hyps(first) == hyps(second),
                  f"the repeat has the same 3 hypotheses, scores and ids: {hyps(second)}")
            check(series(mid, "nmt_cache_misses_total") - series(before, "nmt_cache_misses_total") == 1
                  and series(after, "nmt_cache_hits_total") - series(mid, "nmt_cache_hits_total") == 1,
                  "the first a miss, the repeat a hit")
            code, para = translate("free-key-89ab", ["A man is riding a bike. Two dogs play in the snow."],
                                   split_sentences=True, **nbest)
            later = server.metrics()
            check(code == "OK" and len(para.translations[0].sentences) == 2, f"a paragraph of two sentences: {code}")
            check(series(later, "nmt_cache_hits_total") - series(after, "nmt_cache_hits_total") == 1
                  and series(later, "nmt_cache_misses_total") - series(after, "nmt_cache_misses_total") == 1,
                  "the paragraph's known sentence is a hit, only the new one decodes")
            check(code == "OK" and [(h.text, h.score, list(h.token_ids)) for h in para.translations[0].sentences[0].hypotheses]
                  == hyps(first), "the paragraph's known sentence: the same hypotheses and scores")

            # Requests per minute.
            codes = [translate("few-requests-0123", [f"A dog runs {i} times."])[0] for i in range(3)]
            check(codes == ["OK"] * 3, f"3 requests of a 3-a-minute key: {codes}")
            try:
                stub.Translate(pb.TranslateRequest(texts=["A dog runs."]),
                               metadata=[("authorization", "Bearer few-requests-0123")], timeout=60)
                code, details, retry = "OK", "", None
            except grpc.RpcError as e:
                code, details = e.code().name, e.details()
                retry = dict(e.trailing_metadata() or ()).get("retry-after")
            check(code == "RESOURCE_EXHAUSTED" and "requests_per_minute" in details and "retry after" in details
                  and retry is not None and int(retry) >= 1,
                  f"the 4th: {code} {details} (trailing retry-after: {retry})")
            code, _ = translate("free-key-89ab", ["A dog runs."])
            check(code == "OK", f"another key meanwhile: {code}")
            # Characters per minute: 24 + 24 pass, 24 more would be 72 > 60.
            c1 = translate("few-chars-4567", ["Two dogs play in a yard."])[0]
            c2 = translate("few-chars-4567", ["Two cats play in a yard."])[0]
            code, details = translate("few-chars-4567", ["Two kids play in a yard."])
            check([c1, c2] == ["OK", "OK"] and code == "RESOURCE_EXHAUSTED" and "characters_per_minute" in details,
                  f"a 60-characters-a-minute key: {c1}, {c2}, then {code} {details}")
            # HTTP: 429 with Retry-After.
            body = json.dumps({"q": "A dog runs.", "source": "en", "target": "de", "api_key": "few-requests-0123"})
            req = urllib.request.Request(f"http://127.0.0.1:{http_port}/translate", data=body.encode(),
                                         headers={"Content-Type": "application/json"}, method="POST")
            status, retry = None, None
            try:
                with urllib.request.urlopen(req, timeout=30) as r:
                    status = r.status
            except urllib.error.HTTPError as e:
                status, retry = e.code, e.headers.get("Retry-After")
            check(status == 429 and retry is not None and int(retry) >= 1,
                  f"LibreTranslate /translate over the quota: HTTP {status}, Retry-After {retry}")

            # SIGHUP: the raised limit applies.
            with open(tokens, "w") as f:
                f.write(KEYS.replace("requests_per_minute=3", "requests_per_minute=6000"))
            server.proc.send_signal(signal.SIGHUP)
            end, code = time.monotonic() + 20, None
            while time.monotonic() < end:
                code, _ = translate("few-requests-0123", ["A dog runs again."])
                if code == "OK":
                    break
                time.sleep(0.2)
            check(code == "OK", f"after SIGHUP raised its limit, the key passes: {code}")

            text = server.metrics()
            check(series(text, "nmt_key_requests_total", key="few") >= 4, "nmt_key_requests_total{key=few}")
            check(series(text, "nmt_quota_refusals_total", key="few", quota="requests_per_minute") >= 2,
                  "nmt_quota_refusals_total{key=few,quota=requests_per_minute} (gRPC and HTTP)")
            check(series(text, "nmt_quota_refusals_total", key="chars", quota="characters_per_minute") == 1,
                  "nmt_quota_refusals_total{key=chars,quota=characters_per_minute}")
            check(series(text, "nmt_key_characters_total", key="chars") == 48, "nmt_key_characters_total{key=chars} = 48")
            # The whole tokens: their digit tails alone also turn up inside metric values (a
            # latency sum of 0.0123... failed this check once under ASan).
            leaked = [t for t in ("few-requests-0123", "few-chars-4567", "free-key-89ab") if t in text]
            check(not leaked, f"no token in /metrics: {leaked}")
    finally:
        pass
    harness.stop_and_report(check, server)
    check.exit()


if __name__ == "__main__":
    main()
