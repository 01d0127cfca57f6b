#!/usr/bin/python3
"""A second, independent client: Debian's python3-grpcio with stubs generated at test time
from proto/ talks to the real nmt-server. Translations against transformers' references
(the demo model's, tests/conformance/demo), n-best, each bad input with its status and message
(invalid UTF-8 from a raw client included),
deadline, cancellation, 32 concurrent clients equal to one-at-a-time results, the stream,
health, reflection, ListModels, and /metrics counters.

    test_python_client.py REPO_ROOT NMT_SERVER
"""
import concurrent.futures
import json
import os
import sys
import time

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import harness  # noqa: E402

check = harness.Checks()


def main():
    repo, binary = os.path.abspath(sys.argv[1]), sys.argv[2]
    tmp = harness.temp_dir("nmt-py-client-")
    harness.generate_stubs(repo, tmp)
    import health_pb2
    import health_pb2_grpc
    from nmt.v1 import translation_pb2 as pb
    from nmt.v1 import translation_pb2_grpc as pb_grpc

    config = os.path.join(tmp, "config.yaml")
    harness.write_config(config, os.path.join(repo, "models/m30k-en-de-small"),
                         limits={"max_sentences_per_request": 16, "max_input_tokens": 48,
                                 "max_beam_size": 8})
    server = harness.Server(binary, config)
    try:
        server.wait_serving(health_pb2, health_pb2_grpc)
        check(True, "health: SERVING (grpc.health.v1.Health/Check)")
        with grpc.insecure_channel(server.target) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            r = health.Check(health_pb2.HealthCheckRequest(service="nmt.v1.TranslationService"), timeout=10)
            check(r.status == health_pb2.HealthCheckResponse.SERVING,
                  "health: nmt.v1.TranslationService is SERVING by name")
            try:
                health.Check(health_pb2.HealthCheckRequest(service="nmt.v1.Nothing"), timeout=10)
                check(False, "health: an unknown service name is NOT_FOUND")
            except grpc.RpcError as e:
                check(e.code() == grpc.StatusCode.NOT_FOUND, "health: an unknown service name is NOT_FOUND")
            run_checks(server, channel, pb, pb_grpc, repo)
    except Exception as e:  # a crash of the test is a failure with its reason
        check(False, f"unexpected {type(e).__name__}: {e}")
    finally:
        harness.stop_and_report(check, server)
    int8_listed(binary, config, health_pb2, health_pb2_grpc, pb, pb_grpc)
    check.exit()


def int8_listed(binary, config, health_pb2, health_pb2_grpc, pb, pb_grpc):
    """ListModels names the precision the CPU computes in: int8 when asked (it once said
    float32 for every CPU model), and int8 translates."""
    server = harness.Server(binary, config, ["--precision", "int8"])
    try:
        server.wait_serving(health_pb2, health_pb2_grpc)
        with grpc.insecure_channel(server.target) as channel:
            stub = pb_grpc.TranslationServiceStub(channel)
            models = stub.ListModels(pb.ListModelsRequest(), timeout=10).models
            check([m.precision for m in models] == ["int8"],
                  f"ListModels: --precision int8 on the CPU is listed int8: {[m.precision for m in models]}")
            r = stub.Translate(pb.TranslateRequest(texts=["A man is riding a bike."]), timeout=60)
            check(len(r.translations) == 1 and r.translations[0].hypotheses[0].text,
                  f"int8 translates: {r.translations[0].hypotheses[0].text if r.translations else None!r}")
    except Exception as e:
        check(False, f"int8 server: unexpected {type(e).__name__}: {e}")
    finally:
        harness.stop_and_report(check, server, "int8 server")


def request(pb, texts, beam=4, nbest=1, model="", **kw):
    return pb.TranslateRequest(
        model=model, texts=texts,
        options=pb.TranslateOptions(beam_size=beam, num_hypotheses=nbest, return_scores=True,
                                    return_token_ids=True, **kw))


PARSE_FAILED = ("the request does not parse as an nmt.v1.TranslateRequest (a malformed message, "
                "or a text that is not valid UTF-8)")


def refused(stub, req, code, message, what):
    """`stub` is a TranslationServiceStub, or a raw Translate method (request bytes)."""
    try:
        (stub if callable(stub) else stub.Translate)(req, timeout=30)
        check(False, f"{what}: refused with {code.name}")
    except grpc.RpcError as e:
        check(e.code() == code and e.details() == message,
              f"{what}: {code.name} '{message}' (got {e.code().name} '{e.details()}')")


def run_checks(server, channel, pb, pb_grpc, repo):
    stub = pb_grpc.TranslationServiceStub(channel)

    # The engine reproduces transformers' generate(num_beams=4) (the demo model's references).
    with open(os.path.join(repo, "tests/conformance/demo/references.jsonl")) as f:
        rows = [json.loads(line) for _, line in zip(range(12), f)]
    r = stub.Translate(request(pb, [row["source"] for row in rows]), timeout=120)
    same = sum(t.hypotheses[0].text == row["beam4"]["text"] for t, row in zip(r.translations, rows))
    check(len(r.translations) == len(rows) == 12 and same >= len(rows) - 1,  # float16 on a GPU
          f"beam 4 translations equal transformers' text ({same}/{len(rows)})")

    texts = ["A man is riding a bike.", "Two dogs play in the snow.", "A woman sings on stage."]
    r = stub.Translate(request(pb, texts, beam=4, nbest=4), timeout=60)
    ok = len(r.translations) == 3 and all(len(t.hypotheses) == 4 for t in r.translations)
    ok = ok and all(t.hypotheses[i].score >= t.hypotheses[i + 1].score
                    for t in r.translations for i in range(3))
    check(ok, "n-best: 4 hypotheses per sentence, best first")
    check(all(t.hypotheses[0].text and list(t.hypotheses[0].token_ids) for t in r.translations),
          "hypotheses carry text and token ids")
    check(r.model == "m30k" and r.request_id and r.timings.total_ms > 0,
          f"response names model, request id and timings ({r.model}, {r.request_id})")

    # Bad inputs: status code and message each; the server keeps serving.
    I, N = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND
    refused(stub, pb.TranslateRequest(), I, "texts is empty: send at least one sentence", "no texts")
    refused(stub, request(pb, ["x"] * 17), I,
            "too many sentences: 17 > limits.max_sentences_per_request (16)", "17 sentences")
    refused(stub, request(pb, ["ok", "  "]), I, "texts[1] is empty (or only whitespace)", "blank text")
    # texts are proto strings: python3-grpcio refuses to build one that is not UTF-8, so a
    # raw client's message is written by hand (field 2, length 3, "ab\xff").
    raw = channel.unary_unary("/nmt.v1.TranslationService/Translate",
                              request_serializer=None, response_deserializer=None)
    refused(raw, b"\x12\x03ab\xff", I, PARSE_FAILED, "invalid UTF-8 from a raw client")
    try:
        pb.TranslateRequest(texts=[b"ab\xff"])
        check(False, "python protobuf refuses a text that is not UTF-8")
    except ValueError:
        check(True, "python protobuf refuses a text that is not UTF-8")
    long_text = " ".join(["house"] * 80)
    try:
        stub.Translate(request(pb, [long_text]), timeout=30)
        check(False, "input above max_input_tokens refused")
    except grpc.RpcError as e:
        check(e.code() == I and "more than limits.max_input_tokens (48)" in e.details()
              and "never truncated" in e.details(), f"input above max_input_tokens: {e.details()}")
    refused(stub, request(pb, ["ok"], beam=0), I,
            "options.beam_size must be between 1 and 8 (limits.max_beam_size), got 0", "beam 0")
    refused(stub, request(pb, ["ok"], beam=9), I,
            "options.beam_size must be between 1 and 8 (limits.max_beam_size), got 9", "beam 9")
    refused(stub, request(pb, ["ok"], beam=2, nbest=3), I,
            "options.num_hypotheses must be between 1 and 2 (options.beam_size), got 3", "n-best > beam")
    refused(stub, request(pb, ["ok"], model="de-en"), N,
            "model 'de-en' is not served here (models: m30k)", "unknown model")

    # Deadline and cancellation, of a request that takes seconds on any machine: 16 sentences
    # of beam 8 made to decode 200 tokens each (without min_decoding_length a fast CPU
    # finished it within the 0.1 s before the cancel, and the cancel found nothing to cancel).
    heavy = request(pb, [f"A man number {i} walks his dog in the park." for i in range(16)], beam=8,
                    min_decoding_length=200)
    try:
        stub.Translate(heavy, timeout=0.03)
        check(False, "30 ms deadline exceeded")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.DEADLINE_EXCEEDED, f"30 ms deadline: {e.code().name}")
    future = stub.Translate.future(heavy, timeout=60)
    time.sleep(0.1)
    future.cancel()
    check(future.cancelled(), "client cancellation: the call reports cancelled")
    end = time.monotonic() + 20
    cancelled = None
    while time.monotonic() < end and not cancelled:
        cancelled = harness.metric(server.metrics(), 'nmt_requests_total{code="CANCELLED",model="m30k"}')
        time.sleep(0.05)
    check(cancelled and cancelled >= 1, f"the server counted the cancelled request ({cancelled})")

    # 32 concurrent clients, each on its own channel, equal to one-at-a-time answers.
    sentences = [f"{who} {what}." for who in ("A man", "A girl", "Two dogs", "An old woman")
                 for what in ("runs", "is eating", "sits on a bench", "plays with a ball",
                              "looks at the sea", "climbs a rock", "reads a book", "sleeps")]
    alone = [stub.Translate(request(pb, [s]), timeout=60).translations[0].hypotheses[0].text
             for s in sentences]

    def one(s):
        with grpc.insecure_channel(server.target, options=[("grpc.use_local_subchannel_pool", 1)]) as c:
            return pb_grpc.TranslationServiceStub(c).Translate(request(pb, [s]), timeout=120)

    ok_before = harness.metric(server.metrics(), 'nmt_requests_total{code="OK",model="m30k"}')
    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        results = list(pool.map(one, sentences))
    got = [r.translations[0].hypotheses[0].text for r in results]
    check(len(sentences) == 32 and got == alone,
          f"32 concurrent clients answered, equal to one-at-a-time ({sum(a == b for a, b in zip(got, alone))}/32)")
    ok_after = harness.metric(server.metrics(), 'nmt_requests_total{code="OK",model="m30k"}')
    check(ok_after - ok_before == 32, f"nmt_requests_total{{code=OK}} grew by 32 ({ok_after - ok_before})")

    # Stream: every message answered in order with its id, an invalid one included.
    msgs = [request(pb, [s], beam=2 if i != 1 else 0) for i, s in enumerate(sentences[:4])]
    for i, m in enumerate(msgs):
        m.request_id = f"py-{i}"
    answers = list(stub.TranslateStream(iter(msgs), timeout=60))
    check([a.request_id for a in answers] == ["py-0", "py-1", "py-2", "py-3"],
          "stream: every message answered in order with its request id")
    check(answers[1].status_code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
          and "options.beam_size" in answers[1].status_message
          and all(a.status_code == 0 and len(a.response.translations) == 1
                  for i, a in enumerate(answers) if i != 1),
          "stream: the invalid message carries its status, the others their translation")

    models = stub.ListModels(pb.ListModelsRequest(), timeout=10).models
    check(len(models) == 1 and models[0].name == "m30k" and models[0].is_default
          and models[0].device == "cpu" and models[0].precision == "float32",
          f"ListModels (float16 is computed in float32 on the CPU): "
          f"{[(m.name, m.device, m.precision) for m in models]}")

    # Server reflection, spoken raw: ServerReflectionRequest{list_services: ""} is field 7.
    reflect = channel.stream_stream("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                                    request_serializer=None, response_deserializer=None)
    raw = b"".join(reflect(iter([b"\x3a\x00"]), timeout=10))
    check(b"nmt.v1.TranslationService" in raw and b"grpc.health.v1.Health" in raw,
          "server reflection lists nmt.v1.TranslationService and grpc.health.v1.Health")


if __name__ == "__main__":
    main()
