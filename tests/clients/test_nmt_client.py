#!/usr/bin/python3
"""The Python client package (clients/python, nmt_client) against the real nmt-server: the
sync and asyncio clients, a grpcurl-style JSON request with plain strings, split_sentences
(a three-sentence paragraph equals its sentences translated one by one, joined), n-best,
deadlines, retries with backoff on RESOURCE_EXHAUSTED and UNAVAILABLE, TLS and bearer
tokens, and the stubs generated when the package is built (pip wheel).

    test_nmt_client.py REPO_ROOT NMT_SERVER PYTHON_BUILD_DIR calls|secured
        calls:   sync, async, JSON, split_sentences, n-best, deadline, RESOURCE_EXHAUSTED retries
        secured: TLS + tokens on a server that starts after the first call (UNAVAILABLE
                 retries), and the pip wheel
"""
import asyncio
import glob
import os
import queue
import subprocess
import sys
import threading
import time
import zipfile

import grpc
from google.protobuf import json_format

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server", "support"))
import harness  # noqa: E402

check = harness.Checks()
SENTENCES = ["A man in a blue shirt and black jeans is riding an old red bike down the busy street.",
             "Two black dogs with white spots are playing with a yellow ball in the deep snow!",
             "Is the little girl in the pink dress sitting on a wooden bench near the lake?"]


def main():
    repo, binary, build_dir, part = os.path.abspath(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    sys.path.insert(0, build_dir)
    import nmt_client
    from nmt_client._proto import translation_pb2 as pb

    tmp = harness.temp_dir("nmt-client-")
    stubs = os.path.join(tmp, "stubs")
    os.makedirs(stubs)
    harness.generate_stubs(repo, stubs)  # health, for the readiness wait
    import health_pb2
    import health_pb2_grpc

    model = os.path.join(repo, "models/m30k-en-de-small")
    if part == "secured":
        auth_and_unavailable_checks(nmt_client, binary, model, tmp, health_pb2, health_pb2_grpc)
        wheel_check(repo, tmp)
        check.exit()
    config = os.path.join(tmp, "config.yaml")
    harness.write_config(config, model, limits={"max_input_tokens": 48},
                         server={"max_concurrent_calls": 1})
    server = harness.Server(binary, config)
    try:
        server.wait_serving(health_pb2, health_pb2_grpc)
        sync_checks(nmt_client, pb, server)
        sampling_checks(nmt_client, pb, server)
        asyncio.run(async_checks(nmt_client, server))
        retry_checks(nmt_client, server)
    except Exception as e:  # a crash of the test is a failure with its reason
        check(False, f"unexpected {type(e).__name__}: {e}")
    finally:
        harness.stop_and_report(check, server)
    check.exit()


def sampling_checks(nmt_client, pb, server):
    """Sampling through the client and grpcurl-style JSON: a seed reproduces (and a seed
    equals its JSON form, a decimal string), n samples come back best first, top-k 1 is the
    greedy translation, a bad value is refused naming the field."""
    with nmt_client.Client(server.target) as client:
        text = SENTENCES[0]
        a = client.translate(text, sampling_topk=0, sampling_temperature=1.5, seed=7)
        b = client.translate(text, sampling_topk=0, sampling_temperature=1.5, seed=7)
        check(a == b and a, f"sampling: a seed reproduces ({a!r})")
        draws = {client.translate(text, sampling_topk=0, sampling_temperature=1.5, seed=s) for s in range(6)}
        check(len(draws) > 1, f"sampling: seeds draw different translations ({len(draws)} of 6)")
        greedy = client.translate(text, beam_size=1)
        check(client.translate(text, beam_size=1, sampling_topk=1, seed=3) == greedy,
              "sampling_topk 1 does not sample: with beam_size 1, greedy")
        samples = client.translate_nbest(text, num_hypotheses=4, sampling_topk=20, sampling_topp=0.9, seed=11)[0]
        check(len(samples) == 4 and all(samples[i].score >= samples[i + 1].score for i in range(3)),
              "sampling: num_hypotheses 4 independent samples, best first")
        request = json_format.Parse(
            '{"texts": ["%s"], "options": {"samplingTopk": 0, "samplingTemperature": 1.5, "seed": "7"}}' % text,
            pb.TranslateRequest())
        check(client.translate_response(request).translations[0].hypotheses[0].text == a,
              "sampling: the JSON request with its seed as a string draws the same")
        try:
            client.translate(text, sampling_topk=5, sampling_topp=1.5)
            check(False, "sampling_topp 1.5 is refused")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and "sampling_topp" in e.details(),
                  f"sampling_topp 1.5 is refused naming it: {e.details()[:60]}")
        try:
            client.translate(text, beam_sise=2)
            check(False, "an unknown option is refused")
        except TypeError as e:
            check("beam_sise" in str(e) and "beam_size" in str(e),
                  f"an unknown option is refused before sending, naming it and the known ones: {str(e)[:60]}")


def sync_checks(nmt_client, pb, server):
    with nmt_client.Client(server.target) as client:
        one = client.translate(SENTENCES[0])
        check(isinstance(one, str) and one, f"translate(str) -> str: {one!r}")
        each = [client.translate([s]) [0] for s in SENTENCES]
        many = client.translate(SENTENCES)
        check(many == each and many[0] == one, "translate(list) -> one best text per input, in order")
        check(client.translate(["A man is riding a bike."]) == ["Ein Mann fährt auf einem Fahrrad."],
              "the demo model's beam-4 translation (README)")

        # grpcurl-style JSON: plain strings, no base64.
        request = json_format.Parse('{"texts": ["%s"], "options": {"beamSize": 4}}' % SENTENCES[1],
                                    pb.TranslateRequest())
        response = client.translate_response(request)
        answer = json_format.MessageToDict(response)
        check(answer["translations"][0]["hypotheses"][0]["text"] == each[1],
              "a JSON request with plain strings answers as the typed call does")

        paragraph = " ".join(SENTENCES)
        joined = client.translate(paragraph, split_sentences=True)
        check(joined == " ".join(each),
              f"split_sentences: the paragraph equals its sentences one by one, joined ({joined!r})")
        # Whole texts by default (issue 55): the two sentences come back, the second not lost.
        two = client.translate(["Two dogs play in the snow.", "A man is riding a bike."], split_sentences=False)
        whole = client.translate("Two dogs play in the snow. A man is riding a bike.")
        check(whole == " ".join(two), f"a two-sentence text comes back whole by default ({whole!r}, {two!r})")
        try:
            client.translate(paragraph, split_sentences=False)
            check(False, "the same paragraph unsplit is refused (over max_input_tokens)")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and "max_input_tokens" in e.details(),
                  f"the same paragraph unsplit is refused: {e.details()[:70]}")

        nbest = client.translate_nbest(SENTENCES[:2], num_hypotheses=3)
        ok = [len(h) for h in nbest] == [3, 3] and nbest[0][0].text == each[0]
        ok = ok and all(h[i].score >= h[i + 1].score for h in nbest for i in range(2))
        check(ok and all(x.token_ids for h in nbest for x in h), "translate_nbest: 3 scored hypotheses, best first")
        check([m.name for m in client.list_models()] == ["m30k"], "list_models")
        # return_alignments: one Alignment per target token; the demo model's "Hund" from "dog".
        source = "A dog runs across the yard."
        text, aligned = client.translate_alignments(source)
        words = {text.encode()[a.target[0]:a.target[1]].decode(): source[a.source[0]:a.source[1]] for a in aligned}
        check(text == client.translate(source) and aligned and words.get("Hund") == "dog"
              and [a.target_token for a in aligned] == list(range(len(aligned))),
              f"translate_alignments: {text!r}, {words}")

        # Repetition controls (README: the same outputs as nmt-translate on the demo model).
        dog = "A dog runs across the yard and the dog barks at the other dog."
        got = client.translate(dog, split_sentences=False, no_repeat_ngram_size=1)
        check(got == "Ein Hund rennt über den Hof und der Hunde bellt dabei zu, wie ein anderer Mann zusieht.",
              f"no_repeat_ngram_size=1: no token twice: {got!r}")
        got = client.translate("A dog runs across the yard.", suppress_sequences=["Hund"])
        check(got == "Ein Hunde rennt über den Hof.", f"suppress_sequences=['Hund']: {got!r}")
        try:
            client.translate("A dog runs.", repetition_penalty=0.0)
            check(False, "repetition_penalty 0 is refused")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and "repetition_penalty" in e.details(),
                  f"repetition_penalty 0 is refused naming the field: {e.details()[:70]}")

        heavy = [f"A man number {i} walks his dog in the park near the river." for i in range(32)]
        try:
            client.translate(heavy, beam_size=8, timeout=0.05)
            check(False, "a 50 ms deadline is exceeded")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.DEADLINE_EXCEEDED, f"a 50 ms deadline: {e.code().name}")
        check(client.retries == 0, "no retries on answered or non-transient errors")
    global EACH
    EACH = each


async def async_checks(nmt_client, server):
    patient = nmt_client.RetryPolicy(max_attempts=50, initial_backoff=0.05, max_backoff=0.5)
    async with nmt_client.AsyncClient(server.target, retry=patient) as client:
        got = await client.translate(SENTENCES)
        check(got == EACH, "AsyncClient.translate equals the sync client")
        # max_concurrent_calls is 1: concurrent calls are refused RESOURCE_EXHAUSTED and retried.
        many = await asyncio.gather(*[client.translate(s) for s in SENTENCES])
        check(list(many) == EACH, f"3 concurrent async calls answered (retries: {client.retries})")
        nbest = await client.translate_nbest(SENTENCES[0], num_hypotheses=2)
        check(len(nbest) == 1 and len(nbest[0]) == 2 and nbest[0][0].text == EACH[0], "async translate_nbest")
        joined = await client.translate(" ".join(SENTENCES), split_sentences=True)
        check(joined == " ".join(EACH), "async split_sentences")


def hold_the_only_slot(server):
    """Opens a TranslateStream (which holds one of server.max_concurrent_calls until it ends)
    and returns a function that ends it."""
    channel = grpc.insecure_channel(server.target)
    pending = queue.Queue()
    call = channel.stream_stream("/nmt.v1.TranslationService/TranslateStream",
                                 request_serializer=None, response_deserializer=None)(
        iter(pending.get, None), timeout=60)
    end = time.monotonic() + 10
    while time.monotonic() < end and harness.metric(server.metrics(), "nmt_inflight_requests") != 1:
        time.sleep(0.02)

    def release():
        pending.put(None)
        for _ in call:
            pass
        channel.close()
    return release


def retry_checks(nmt_client, server):
    release = hold_the_only_slot(server)
    quick = nmt_client.RetryPolicy(max_attempts=3, initial_backoff=0.05, max_backoff=0.1)
    with nmt_client.Client(server.target, retry=quick) as client:
        try:
            client.translate("A dog runs.")
            check(False, "busy server: RESOURCE_EXHAUSTED once the retries are spent")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and client.retries == 2,
                  f"busy server: {e.code().name} after {client.retries} retries (max_attempts 3)")
    patient = nmt_client.RetryPolicy(max_attempts=30, initial_backoff=0.05, max_backoff=0.2)
    with nmt_client.Client(server.target, retry=patient) as client:
        threading.Timer(0.5, release).start()
        start = time.monotonic()
        got = client.translate(SENTENCES[0])
        check(got == EACH[0] and client.retries >= 1,
              f"busy for 0.5 s: answered after {client.retries} retries, {time.monotonic() - start:.2f} s")


def auth_and_unavailable_checks(nmt_client, binary, model, tmp, health_pb2, health_pb2_grpc):
    """A second server with TLS and bearer tokens, which the client calls before it starts."""
    tokens = os.path.join(tmp, "tokens.txt")
    with open(tokens, "w") as f:
        f.write("secret-1\n")
    cert, key = os.path.join(tmp, "server.pem"), os.path.join(tmp, "server.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", key, "-out", cert], check=True, capture_output=True, timeout=60)
    with open(cert, "rb") as f:
        root = f.read()
    config = os.path.join(tmp, "auth.yaml")
    harness.write_config(config, model, server={"auth_token_file": tokens, "tls_cert_file": cert,
                                                "tls_key_file": key})
    port = harness.free_port()
    target = f"localhost:{port}"
    tls = {"tls": True, "root_certificates": root}
    # The client calls before the server listens: UNAVAILABLE, retried until it serves.
    # Bounded by the 90 s deadline, not by a count (a sanitizer build starts slowly).
    patient = nmt_client.RetryPolicy(max_attempts=10**6, initial_backoff=0.05, max_backoff=0.25)
    # gRPC's own reconnect backoff (1 s growing to 120 s, at least 20 s between attempts by
    # default) is shortened so that the channel notices the new server soon.
    reconnect = [("grpc.initial_reconnect_backoff_ms", 100), ("grpc.min_reconnect_backoff_ms", 100),
                 ("grpc.max_reconnect_backoff_ms", 500)]
    client = nmt_client.Client(target, token="secret-1", retry=patient, timeout=90, options=reconnect, **tls)
    result = {}
    caller = threading.Thread(target=lambda: result.update(text=client.translate("A dog runs.")))
    caller.start()
    time.sleep(0.5)
    server = harness.Server(binary, config, extra_args=["--port", str(port)])
    try:
        caller.join(timeout=95)
        check(bool(result.get("text")) and client.retries >= 1,
              f"UNAVAILABLE until the server starts: answered after {client.retries} retries")
        client.close()
        with nmt_client.Client(target, token="secret-1", **tls) as ok:
            check(ok.translate("A dog runs.") == result.get("text"), "TLS: the right token is accepted")
        with nmt_client.Client(target, token="secret-1", retry=nmt_client.RetryPolicy(max_attempts=1)) as plain:
            try:
                plain.translate("A dog runs.", timeout=10)
                check(False, "a plaintext client is refused by the TLS server")
            except grpc.RpcError as e:
                check(e.code() == grpc.StatusCode.UNAVAILABLE, f"a plaintext client is refused by the TLS server ({e.code().name})")
        for what, token in (("no token", None), ("a wrong token", "secret-2")):
            with nmt_client.Client(target, token=token, **tls) as bad:
                try:
                    bad.translate("A dog runs.")
                    check(False, f"{what}: UNAUTHENTICATED")
                except grpc.RpcError as e:
                    check(e.code() == grpc.StatusCode.UNAUTHENTICATED and bad.retries == 0,
                          f"{what}: {e.code().name}, not retried")

        async def async_auth():
            async with nmt_client.AsyncClient(target, token="secret-1", **tls) as c:
                good = await c.translate("A dog runs.")
            async with nmt_client.AsyncClient(target, **tls) as c:
                try:
                    await c.translate("A dog runs.")
                    return good, None
                except grpc.RpcError as e:
                    return good, e.code()
        good, code = asyncio.run(async_auth())
        check(good == result.get("text") and code == grpc.StatusCode.UNAUTHENTICATED,
              f"async: token accepted, none refused ({code})")
    finally:
        harness.stop_and_report(check, server, "auth server")


def wheel_check(repo, tmp):
    """pip builds the package with its stubs generated from proto/ (offline, system setuptools)."""
    out = os.path.join(tmp, "wheel")
    source = os.path.join(tmp, "src")
    subprocess.run(["cp", "-r", os.path.join(repo, "clients", "python"), source], check=True)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                        "--no-index", "-w", out, source], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "NMT_PROTO_DIR": os.path.join(repo, "proto")})
    wheels = glob.glob(os.path.join(out, "nmt_client-*.whl"))
    names = zipfile.ZipFile(wheels[0]).namelist() if wheels else []
    check(r.returncode == 0 and "nmt_client/_proto/translation_pb2.py" in names
          and "nmt_client/_proto/translation_pb2_grpc.py" in names and "nmt_client/client.py" in names,
          f"pip wheel: stubs generated at build time ({len(names)} files)"
          + ("" if r.returncode == 0 else "\n" + r.stdout[-1500:] + r.stderr[-1500:]))


if __name__ == "__main__":
    main()
