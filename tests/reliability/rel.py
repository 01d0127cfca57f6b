"""Helpers of the reliability tests, on top of tests/server/support/harness.py: stubs, a server with
extra settings, JSON request logs, RSS/thread/fd sampling. Every wait is bounded."""
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "server", "support"))

import grpc  # noqa: E402

import harness  # noqa: E402,F401  (re-exported)
from harness import Checks, Server, free_port, metric, temp_dir, write_config  # noqa: E402,F401

SENTENCES = [
    "A man is riding a bike.",
    "Two dogs play in the snow.",
    "A little girl in a pink dress is reading a book on a bench in the park.",
    "Several people are standing outside a building waiting for the bus.",
    "A woman sings on a stage while a man plays the guitar behind her.",
    "Children are jumping into a swimming pool on a hot summer day.",
    "An old man with a white beard sells fruit at a market.",
    "A black dog runs through the tall green grass.",
]


def setup(repo, prefix):
    """Temp folder with generated stubs; returns (tmp, pb, pb_grpc, health_pb2, health_pb2_grpc)."""
    tmp = temp_dir(prefix)
    harness.generate_stubs(repo, tmp)
    import health_pb2
    import health_pb2_grpc
    from nmt.v1 import translation_pb2 as pb
    from nmt.v1 import translation_pb2_grpc as pb_grpc
    return tmp, pb, pb_grpc, health_pb2, health_pb2_grpc


def finish(check, server):
    """The end of every test: the server must exit 0 on SIGTERM; its log is shown when a check
    failed; the process exits with the checks' verdict."""
    harness.stop_and_report(check, server)
    check.exit()


def json_server(binary, config, extra_args=()):
    """nmt-server with JSON logs (one object per line), so tests can count request lines."""
    return Server(binary, config, ["--log-format", "json", *extra_args])


def request_lines(server):
    """The server's per-request log lines (JSON), in order."""
    lines = []
    for line in server.output().splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if obj.get("msg") in ("request", "request failed"):
            lines.append(obj)
    return lines


def proc_status(pid):
    """VmRSS (kB), Threads and open fds of a process."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "Threads"):
                out[key] = int(value.split()[0])
    out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    return out


def call(fn, *args, **kwargs):
    """(code name, seconds, details, result) of one RPC."""
    start = time.monotonic()
    try:
        r = fn(*args, **kwargs)
        return "OK", time.monotonic() - start, "", r
    except grpc.RpcError as e:
        return e.code().name, time.monotonic() - start, e.details(), None


def wait_healthy(health, health_pb2, timeout=90):
    """The first Health.Check answer through `health` (a stub on a channel of the test's own
    credentials), or None. Each call waits for the channel to become ready: a fail-fast call
    returns at once while the channel connects, leaving the TLS handshake to gRPC's 5 s
    backup poller, and on loaded cores two of its ticks outlast the server's 10 s
    handshake timeout, so a client could fail to connect for minutes."""
    return wait_for(lambda: call(health.Check, health_pb2.HealthCheckRequest(), timeout=5,
                                 wait_for_ready=True)[3], timeout, 0.2)


def wait_for(predicate, timeout, interval=0.1):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return predicate()
