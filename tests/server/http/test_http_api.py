#!/usr/bin/python3
"""The HTTP/JSON API (http.port) of the real nmt-server, spoken by real HTTP clients (curl
and urllib): POST /v1/translate (JSON TranslateRequest), LibreTranslate's POST /translate
(JSON, url-encoded and multipart bodies; q a string or a list; alternatives) and GET
/languages, with LibreTranslate's response shapes, each error status with its JSON body,
API keys as bearer tokens, the request size and concurrent-call limits, and the metrics.

    test_http_api.py REPO_ROOT NMT_SERVER
"""
import json
import os
import queue
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import harness  # noqa: E402

check = harness.Checks()
TOKEN = "lt-key-1"
A = "A man in a blue shirt and black jeans is riding an old red bike down the busy street."
B = "Two black dogs with white spots are playing with a yellow ball in the deep snow!"


def http(port, method, path, body=None, headers=None):
    """(status, parsed JSON body or None, headers) of one request; body bytes or a dict (JSON)."""
    headers = dict(headers or {})
    if isinstance(body, dict):
        body = json.dumps(body).encode()
        headers.setdefault("Content-Type", "application/json")
    status, raw, h = harness.http_request(port, method, path, body, headers, timeout=60)
    try:
        return status, json.loads(raw) if raw else None, h
    except ValueError:
        return status, {"unparsed": raw[:200]}, h


def curl(port, path, *args):
    r = subprocess.run(["curl", "-s", "-w", "\n%{http_code}", *args, f"http://127.0.0.1:{port}{path}"],
                       capture_output=True, text=True, timeout=60)
    body, _, code = r.stdout.rpartition("\n")
    return int(code or 0), json.loads(body) if body else None


def expect(got, status, body, what):
    check(got[0] == status and got[1] == body, f"{what}: {status} {body} (got {got[0]} {got[1]})")


def main():
    repo, binary = os.path.abspath(sys.argv[1]), sys.argv[2]
    server, port, _, config = harness.http_server(
        repo, binary, "nmt-http-", TOKEN, limits={"max_input_tokens": 48},
        server={"max_concurrent_calls": 1, "max_message_bytes": 8192})
    from nmt.v1 import translation_pb2 as pb
    from nmt.v1 import translation_pb2_grpc as pb_grpc

    try:
        with grpc.insecure_channel(server.target) as channel:
            stub = pb_grpc.TranslationServiceStub(channel)
            auth = (("authorization", f"Bearer {TOKEN}"),)

            def grpc_best(text, **options):
                r = stub.Translate(pb.TranslateRequest(texts=[text], options=pb.TranslateOptions(**options)),
                                   timeout=60, metadata=auth)
                return r.translations[0].hypotheses[0].text
            a, b = grpc_best(A), grpc_best(B)
            ok_before = harness.metric(server.metrics(), 'nmt_requests_total{code="OK",model="m30k"}')
            translations = libretranslate_checks(port, a, b)
            translations += v1_checks(port, a)
            limit_checks(server, port)
            text = server.metrics()
            ok_after = harness.metric(text, 'nmt_requests_total{code="OK",model="m30k"}')
            check(ok_after - ok_before == translations,
                  f"nmt_requests_total{{code=OK}} counts the HTTP translations ({ok_after - ok_before} of {translations})")
            served = harness.metric(text, 'nmt_http_requests_total{endpoint="/translate",status="200"}')
            check(served is not None and served >= 1, f"nmt_http_requests_total{{endpoint=/translate,status=200}} = {served}")
            check(harness.metric(text, 'nmt_http_requests_total{endpoint="/translate",status="403"}') == 1,
                  "nmt_http_requests_total counts the 403")
        taken = subprocess.run([binary, "--config", config, "--device", "cpu", "--host", "127.0.0.1",
                                "--port", str(harness.free_port()), "--metrics-port", str(harness.free_port()),
                                "--http-host", "127.0.0.1", "--http-port", str(port)],
                               capture_output=True, text=True, timeout=120)
        check(taken.returncode == 1 and "cannot serve the HTTP API" in taken.stdout + taken.stderr,
              f"http.port already taken: exit {taken.returncode} with 'cannot serve the HTTP API'")
    except Exception as e:  # a crash of the test is a failure with its reason
        check(False, f"unexpected {type(e).__name__}: {e}")
    finally:
        rc = server.stop()
        check(rc == 0, f"exit code 0 on SIGTERM (got {rc})")
        log = server.output()
        check('"http":"127.0.0.1:%d"' % port in log or f"http=127.0.0.1:{port}" in log,
              "the serving log line names the HTTP address")
        check("HTTP /translate" in log and "HTTP /v1/translate" in log, "HTTP requests are logged with their endpoint")
        if check.failures:
            print(log[-4000:])
    check.exit()


def libretranslate_checks(port, a, b):
    """LibreTranslate's shapes and errors; returns the number of translations made."""
    expect(http(port, "GET", "/languages"), 200,
           [{"code": "de", "name": "German", "targets": []}, {"code": "en", "name": "English", "targets": ["de"]}],
           "GET /languages lists the model's pair")
    base = {"source": "en", "target": "de", "api_key": TOKEN}
    expect(http(port, "POST", "/translate", {"q": A, **base}), 200, {"translatedText": a},
           "JSON body, q a string: {translatedText: string}, the gRPC translation")
    expect(http(port, "POST", "/translate", {"q": [A, B], **base, "format": "text"}), 200,
           {"translatedText": [a, b]}, "JSON body, q a list: {translatedText: list}")
    form = urllib.parse.urlencode({"q": B, **base}).encode()
    expect(http(port, "POST", "/translate", form, {"Content-Type": "application/x-www-form-urlencoded"}),
           200, {"translatedText": b}, "url-encoded form body")
    expect(curl(port, "/translate", "-F", f"q={A}", "-F", "source=en", "-F", "target=de", "-F", f"api_key={TOKEN}"),
           200, {"translatedText": a}, "curl, multipart form body")
    expect(curl(port, "/translate", "-H", f"Authorization: Bearer {TOKEN}", "-H", "Content-Type: application/json",
                "-d", json.dumps({"q": B, "source": "en", "target": "de"})),
           200, {"translatedText": b}, "curl, JSON body, the key as an Authorization header")
    status, body, _ = http(port, "POST", "/translate", {"q": A, **base, "alternatives": 2})
    alts = (body or {}).get("alternatives")
    check(status == 200 and body.get("translatedText") == a and isinstance(alts, list)
          and 1 <= len(alts) <= 2 and a not in alts and all(isinstance(x, str) and x for x in alts),
          f"alternatives=2: translatedText and up to 2 other translations ({alts})")
    # A paragraph over max_input_tokens: translated sentence by sentence.
    expect(http(port, "POST", "/translate", {"q": A + " " + B, **base}), 200, {"translatedText": a + " " + b},
           "a paragraph over max_input_tokens: its sentences translated and joined")
    status, _, headers = http(port, "OPTIONS", "/translate")
    check(status == 204 and headers.get("Access-Control-Allow-Origin") == "*", "CORS preflight: 204, origin *")
    # The npm `libretranslate` client's GET /languages carries a Content-Type: a preflight.
    status, _, headers = http(port, "OPTIONS", "/languages")
    check(status == 204 and headers.get("Access-Control-Allow-Origin") == "*", "CORS preflight of /languages: 204")
    # The web page (server/web/; tests/browser runs it) needs no API key: its requests do.
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=60) as r:
        page, page_headers = r.read().decode(), r.headers
    check(page_headers.get("Content-Type") == "text/html; charset=utf-8" and "<title>nmt-serve" in page
          and "default-src 'none'" in page_headers.get("Content-Security-Policy", ""),
          "GET /: the web page, as HTML under its Content-Security-Policy")

    missing = "Invalid request: missing {} parameter"
    expect(http(port, "POST", "/translate", {"source": "en", "target": "de", "api_key": TOKEN}), 400,
           {"error": missing.format("q")}, "no q")
    expect(http(port, "POST", "/translate", {"q": A, "target": "de", "api_key": TOKEN}), 400,
           {"error": missing.format("source")}, "no source")
    expect(http(port, "POST", "/translate", {"q": A, "source": "en", "api_key": TOKEN}), 400,
           {"error": missing.format("target")}, "no target")
    # format html: the markup kept around the translation (server/markup); the block's text
    # is the plain translation of the paragraph's text.
    expect(http(port, "POST", "/translate", {"q": "<p>" + A + "</p>", **base, "format": "html"}), 200,
           {"translatedText": "<p>" + a + "</p>"}, "format html: the paragraph's translation in its <p>")
    expect(http(port, "POST", "/translate", {"q": "<p>Hi</p>", **base, "format": "xml"}), 400,
           {"error": "xml format is not supported"}, "format xml")
    expect(http(port, "POST", "/translate", {"q": "<p>Hi</p>", **base, "format": "html", "alternatives": 2}), 400,
           {"error": "alternatives are not available with format html: send alternatives=0"},
           "format html with alternatives")
    expect(http(port, "POST", "/translate", {"q": A, **base, "source": "auto"}), 200,
           {"translatedText": a, "detectedLanguage": {"confidence": 100.0, "language": "en"}},
           "source auto: the one source language that reaches de, without detection")
    expect(http(port, "POST", "/translate", {"q": A, **base, "target": "fr"}), 400,
           {"error": "fr is not supported"}, "an unknown language")
    expect(http(port, "POST", "/translate", {"q": A, **base, "source": "de", "target": "en"}), 400,
           {"error": "de is not supported"}, "a target-only language as the source")
    expect(http(port, "POST", "/translate", b"{not json", {"Content-Type": "application/json"}), 400,
           {"error": "Invalid JSON format"}, "a body that is not JSON")
    expect(http(port, "POST", "/translate", {"q": A, **base, "alternatives": "many"}), 400,
           {"error": "Invalid request: alternatives parameter is not a number"}, "alternatives not a number")
    status, body, _ = http(port, "POST", "/translate", {"q": [A, "  "], **base})
    check(status == 400 and body == {"error": "texts[1] is empty (or only whitespace)"},
          f"an empty text: 400 naming it ({status} {body})")
    long_sentence = "Dog " + "dog " * 60 + "runs."
    status, body, _ = http(port, "POST", "/translate", {"q": A + " " + long_sentence, **base})
    check(status == 400 and body.get("error", "").startswith('texts[0] sentence 1 ("Dog dog dog')
          and "never truncated" in body["error"], f"a sentence over max_input_tokens: 400 naming it ({body})")
    expect(http(port, "POST", "/translate", {"q": A, "source": "en", "target": "de"}), 400,
           {"error": "Please contact the server operator to get an API key (api_key)"}, "no API key")
    expect(http(port, "POST", "/translate", {"q": A, "source": "en", "target": "de", "api_key": "nope"}), 403,
           {"error": "Invalid API key"}, "a wrong API key")
    expect(http(port, "POST", "/translate", {"target": "de"}), 400,
           {"error": "Please contact the server operator to get an API key (api_key)"},
           "no API key and no q: the key is checked first, as LibreTranslate does")
    return 9  # successful translations above (alternatives, the paragraph, html and auto included)


def v1_checks(port, a):
    """POST /v1/translate: the JSON mirror of TranslateRequest; returns the translations made."""
    auth = {"Authorization": f"Bearer {TOKEN}"}
    status, body, headers = http(port, "POST", "/v1/translate",
                                 {"texts": [A], "options": {"beam_size": 4, "return_scores": True},
                                  "request_id": "http-1"}, auth)
    check(status == 200 and body["translations"][0]["hypotheses"][0]["text"] == a
          and body["requestId"] == "http-1" and headers.get("X-Request-Id") == "http-1"
          and body["model"] == "m30k" and body["translations"][0]["hypotheses"][0]["score"] < 0,
          f"/v1/translate: the JSON TranslateResponse ({status}, {str(body)[:160]})")
    status, body, _ = http(port, "POST", "/v1/translate", {"texts": [A + " " + B], "options": {"splitSentences": True}}, auth)
    check(status == 200 and len(body["translations"][0]["sentences"]) == 2,
          "/v1/translate with splitSentences: per-sentence results")

    def refused(req, headers, status, code, message, what):
        got = http(port, "POST", "/v1/translate", req, headers)
        check(got[0] == status and got[1] == {"error": message, "code": code},
              f"/v1/translate {what}: {status} {code} (got {got[0]} {got[1]})")
    refused({"texts": [A]}, {}, 401, "UNAUTHENTICATED",
            "missing or wrong bearer token (header 'Authorization: Bearer TOKEN')", "without a token")
    refused({"texts": []}, auth, 400, "INVALID_ARGUMENT", "texts is empty: send at least one sentence", "no texts")
    refused({"texts": [A], "options": {"beam_size": 0}}, auth, 400, "INVALID_ARGUMENT",
            "options.beam_size must be between 1 and 16 (limits.max_beam_size), got 0", "beam 0")
    refused({"texts": [A], "model": "de-en"}, auth, 404, "NOT_FOUND",
            "model 'de-en' is not served here (models: m30k)", "an unknown model")
    # Sampling through the JSON mapping: a seed (number or decimal string) reproduces; a bad
    # value is refused naming it.
    sampled = [http(port, "POST", "/v1/translate", {"texts": [A], "options": {
        "sampling_topk": 0, "sampling_temperature": 1.5, "seed": seed}}, auth) for seed in (7, "7")]
    check(all(r[0] == 200 for r in sampled)
          and sampled[0][1]["translations"] == sampled[1][1]["translations"],
          f"/v1/translate with sampling and a seed reproduces ({[r[0] for r in sampled]})")
    refused({"texts": [A], "options": {"sampling_topk": 5, "sampling_topp": 0}}, auth, 400, "INVALID_ARGUMENT",
            "options.sampling_topp must be in (0, 1], got 0", "sampling_topp 0")
    got = http(port, "POST", "/v1/translate", {"texts": [A], "colour": "blue"}, auth)
    check(got[0] == 400 and got[1]["code"] == "INVALID_ARGUMENT"
          and got[1]["error"].startswith("the body is not a JSON nmt.v1.TranslateRequest"),
          f"/v1/translate, an unknown field: 400 ({got[1]})")
    return 4  # the OK requests: two above, two sampled


def limit_checks(server, port):
    """Body size and server.max_concurrent_calls (1 here, taken by an open gRPC stream)."""
    big = {"q": "a " * 6000, "source": "en", "target": "de", "api_key": TOKEN}
    expect(http(port, "POST", "/translate", big), 413,
           {"error": "the request body is over 8192 bytes (server.max_message_bytes)"}, "a body over the limit")
    expect(http(port, "GET", "/nothing"), 404,
           {"error": "no such endpoint: GET /nothing (GET / the web page, POST /v1/translate, POST /v1/score, POST /translate, POST /detect, "
                     "GET /languages, POST /translate_file, GET /download_file/NAME)"},
           "an unknown path")
    channel = grpc.insecure_channel(server.target)
    pending = queue.Queue()
    stream = channel.stream_stream("/nmt.v1.TranslationService/TranslateStream", request_serializer=None,
                                   response_deserializer=None)(iter(pending.get, None), timeout=60,
                                                               metadata=(("authorization", f"Bearer {TOKEN}"),))
    end = time.monotonic() + 10
    while time.monotonic() < end and harness.metric(server.metrics(), "nmt_inflight_requests") != 1:
        time.sleep(0.02)
    try:
        busy = "server busy: 1 calls in flight (server.max_concurrent_calls)"
        expect(http(port, "POST", "/translate", {"q": A, "source": "en", "target": "de", "api_key": TOKEN}), 429,
               {"error": "Slowdown: " + busy}, "/translate while every call place is taken")
        expect(http(port, "POST", "/v1/translate", {"texts": [A]}, {"Authorization": f"Bearer {TOKEN}"}), 429,
               {"error": busy, "code": "RESOURCE_EXHAUSTED"}, "/v1/translate while every call place is taken")
    finally:
        pending.put(None)
        for _ in stream:
            pass
        channel.close()


if __name__ == "__main__":
    main()
