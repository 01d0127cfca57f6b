#!/usr/bin/python3
"""Mutual TLS (server.tls_client_ca_file). A test CA, the server's certificate, a client
certificate from that CA and one from another CA are made at test time with openssl. A client
presenting the CA's certificate translates; a client with no certificate, or with one the CA
did not sign, cannot connect (UNAVAILABLE), health checks included; nmt-server refuses a
client CA file without TLS at start.

    test_mtls.py REPO_ROOT NMT_SERVER
"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rel  # noqa: E402

check = rel.Checks()


def openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def make_ca(tmp, name):
    key, cert = os.path.join(tmp, name + ".key"), os.path.join(tmp, name + ".pem")
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-days", "1", "-subj", "/CN=" + name, "-keyout", key, "-out", cert,
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    return cert, key


def make_leaf(tmp, name, ca, extensions):
    """A certificate signed by `ca` (cert, key) with the given X.509 v3 extension lines."""
    key, csr, cert = (os.path.join(tmp, name + ext) for ext in (".key", ".csr", ".pem"))
    ext = os.path.join(tmp, name + ".ext")
    with open(ext, "w") as f:
        f.write("\n".join(extensions) + "\n")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-subj", "/CN=" + name, "-keyout", key, "-out", csr)
    openssl("x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-CAcreateserial",
            "-days", "1", "-out", cert, "-extfile", ext)
    return cert, key


def read(path):
    with open(path, "rb") as f:
        return f.read()


def main():
    repo, binary = os.path.abspath(sys.argv[1]), sys.argv[2]
    if not shutil.which("openssl"):
        print("openssl not found: apt-get install openssl (scripts/setup.sh installs it)")
        sys.exit(1)
    tmp, pb, pb_grpc, health_pb2, health_pb2_grpc = rel.setup(repo, "nmt-mtls-")
    grpc = rel.grpc
    ca, other_ca = make_ca(tmp, "test-ca"), make_ca(tmp, "other-ca")
    server_cert = make_leaf(tmp, "localhost", ca, ["subjectAltName=DNS:localhost,IP:127.0.0.1",
                                                   "extendedKeyUsage=serverAuth"])
    client = make_leaf(tmp, "client", ca, ["extendedKeyUsage=clientAuth"])
    rogue = make_leaf(tmp, "rogue", other_ca, ["extendedKeyUsage=clientAuth"])

    # A client CA file without TLS is refused at start, naming the key.
    bad = os.path.join(tmp, "bad.yaml")
    rel.write_config(bad, os.path.join(repo, "models/m30k-en-de-small"), server={"tls_client_ca_file": ca[0]})
    refused = subprocess.run([binary, "--config", bad, "--device", "cpu"], capture_output=True, text=True, timeout=60)
    check(refused.returncode == 2 and "tls_client_ca_file needs server.tls_cert_file" in refused.stderr,
          f"client CA without TLS: exit {refused.returncode}, {refused.stderr.strip()[:120]!r}")

    config = os.path.join(tmp, "config.yaml")
    rel.write_config(config, os.path.join(repo, "models/m30k-en-de-small"),
                     server={"tls_cert_file": server_cert[0], "tls_key_file": server_cert[1],
                             "tls_client_ca_file": ca[0]})
    server = rel.json_server(binary, config)
    request = pb.TranslateRequest(texts=[b"A man is riding a bike."])
    trusted = read(ca[0])
    try:
        good = grpc.ssl_channel_credentials(root_certificates=trusted, private_key=read(client[1]),
                                            certificate_chain=read(client[0]))
        with grpc.secure_channel(server.target, good) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            status = rel.wait_healthy(health, health_pb2)
            check(status is not None and status.status == health_pb2.HealthCheckResponse.SERVING,
                  "client certificate from the CA: health SERVING")
            code, _, details, r = rel.call(pb_grpc.TranslationServiceStub(channel).Translate, request, timeout=30)
            check(code == "OK" and r.translations[0].hypotheses[0].text,
                  f"client certificate from the CA: Translate {code} {details}")
        for what, credentials in (
                ("no client certificate", grpc.ssl_channel_credentials(root_certificates=trusted)),
                ("a certificate from another CA",
                 grpc.ssl_channel_credentials(root_certificates=trusted, private_key=read(rogue[1]),
                                              certificate_chain=read(rogue[0])))):
            with grpc.secure_channel(server.target, credentials) as channel:
                code, _, _, _ = rel.call(pb_grpc.TranslationServiceStub(channel).Translate, request, timeout=5)
                health_code, _, _, _ = rel.call(health_pb2_grpc.HealthStub(channel).Check,
                                                health_pb2.HealthCheckRequest(), timeout=5)
                check(code == "UNAVAILABLE" and health_code == "UNAVAILABLE",
                      f"{what}: Translate {code}, health {health_code}")
        ok = rel.metric(server.metrics(), 'nmt_requests_total{code="OK",model="m30k"}')
        check(ok == 1, f"only the verified client's request reached the service ({ok} OK)")
        check(server.proc.poll() is None, "the server is alive")
    except Exception as e:
        check(False, f"unexpected {type(e).__name__}: {e}")
    finally:
        rel.finish(check, server)


if __name__ == "__main__":
    main()
