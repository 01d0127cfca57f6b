#!/usr/bin/python3
"""TLS and bearer-token authentication. A self-signed certificate is made at test time with
openssl. Over TLS with an accepted token (either of two, for rotation) the service translates;
without a token, with a wrong one or another scheme every method answers UNAUTHENTICATED and
nmt_requests_total{code="UNAUTHENTICATED"} counts each; health checks need no token; a
plaintext client and a client that does not trust the certificate get no answer. SIGHUP
re-reads the token file (a rotated-out token is refused from then on); an empty file leaves
the accepted tokens as they were.

    test_tls_auth.py REPO_ROOT NMT_SERVER
"""
import os
import shutil
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rel  # noqa: E402

check = rel.Checks()


def make_cert(tmp, name):
    cert, key = os.path.join(tmp, name + ".pem"), os.path.join(tmp, name + ".key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", key, "-out", cert], check=True, capture_output=True, timeout=60)
    return cert, key


def main():
    repo, binary = os.path.abspath(sys.argv[1]), sys.argv[2]
    if not shutil.which("openssl"):
        print("openssl not found: apt-get install openssl (scripts/setup.sh installs it)")
        sys.exit(1)
    tmp, pb, pb_grpc, health_pb2, health_pb2_grpc = rel.setup(repo, "nmt-tls-")
    grpc = rel.grpc
    cert, key = make_cert(tmp, "server")
    other_cert, _ = make_cert(tmp, "other")
    tokens = os.path.join(tmp, "tokens.txt")
    with open(tokens, "w") as f:
        f.write("old-token-0123456789\n\n  new-token-abcdef  \n")
    config = os.path.join(tmp, "config.yaml")
    # Relative paths resolve against the config's folder.
    rel.write_config(config, os.path.join(repo, "models/m30k-en-de-small"),
                     server={"tls_cert_file": "server.pem", "tls_key_file": "server.key",
                             "auth_token_file": "tokens.txt"})
    server = rel.json_server(binary, config)
    with open(cert, "rb") as f:
        trusted = grpc.ssl_channel_credentials(root_certificates=f.read())
    with open(other_cert, "rb") as f:
        untrusted = grpc.ssl_channel_credentials(root_certificates=f.read())
    request = pb.TranslateRequest(texts=["A man is riding a bike."])
    try:
        with grpc.secure_channel(server.target, trusted) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            status = rel.wait_healthy(health, health_pb2)
            check(status is not None and status.status == health_pb2.HealthCheckResponse.SERVING,
                  "health over TLS without a token: SERVING")
            stub = pb_grpc.TranslationServiceStub(channel)
            for token in ("old-token-0123456789", "new-token-abcdef"):
                code, _, details, r = rel.call(stub.Translate, request, timeout=30,
                                               metadata=[("authorization", "Bearer " + token)])
                check(code == "OK" and r.translations[0].hypotheses[0].text,
                      f"TLS + accepted token {token[:3]}...: {code} {details} "
                      f"{r.translations[0].hypotheses[0].text if r else ''}")
            code, _, _, r = rel.call(stub.ListModels, pb.ListModelsRequest(), timeout=10,
                                     metadata=[("authorization", "Bearer new-token-abcdef")])
            check(code == "OK" and r.models[0].name == "m30k", f"ListModels with a token: {code}")
            responses = list(stub.TranslateStream(iter([request, request]), timeout=30,
                                                  metadata=[("authorization", "Bearer old-token-0123456789")]))
            check([r.status_code for r in responses] == [0, 0], "TranslateStream with a token: both answered")

            denied = 0
            for what, metadata in (("no token", []),
                                   ("wrong token", [("authorization", "Bearer old-token-012345678")]),
                                   ("token prefix", [("authorization", "Bearer new")]),
                                   ("Basic scheme", [("authorization", "Basic new-token-abcdef")]),
                                   ("bare token", [("authorization", "new-token-abcdef")])):
                code, _, details, _ = rel.call(stub.Translate, request, timeout=10, metadata=metadata)
                check(code == "UNAUTHENTICATED", f"Translate, {what}: {code} ({details})")
                denied += 1
            code, _, _, _ = rel.call(stub.ListModels, pb.ListModelsRequest(), timeout=10)
            check(code == "UNAUTHENTICATED", f"ListModels without a token: {code}")
            denied += 1
            code, _, _, _ = rel.call(lambda: list(stub.TranslateStream(iter([request]), timeout=10)))
            check(code == "UNAUTHENTICATED", f"TranslateStream without a token: {code}")
            denied += 1
            counted = rel.metric(server.metrics(), 'nmt_requests_total{code="UNAUTHENTICATED",model="unknown"}')
            check(counted == denied, f'nmt_requests_total{{code="UNAUTHENTICATED"}} = {counted} (expected {denied})')
            ok = rel.metric(server.metrics(), 'nmt_requests_total{code="OK",model="m30k"}')
            check(ok == 4, f"the authenticated requests counted OK ({ok})")

            # SIGHUP re-reads the token file: the rotated-out token is refused from then on.
            def translate(token):
                return rel.call(stub.Translate, request, timeout=30,
                                metadata=[("authorization", "Bearer " + token)])[0]

            def after_sighup(message):
                before = server.output().count(message)
                server.proc.send_signal(signal.SIGHUP)
                return rel.wait_for(lambda: server.output().count(message) > before, 10)

            with open(tokens, "w") as f:
                f.write("rotated-token-789\n")
            reloaded = after_sighup('"msg":"bearer tokens reloaded"')
            codes = (translate("rotated-token-789"), translate("new-token-abcdef"))
            check(reloaded and codes == ("OK", "UNAUTHENTICATED"),
                  f"SIGHUP with a rotated token file: new token {codes[0]}, old token {codes[1]}")
            with open(tokens, "w") as f:
                f.write("\n")
            kept = after_sighup('"msg":"bearer tokens not reloaded')
            codes = (translate("rotated-token-789"), translate("anything"))
            check(kept and codes == ("OK", "UNAUTHENTICATED") and server.proc.poll() is None,
                  f"SIGHUP with an empty token file: logged, tokens kept ({codes})")

        with grpc.insecure_channel(server.target) as channel:
            code, _, _, _ = rel.call(pb_grpc.TranslationServiceStub(channel).Translate, request, timeout=5,
                                     metadata=[("authorization", "Bearer new-token-abcdef")])
            check(code == "UNAVAILABLE", f"plaintext client on the TLS port: {code}")
        with grpc.secure_channel(server.target, untrusted) as channel:
            code, _, _, _ = rel.call(pb_grpc.TranslationServiceStub(channel).Translate, request, timeout=5,
                                     metadata=[("authorization", "Bearer new-token-abcdef")])
            check(code == "UNAVAILABLE", f"client that does not trust the certificate: {code}")
        log = server.output()
        check("new-token-abcdef" not in log and "old-token" not in log and "rotated-token" not in log,
              "tokens never appear in the log")
    except Exception as e:
        check(False, f"unexpected {type(e).__name__}: {e}")
    finally:
        rel.finish(check, server)


if __name__ == "__main__":
    main()
