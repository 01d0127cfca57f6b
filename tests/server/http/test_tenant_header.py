#!/usr/bin/python3
"""Who an HTTP request is for fair queueing (issue 56; docs/server.md, "Fairness, quotas and
the cache"), as gRPC's: with server.trust_tenant_header the `x-tenant` header names the
tenant (logged as "tenant:X" on the request's line), without it the header is ignored and
the tenant is the peer's address ("peer:127.0.0.1"); gRPC's x-tenant metadata the same. A
request over its tenant's share of the queue is refused 429 with Retry-After and counted in
nmt_queue_refusals_total{key="none"}.

    test_tenant_header.py REPO_ROOT NMT_SERVER
"""
import json
import os
import sys
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "reliability"))
import harness  # noqa: E402
import rel  # noqa: E402  (request_lines)

check = harness.Checks()
SENTENCE = "A man is riding a bike."


def post(port, path, body, headers):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.headers


def tenant_of(server, request_id):
    lines = rel.wait_for(lambda: [o for o in rel.request_lines(server) if o.get("request_id") == request_id], 10)
    return lines[0].get("tenant") if lines else None


def run(repo, binary, tmp, pb, pb_grpc, health_pb2, health_pb2_grpc, trust):
    port = harness.free_port()
    config = os.path.join(tmp, f"config-{trust}.yaml")
    # A share of 4 waiting sentences (8 x 0.5): a request of 5 can never fit it.
    harness.write_config(config, os.path.join(repo, "models/m30k-en-de-small"),
                         batching={"max_queue_sentences": 8, "tenant_queue_share": 0.5},
                         server={"trust_tenant_header": "true" if trust else "false"})
    server = harness.Server(binary, config, ["--log-format", "json", "--http-host", "127.0.0.1",
                                             "--http-port", str(port)])
    what = "trusted" if trust else "not trusted"
    try:
        server.wait_serving(health_pb2, health_pb2_grpc)
        libre = {"q": SENTENCE, "source": "en", "target": "de"}
        status, _ = post(port, "/v1/translate", {"texts": [SENTENCE], "requestId": f"v1-{trust}"},
                         {"x-tenant": "acme"})
        want = "tenant:acme" if trust else "peer:127.0.0.1"
        got = tenant_of(server, f"v1-{trust}")
        check(status == 200 and got == want, f"x-tenant {what}: /v1/translate with x-tenant acme queues as {got} "
              f"(want {want}), {status}")
        status, _ = post(port, "/v1/translate", {"texts": [SENTENCE], "requestId": f"plain-{trust}"}, {})
        got = tenant_of(server, f"plain-{trust}")
        check(status == 200 and got == "peer:127.0.0.1", f"x-tenant {what}: without the header: {got}, {status}")
        before = len(rel.request_lines(server))
        status, _ = post(port, "/translate", libre, {"x-tenant": "beta"})
        lines = rel.wait_for(lambda: rel.request_lines(server)[before:], 10)
        got = lines[0].get("tenant") if lines else None
        want = "tenant:beta" if trust else "peer:127.0.0.1"
        check(status == 200 and got == want, f"x-tenant {what}: LibreTranslate /translate queues as {got} "
              f"(want {want}), {status}")
        with rel.grpc.insecure_channel(server.target) as channel:
            stub = pb_grpc.TranslationServiceStub(channel)
            stub.Translate(pb.TranslateRequest(texts=[SENTENCE], request_id=f"grpc-{trust}"),
                           metadata=[("x-tenant", "gamma")], timeout=60)
        got = tenant_of(server, f"grpc-{trust}")
        want = "tenant:gamma" if trust else "peer:127.0.0.1"
        check(got == want, f"x-tenant {what}: gRPC metadata queues as {got} (want {want})")
        refused_before = harness.metric(server.metrics(), 'nmt_queue_refusals_total{key="none"}')
        status, headers = post(port, "/translate", {**libre, "q": [SENTENCE] * 5}, {"x-tenant": "delta"})
        refused = harness.metric(server.metrics(), 'nmt_queue_refusals_total{key="none"}')
        check(status == 429 and headers.get("Retry-After") and refused == (refused_before or 0) + 1,
              f"x-tenant {what}: 5 sentences over the tenant's share of 4: {status}, Retry-After "
              f"{headers.get('Retry-After')}, nmt_queue_refusals_total{{key=none}} {refused_before} -> {refused}")
        check(harness.metric(server.metrics(), 'nmt_http_connections{server="api"}') is not None,
              "nmt_http_connections{server=api} is on /metrics")
    except Exception as e:
        check(False, f"unexpected {type(e).__name__}: {e}")
    finally:
        harness.stop_and_report(check, server)


def main():
    repo, binary = os.path.abspath(sys.argv[1]), sys.argv[2]
    tmp, pb, pb_grpc, health_pb2, health_pb2_grpc = rel.setup(repo, "nmt-tenant-header-")
    for trust in (True, False):
        run(repo, binary, tmp, pb, pb_grpc, health_pb2, health_pb2_grpc, trust)
    check.exit()


if __name__ == "__main__":
    main()
