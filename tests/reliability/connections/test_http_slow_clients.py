#!/usr/bin/python3
"""The HTTP API (http.port) under slow and greedy clients (issue 56): the real nmt-server on
loopback, with small http.* limits so that each deadline shows within seconds.

- 300 connections trickling half-sent requests (a request line and a header, then a byte a
  second, from 10 loopback addresses): LibreTranslate's /translate answers every well-formed
  request meanwhile, each within 1 s of the time the server spent translating it (its log
  line's `ms`, found by the request's own traceparent: on two busy cores the decode alone may
  take longer, and that is not the front's), and the server starts no thread for them
  (HttpFront's epoll threads read every connection; none waits on one).
- Each trickler gets 408 and is closed once http.header_timeout_seconds have passed since its
  connection opened, not before; a body trickled after complete headers gets 408 at
  http.body_timeout_seconds after them.
- A peer address at http.max_connections_per_address: its next connection is closed at once,
  another address is served.
- A kept-alive connection silent for http.idle_timeout_seconds is closed.
- W3C traceparent: a valid one sent on HTTP (header) and gRPC (metadata) comes back (HTTP header;
  Translate's trailing, TranslateStream's initial metadata) and is on the request's log line with
  its request id; an invalid one is replaced by a fresh valid one, the request still served.

Margins: the deadlines hold to within the watchdog's 100 ms and libmicrohttpd's whole-second
idle check (server/http/http_front.cc); the bounds below allow seconds more for busy cores.

    test_http_slow_clients.py REPO_ROOT NMT_SERVER
"""
import http.client
import json
import os
import re
import select
import socket
import sys
import threading
import time

# harness.py (tests/server/...) is found wherever the tests' folders put it.
_TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
for _root, _dirs, _files in os.walk(_TESTS):
    if "harness.py" in _files:
        sys.path.insert(0, _root)
        break
import grpc  # noqa: E402

import harness  # noqa: E402

_serial = iter(range(1, 1 << 30))


def unique_traceparent():
    return "00-%032x-%016x-01" % (0xabc << 100 | next(_serial), 1)

check = harness.Checks()
HEADER_S, BODY_S, IDLE_S, PER_ADDRESS = 8, 8, 4, 40
TRICKLERS, TRICKLER_ADDRESSES = 300, 10
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TRACEPARENT_FORMAT = re.compile(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")
SENTENCE = "A man is riding a bike."


def translate(port, source="127.0.0.1", headers=None, timeout=30):
    """(HTTP status, seconds, response headers) of one LibreTranslate request on its own
    connection; a unique traceparent unless `headers` give one."""
    headers = {"traceparent": unique_traceparent(), **(headers or {})}
    start = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout, source_address=(source, 0))
    try:
        conn.request("POST", "/translate", json.dumps({"q": SENTENCE, "source": "en", "target": "de"}),
                     {"Content-Type": "application/json", **headers})
        r = conn.getresponse()
        r.read()
        return r.status, time.monotonic() - start, r.headers
    except OSError as e:
        return f"{type(e).__name__}", time.monotonic() - start, {"traceparent": headers["traceparent"]}
    finally:
        conn.close()


class Trickler:
    """A connection that sends `first` and then a byte a second; records when (and with what)
    the server closed it."""

    def __init__(self, port, source, first):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
        self.opened = time.monotonic()
        self.sock.sendall(first)
        self.sock.setblocking(False)
        self.closed_at = None
        self.got = b""

    def poll(self, now, trickle):
        """Reads what the server sent; trickles a byte when asked. False once closed."""
        if self.closed_at is not None:
            return False
        try:
            while True:
                data = self.sock.recv(4096)
                if not data:
                    raise ConnectionResetError
                self.got += data
        except BlockingIOError:
            pass
        except OSError:
            self.closed_at = now
            self.sock.close()
            return False
        if trickle:
            try:
                self.sock.send(b"a")
            except BlockingIOError:
                pass
            except OSError:
                self.closed_at = now
                self.sock.close()
                return False
        return True


def threads_of(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return -1


def run_trickle_loop(tricklers, stop):
    """Every trickler sends a byte a second until closed (or stop is set)."""
    next_trickle = time.monotonic() + 1
    while not stop.is_set():
        open_socks = [t.sock for t in tricklers if t.closed_at is None]
        if not open_socks:
            return
        select.select(open_socks, [], [], 0.05)
        now = time.monotonic()
        trickle = now >= next_trickle
        if trickle:
            next_trickle = now + 1
        for t in tricklers:
            t.poll(now, trickle)


def logged_ms(server):
    """The `ms` of each request log line (the server's own time for it), by traceparent."""
    out = {}
    for line in server.output().splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if obj.get("msg") in ("request", "request failed"):
            out[obj.get("traceparent")] = obj.get("ms", 0) / 1000
    return out


def front_seconds(server, answers):
    """Each answer's time beyond the server's own for its request (None when not logged)."""
    ms = logged_ms(server)
    return [None if h.get("traceparent") not in ms else t - ms[h.get("traceparent")] for _, t, h in answers]


def siege_checks(server, port):
    base = [translate(port) for _ in range(3)]
    check(all(s == 200 for s, _, _ in base), f"idle server: /translate answers 200 ({[s for s, _, _ in base]})")
    threads_before = threads_of(server.proc.pid)

    half = b"POST /translate HTTP/1.1\r\nHost: nmt\r\nX-Slow: "
    tricklers = [Trickler(port, f"127.0.0.{2 + i % TRICKLER_ADDRESSES}", half) for i in range(TRICKLERS)]
    body_trickler = Trickler(port, "127.0.0.12",
                             b"POST /translate HTTP/1.1\r\nHost: nmt\r\nContent-Type: application/json\r\n"
                             b"Content-Length: 1000\r\n\r\n{")
    # A peer at its bound (trickling too, so that only the bound, not a deadline, is in play).
    bounded = [Trickler(port, "127.0.0.13", half) for _ in range(PER_ADDRESS)]
    everyone = tricklers + [body_trickler] + bounded
    stop = threading.Event()
    loop = threading.Thread(target=run_trickle_loop, args=(everyone, stop), daemon=True)
    loop.start()
    try:
        time.sleep(0.5)  # the server has accepted them all (each sent its first bytes)
        siege = []
        window_end = tricklers[0].opened + HEADER_S - 2.5
        while time.monotonic() < window_end:
            siege.append(translate(port))
        front = front_seconds(server, siege)
        worst = max((f for f in front if f is not None), default=None)
        check(len(siege) >= 3 and all(s == 200 for s, _, _ in siege) and None not in front and worst < 1.0,
              f"{TRICKLERS} tricklers: every /translate 200 within 1 s of its translation ({len(siege)} "
              f"requests, statuses {sorted(set(str(s) for s, _, _ in siege))}, most beyond the translation "
              f"{worst and round(worst, 3)} s; whole requests {round(min(t for _, t, _ in siege), 3)}-"
              f"{round(max(t for _, t, _ in siege), 3)} s)")
        still_open = sum(t.closed_at is None for t in tricklers)
        check(still_open == TRICKLERS, f"the tricklers were all connected meanwhile ({still_open} of {TRICKLERS})")
        threads_during = threads_of(server.proc.pid)
        check(threads_during <= threads_before + 2,
              f"no thread per slow connection: {threads_before} server threads before, {threads_during} during")

        # The peer address at its bound: one more connection from it is closed at once.
        over = Trickler(port, "127.0.0.13", half)
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and over.poll(time.monotonic(), False):
            time.sleep(0.02)
        check(over.closed_at is not None and over.closed_at - over.opened < 3,
              f"connection {PER_ADDRESS + 1} from one address: closed at once "
              f"({None if over.closed_at is None else round(over.closed_at - over.opened, 2)} s)")
        other = translate(port, source="127.0.0.14")
        beyond = front_seconds(server, [other])[0]
        check(other[0] == 200 and beyond is not None and beyond < 1.0,
              f"meanwhile another address is served ({other[0]}, {round(other[1], 3)} s, "
              f"{beyond and round(beyond, 3)} s beyond its translation)")
        check(all(t.closed_at is None for t in bounded), "the bounded address's own connections stay open")

        # The header and body deadlines close the tricklers, with a 408, not before.
        end = time.monotonic() + HEADER_S + 8
        while time.monotonic() < end and any(t.closed_at is None for t in tricklers + [body_trickler]):
            time.sleep(0.2)
    finally:
        stop.set()
        loop.join(timeout=10)
    lived = [t.closed_at - t.opened for t in tricklers if t.closed_at is not None]
    got_408 = sum(t.got.startswith(b"HTTP/1.1 408") for t in tricklers)
    check(len(lived) == TRICKLERS and min(lived) >= HEADER_S - 0.5 and max(lived) <= HEADER_S + 5,
          f"http.header_timeout_seconds={HEADER_S}: every trickler closed between {HEADER_S - 0.5} and "
          f"{HEADER_S + 5} s ({len(lived)} closed, {round(min(lived), 2) if lived else None}-"
          f"{round(max(lived), 2) if lived else None} s)")
    check(got_408 == TRICKLERS, f"... each with a 408 ({got_408} of {TRICKLERS})")
    b = body_trickler
    check(b.closed_at is not None and BODY_S - 0.5 <= b.closed_at - b.opened <= BODY_S + 5
          and b.got.startswith(b"HTTP/1.1 408") and b"http.body_timeout_seconds" in b.got,
          f"http.body_timeout_seconds={BODY_S}: a trickled body gets 408 naming it "
          f"({None if b.closed_at is None else round(b.closed_at - b.opened, 2)} s, {b.got[:40]})")
    for t in bounded:
        t.sock.close()
    after = translate(port)
    check(after[0] == 200, f"after the siege: 200 ({after[0]})")


def idle_check(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", "/translate", json.dumps({"q": SENTENCE, "source": "en", "target": "de"}),
                 {"Content-Type": "application/json"})
    r = conn.getresponse()
    r.read()
    answered = time.monotonic()
    sock = conn.sock
    sock.settimeout(IDLE_S + 10)
    try:
        data = sock.recv(1)
    except OSError:
        data = b""
    silent = time.monotonic() - answered
    conn.close()
    check(r.status == 200 and data == b"" and IDLE_S - 1 <= silent <= IDLE_S + 3,
          f"http.idle_timeout_seconds={IDLE_S}: a kept-alive connection silent after its answer is closed "
          f"after {round(silent, 2)} s")


def trace_checks(server, port, pb, pb_grpc):
    status, _, headers = translate(port, headers={"traceparent": TRACEPARENT})
    check(status == 200 and headers.get("traceparent") == TRACEPARENT,
          f"HTTP: a valid traceparent is echoed ({headers.get('traceparent')})")
    status, _, headers = translate(port, headers={"traceparent": "00-" + "0" * 32 + "-00f067aa0ba902b7-01"})
    fresh = headers.get("traceparent", "")
    check(status == 200 and TRACEPARENT_FORMAT.match(fresh) and "0" * 32 not in fresh,
          f"HTTP: an invalid one (all-zero trace id) is replaced by a fresh one, the request served ({status}, {fresh})")
    grpc_parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
    with grpc.insecure_channel(server.target) as channel:
        stub = pb_grpc.TranslationServiceStub(channel)
        _, call = stub.Translate.with_call(pb.TranslateRequest(texts=[SENTENCE], request_id="trace-unary"),
                                           timeout=30, metadata=(("traceparent", grpc_parent),))
        trailing = dict(call.trailing_metadata())
        check(trailing.get("traceparent") == grpc_parent,
              f"gRPC Translate: echoed in the trailing metadata ({trailing.get('traceparent')})")
        _, call = stub.Translate.with_call(pb.TranslateRequest(texts=[SENTENCE]), timeout=30,
                                           metadata=(("traceparent", "not-a-traceparent"),))
        fresh = dict(call.trailing_metadata()).get("traceparent", "")
        check(TRACEPARENT_FORMAT.match(fresh) is not None,
              f"gRPC Translate: an invalid one is replaced by a fresh one ({fresh})")
        stream = stub.TranslateStream(iter([pb.TranslateRequest(texts=[SENTENCE], request_id="trace-stream")]),
                                      timeout=30, metadata=(("traceparent", grpc_parent),))
        answers = list(stream)
        initial = dict(stream.initial_metadata())
        check(len(answers) == 1 and initial.get("traceparent") == grpc_parent,
              f"gRPC TranslateStream: echoed in the initial metadata ({initial.get('traceparent')})")
    lines = {}
    for line in server.output().splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if obj.get("msg") == "request":
            lines[obj.get("request_id")] = obj
    for rid in ("trace-unary", "trace-stream"):
        check(lines.get(rid, {}).get("traceparent") == grpc_parent,
              f"the log line of request {rid} carries its traceparent")
    check(any(o.get("traceparent") == TRACEPARENT and o.get("method") == "HTTP /translate" for o in lines.values()),
          "the log line of the HTTP request carries its traceparent with its request id")
    check(all(TRACEPARENT_FORMAT.match(o.get("traceparent", "")) for o in lines.values()),
          f"every request log line has a traceparent ({len(lines)} lines)")


def main():
    repo, binary = os.path.abspath(sys.argv[1]), sys.argv[2]
    tmp = harness.temp_dir("nmt-http-slow-")
    harness.generate_stubs(repo, tmp)
    import health_pb2
    import health_pb2_grpc
    from nmt.v1 import translation_pb2 as pb
    from nmt.v1 import translation_pb2_grpc as pb_grpc

    port = harness.free_port()
    config = os.path.join(tmp, "config.yaml")
    harness.write_config(config, os.path.join(repo, "models/m30k-en-de-small"))
    server = harness.Server(binary, config, extra_args=[
        "--log-format", "json", "--http-host", "127.0.0.1", "--http-port", str(port),
        "--http-header-timeout-seconds", str(HEADER_S), "--http-body-timeout-seconds", str(BODY_S),
        "--http-idle-timeout-seconds", str(IDLE_S), "--http-max-connections-per-address", str(PER_ADDRESS),
        "--http-max-connections", "1000"])
    try:
        server.wait_serving(health_pb2, health_pb2_grpc)
        start = time.monotonic()
        siege_checks(server, port)
        idle_check(port)
        trace_checks(server, port, pb, pb_grpc)
        print(f"checks took {round(time.monotonic() - start, 1)} s")
    except Exception as e:  # a crash of the test is a failure with its reason
        check(False, f"unexpected {type(e).__name__}: {e}")
    harness.stop_and_report(check, server)
    check.exit()


if __name__ == "__main__":
    main()
