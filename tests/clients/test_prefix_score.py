#!/usr/bin/python3
"""target_prefix and Score through the real nmt-server (docs/server.md): the Python client
(clients/python) over gRPC and HTTP /v1/translate and /v1/score with curl-like requests.
Hypotheses continue the prefix (text or ids) and score it 0; scoring the server's own best
translations gives their scores; bad values are refused INVALID_ARGUMENT naming the field.

    test_prefix_score.py REPO_ROOT NMT_SERVER PYTHON_CLIENT_DIR
"""
import json
import os
import sys
import urllib.error
import urllib.request

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server", "support"))
import harness  # noqa: E402

check = harness.Checks()
SOURCES = ["A dog runs across the yard.", "Two men are playing chess in the park.",
           "A woman in a red dress is singing."]


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def refused(call, field, what):
    try:
        call()
        check(False, f"{what}: refused")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and field in e.details(),
              f"{what}: INVALID_ARGUMENT naming {field} ({e.code()}: {e.details()})")


def main():
    repo, binary, staged = os.path.abspath(sys.argv[1]), sys.argv[2], sys.argv[3]
    tmp = harness.temp_dir("nmt-prefix-score-")
    harness.generate_stubs(repo, tmp)
    import health_pb2
    import health_pb2_grpc
    sys.path.insert(0, staged)  # the package with its stubs (tests/clients/CMakeLists.txt)
    import nmt_client
    from nmt_client._proto import translation_pb2 as pb

    config = os.path.join(tmp, "config.yaml")
    harness.write_config(config, os.path.join(repo, "models/m30k-en-de-small"),
                         limits={"max_input_tokens": 48, "max_beam_size": 8, "max_decoding_length": 64})
    http_port = harness.free_port()
    server = harness.Server(binary, config, ["--http-host", "127.0.0.1", "--http-port", str(http_port)])
    try:
        server.wait_serving(health_pb2, health_pb2_grpc)
        with nmt_client.Client(server.target, timeout=120) as client:
            run(client, pb, http_port)
    except Exception as e:  # noqa: BLE001 - a crash of the test is a failure with its reason
        check(False, f"unexpected {type(e).__name__}: {e}")
    finally:
        harness.stop_and_report(check, server)
    check.exit()


def run(client, pb, http_port):
    # target_prefix as text: every hypothesis starts with it, its tokens scored 0.
    nbest = client.translate_nbest(SOURCES, 2, target_prefix="Zwei Frauen", split_sentences=False)
    check(all(h.text.startswith("Zwei Frauen") for hs in nbest for h in hs),
          f"target_prefix: every hypothesis continues it: {[h.text for h in nbest[0]]}")
    first = nbest[0][0]
    check(len(first.token_scores) == len(first.token_ids) and first.token_scores[0] == 0.0,
          f"token_scores: one per id, the prefix's 0: {first.token_scores[:3]}")
    ids = list(first.token_ids[:2])
    by_ids = client.translate_nbest(SOURCES[:1], 2, target_prefix_ids=ids, split_sentences=False)
    check(list(by_ids[0][0].token_ids[:2]) == ids, "target_prefix_ids: the hypotheses start with the ids")
    refused(lambda: client.translate(SOURCES[0], target_prefix="Ein", target_prefix_ids=[5]), "target_prefix",
            "target_prefix and target_prefix_ids together")
    refused(lambda: client.translate("A dog runs. A cat sleeps.", target_prefix="Ein"), "target_prefix",
            "a text of two sentences with target_prefix")
    refused(lambda: client.translate(SOURCES[0], target_prefix_ids=list(range(5, 70))), "target_prefix",
            "a prefix longer than max_decoding_length")

    # Score: the server's own best translations score as they were scored.
    best = client.translate_nbest(SOURCES, 1, split_sentences=False)
    scored = client.score(SOURCES, [hs[0].text for hs in best])
    check(len(scored) == len(SOURCES), "Score: one result per pair")
    for hs, s in zip(best, scored):
        h = hs[0]
        check(abs(s.score - h.score) <= 1e-4 * max(1, abs(h.score)) and s.token_ids == h.token_ids,
              f"Score of the own translation {h.text!r}: {s.score} vs {h.score}")
        check(len(s.token_scores) == len(s.token_ids) and abs(sum(s.token_scores) / len(s.token_ids) - s.score) < 1e-4,
              "Score: token_scores per id (EOS included), their mean the score")
    other = client.score(SOURCES[:1], ["Zwei Katzen schlafen."])[0]
    check(other.score < scored[0].score, f"Score: an unrelated target scores lower ({other.score} < {scored[0].score})")
    refused(lambda: client.score(SOURCES, SOURCES[:1]), "targets", "Score with fewer targets than sources")
    refused(lambda: client.score(SOURCES[:1], [" "]), "targets[0]", "Score of an empty target")
    refused(lambda: client._call(client._stub.Score, pb.ScoreRequest(sources=SOURCES[:1], targets=["Ein Hund."],
                                                                    options=pb.TranslateOptions(beam_size=4)), 60),
            "beam_size", "Score with a beam size")

    # HTTP: /v1/score and target_prefix on /v1/translate, the proto's JSON mapping.
    status, body = post(http_port, "/v1/score", {"sources": SOURCES[:1], "targets": [best[0][0].text]})
    check(status == 200 and abs(body["results"][0]["score"] - best[0][0].score) < 1e-4,
          f"HTTP /v1/score: {status} {body}")
    status, body = post(http_port, "/v1/translate", {"texts": SOURCES[:1], "options": {"targetPrefix": "Zwei Frauen"}})
    check(status == 200 and body["translations"][0]["hypotheses"][0]["text"].startswith("Zwei Frauen"),
          f"HTTP /v1/translate with targetPrefix: {status} {body}")
    status, body = post(http_port, "/v1/score", {"sources": SOURCES, "targets": []})
    check(status == 400 and "targets" in body["error"], f"HTTP /v1/score refuses missing targets: {status} {body}")


if __name__ == "__main__":
    main()
