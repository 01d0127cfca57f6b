#!/usr/bin/python3
"""Hostile requests over the network: bytes that are not a TranslateRequest, messages over
server.max_message_bytes, request ids and model names with control characters (a request_id
with a newline made gRPC abort the whole server before the validator refused it), invalid
UTF-8, thousands of texts, absurd options, 200 open reflection streams. Each gets its own
error status; the server never dies and answers a normal request afterwards.

    test_hostile.py REPO_ROOT NMT_SERVER
"""
import collections
import os
import queue
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rel  # noqa: E402

check = rel.Checks()


def main():
    repo, binary = os.path.abspath(sys.argv[1]), sys.argv[2]
    tmp, pb, pb_grpc, health_pb2, health_pb2_grpc = rel.setup(repo, "nmt-hostile-")
    config = os.path.join(tmp, "config.yaml")
    rel.write_config(config, os.path.join(repo, "models/m30k-en-de-small"),
                     server={"max_message_bytes": 65536})
    server = rel.json_server(binary, config)
    grpc = rel.grpc
    try:
        server.wait_serving(health_pb2, health_pb2_grpc)
        with grpc.insecure_channel(server.target, options=[("grpc.max_send_message_length", 1 << 24)]) as channel:
            stub = pb_grpc.TranslationServiceStub(channel)
            raw = channel.unary_unary("/nmt.v1.TranslationService/Translate",
                                      request_serializer=None, response_deserializer=None)
            for what, data in (("garbage bytes", b"\xff\xff\xff\xff\x0f"),
                               ("truncated field", b"\x12\x80\x80\x80"),
                               ("wrong wire type", b"\x15\x00\x00\x00\x00"),
                               # texts[0] = "caf\xc3": no client library sends a string that is
                               # not UTF-8, so it is written raw (field 2, length 4).
                               ("invalid UTF-8 text", b"\x12\x04caf\xc3")):
                code, _, details, _ = rel.call(raw, data, timeout=10)
                check(code in ("INTERNAL", "INVALID_ARGUMENT"), f"{what}: {code} ({details[:80]})")
            big = pb.TranslateRequest(texts=["a " * 70000])
            code, _, details, _ = rel.call(stub.Translate, big, timeout=10)
            check(code == "RESOURCE_EXHAUSTED", f"a message over max_message_bytes: {code} ({details[:80]})")
            cases = [
                ("request_id with a newline", pb.TranslateRequest(texts=["A dog."], request_id="a\nX-Injected: 1"), "INVALID_ARGUMENT"),
                ("request_id with NUL", pb.TranslateRequest(texts=["A dog."], request_id="a\x00b"), "INVALID_ARGUMENT"),
                ("request_id of 10 kB", pb.TranslateRequest(texts=["A dog."], request_id="x" * 10000), "INVALID_ARGUMENT"),
                ("non-ASCII request_id", pb.TranslateRequest(texts=["A dog."], request_id="Straße"), "INVALID_ARGUMENT"),
                ("model name with a newline", pb.TranslateRequest(texts=["A dog."], model="m30k\nx"), "NOT_FOUND"),
                ("10000 empty texts", pb.TranslateRequest(texts=[""] * 10000), "INVALID_ARGUMENT"),
                ("a 30000-token sentence", pb.TranslateRequest(texts=["a " * 30000]), "INVALID_ARGUMENT"),
                ("beam 2^31-1", pb.TranslateRequest(texts=["A dog."], options=pb.TranslateOptions(beam_size=2**31 - 1)), "INVALID_ARGUMENT"),
                ("negative lengths", pb.TranslateRequest(texts=["A dog."], options=pb.TranslateOptions(max_decoding_length=-2**31)), "INVALID_ARGUMENT"),
                ("NaN length penalty", pb.TranslateRequest(texts=["A dog."], options=pb.TranslateOptions(length_penalty=float("nan"))), "INVALID_ARGUMENT"),
            ]
            for what, request, expect in cases:
                code, _, details, _ = rel.call(stub.Translate, request, timeout=10)
                check(code == expect, f"{what}: {code} ({details[:100]!r})")
            responses = list(stub.TranslateStream(iter([cases[0][1], pb.TranslateRequest(texts=["A dog."], request_id="fine")]), timeout=30))
            check([r.status_code for r in responses] == [3, 0] and responses[1].request_id == "fine"
                  and "\n" not in responses[0].request_id,
                  f"on a stream: the bad id is refused and not echoed ({[r.request_id for r in responses]})")
            # Reflection is gRPC's synchronous kind of service (a thread per call in flight):
            # 200 open reflection streams stay within the server's thread quota, the ones
            # beyond it are refused, and translation does not notice.
            reflect = channel.stream_stream("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                                            request_serializer=None, response_deserializer=None)
            idle_threads = rel.proc_status(server.proc.pid)["Threads"]
            queues = [queue.Queue() for _ in range(200)]
            streams = [reflect(iter(q.get, None), timeout=60) for q in queues]
            refused = rel.wait_for(lambda: sum(s.done() for s in streams) >= 150, 30)
            threads = rel.proc_status(server.proc.pid)["Threads"]
            code, _, _, _ = rel.call(stub.Translate, pb.TranslateRequest(texts=["A dog."]), timeout=30)
            for q in queues:
                q.put(None)
            outcomes = collections.Counter(rel.call(list, s)[0] for s in streams)
            check(refused and threads <= idle_threads + 24 and code == "OK"
                  and set(outcomes) <= {"OK", "RESOURCE_EXHAUSTED"},
                  f"200 reflection streams: threads {idle_threads} -> {threads}, {dict(outcomes)}; "
                  f"a translation meanwhile: {code}")
            code, _, _, r = rel.call(stub.Translate, pb.TranslateRequest(texts=["A man is riding a bike."], request_id="after"), timeout=30)
            check(code == "OK" and r.request_id == "after", f"a normal request afterwards: {code}")
            check(server.proc.poll() is None, "the server is alive")
        log = server.output()
        check("X-Injected: 1\n" not in log and "assertion failed" not in log, "no raw control characters in the log, no gRPC assertion")
    except Exception as e:
        check(False, f"unexpected {type(e).__name__}: {e}")
    finally:
        rel.finish(check, server)


if __name__ == "__main__":
    main()
