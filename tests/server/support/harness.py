"""Shared helpers of the Python server tests: stubs generated at test time, the real
nmt-server on free loopback ports, /metrics scraping. Run with Debian's /usr/bin/python3
(python3-grpcio, python3-grpc-tools). Every wait is bounded."""
import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import grpc


def temp_dir(prefix):
    """A temporary folder removed when the test exits."""
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def generate_stubs(repo, out_dir):
    """Compiles the API and health protos into out_dir and makes them importable."""
    proto = os.path.join(repo, "proto")
    health = os.path.join(proto, "grpc", "health", "v1")
    for include, path in ((proto, "nmt/v1/translation.proto"), (proto, "nmt/v1/model_control.proto"),
                          (health, "health.proto")):
        subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", include,
                        "--python_out", out_dir, "--grpc_python_out", out_dir,
                        os.path.join(include, path)], check=True, timeout=120)
    sys.path.insert(0, out_dir)


def write_config(path, model_dir, limits=None, batching=None, server=None):
    """A config of the demo model. Without the translation cache unless `server` sets
    translation_cache_mb: the tests time, cancel and overload decodes of repeated sentences,
    which the cache (on by default) would answer at once; its own tests turn it on."""
    server = {"translation_cache_mb": 0, **(server or {})}
    sections = {"server": server, "limits": limits or {}, "batching": batching or {}}
    with open(path, "w") as f:
        for name, values in sections.items():
            if values:
                f.write(f"{name}:\n" + "".join(f"  {k}: {v}\n" for k, v in values.items()))
        f.write(f"models:\n  - name: m30k\n    path: {model_dir}\n")


class Server:
    """nmt-server on loopback; stop() sends SIGTERM and returns the exit code."""

    def __init__(self, binary, config, extra_args=()):
        self.port, self.metrics_port = free_port(), free_port()
        self.log = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen(
            [binary, "--config", config, "--device", "cpu", "--host", "127.0.0.1",
             "--port", str(self.port), "--metrics-host", "127.0.0.1",
             "--metrics-port", str(self.metrics_port), *extra_args],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.target = f"127.0.0.1:{self.port}"

    def wait_serving(self, health_pb2, health_pb2_grpc, timeout=90):
        end = time.monotonic() + timeout
        with grpc.insecure_channel(self.target) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while time.monotonic() < end and self.proc.poll() is None:
                try:
                    # wait_for_ready keeps a call in flight while the channel connects: a
                    # fail-fast call returns at once and leaves the connection to gRPC's
                    # 5 s backup poller, which on loaded cores can outlast the server's
                    # handshake timeout.
                    r = stub.Check(health_pb2.HealthCheckRequest(), timeout=2, wait_for_ready=True)
                    if r.status == health_pb2.HealthCheckResponse.SERVING:
                        return True
                except grpc.RpcError:
                    pass
                time.sleep(0.1)
        raise RuntimeError("nmt-server never became SERVING:\n" + self.output())

    def metrics(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as r:
            return r.read().decode()

    def output(self):
        self.log.seek(0)
        return self.log.read()

    def stop(self, sig=signal.SIGTERM, timeout=45):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        return self.proc.returncode


def stop_and_report(check, server, what="nmt-server"):
    """A test's last word on its server: it must exit 0 on SIGTERM, and the end of its log is
    shown when any check failed (enough of it for a sanitizer's whole report)."""
    rc = server.stop()
    check(rc == 0, f"{what}: exit code 0 on SIGTERM (got {rc})")
    if check.failures:
        print(server.output()[-16000:])


def metric(text, series):
    """Value of one exposed series (name plus labels exactly as exposed), or None."""
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return None


class Checks:
    """Named checks; main() exits 1 when any failed (each test prints what it checked)."""

    def __init__(self):
        self.failures = []

    def __call__(self, cond, what):
        print(("ok    " if cond else "FAIL  ") + what, flush=True)
        if not cond:
            self.failures.append(what)
        return cond

    def exit(self):
        print(f"\n{len(self.failures)} failed checks")
        sys.exit(1 if self.failures else 0)


def http_request(port, method, path, body=None, headers=None, timeout=120):
    """(status, body bytes, headers) of one request to the HTTP API on loopback; an error
    status is an answer like any other."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read(), r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers


def http_server(repo, binary, prefix, token, limits=None, server=None, extra_args=()):
    """The demo model's nmt-server with its HTTP API on a free loopback port and one API key
    (`token`, server.auth_token_file), SERVING: (Server, HTTP port, temp dir, config path).
    `limits` and `server` go to write_config (server.auth_token_file added), `extra_args` to
    the command line. The stubs are generated in the temp dir (on sys.path after this)."""
    tmp = temp_dir(prefix)
    generate_stubs(repo, tmp)
    import health_pb2
    import health_pb2_grpc

    tokens = os.path.join(tmp, "tokens.txt")
    with open(tokens, "w") as f:
        f.write(token + "\n")
    port = free_port()
    config = os.path.join(tmp, "config.yaml")
    write_config(config, os.path.join(repo, "models/m30k-en-de-small"), limits=limits,
                 server={"auth_token_file": tokens, **(server or {})})
    process = Server(binary, config, extra_args=["--http-host", "127.0.0.1", "--http-port", str(port), *extra_args])
    try:
        process.wait_serving(health_pb2, health_pb2_grpc)
    except Exception:
        process.stop()
        raise
    return process, port, tmp, config
