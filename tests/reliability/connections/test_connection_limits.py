#!/usr/bin/python3
"""What one connection may hold (issue 14), against one server with small limits:
- server.max_streams_per_connection 4: 8 streams opened on one connection, only 4 are in
  the server at once (nmt_inflight_requests), the others wait in the client and are served
  once the first ones end (a call with a deadline that passes meanwhile: DEADLINE_EXCEEDED);
  a second connection gets its own 4.
- server.handshake_timeout_seconds 1: a TCP connection that never sends the HTTP/2 preface
  is closed after about 1 s (gRPC's default waits 120 s).
- server.max_connection_idle_seconds 6: an HTTP/2 connection without calls (answering the
  server's pings) gets GOAWAY ("enter idle") and is closed after about 6 s.
- server.keepalive_time/timeout_seconds 1/1: a client frozen (SIGSTOP) with a stream open
  stops answering pings; the server closes its connection and the stream's place is free
  (nmt_inflight_requests back to 0) within seconds.
- server.min_client_ping_interval_seconds 1, max_ping_strikes 2: a client pinging every
  50 ms gets GOAWAY ENHANCE_YOUR_CALM "too_many_pings" on its third strike; one pinging every
  1.5 s is never struck.
The HTTP/2 probes are raw frames over a socket, so that the client does exactly what it is
told (no library reconnects, pings or window updates behind the test's back).

    test_connection_limits.py REPO_ROOT NMT_SERVER
"""
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rel  # noqa: E402

check = rel.Checks()

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SETTINGS, PING, GOAWAY = 0x4, 0x6, 0x7
ACK = 0x1
ENHANCE_YOUR_CALM = 0xB


def frame(kind, flags=0, stream=0, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


class RawH2:
    """An HTTP/2 connection driven frame by frame."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""
        self.start = time.monotonic()

    def handshake(self):
        self.sock.sendall(PREFACE + frame(SETTINGS))

    def next_frame(self, timeout):
        """(type, flags, payload), or None once the server closed the connection; raises
        socket.timeout when nothing came."""
        self.sock.settimeout(timeout)
        while True:
            if len(self.buf) >= 9:
                length = int.from_bytes(self.buf[:3], "big")
                if len(self.buf) >= 9 + length:
                    kind, flags = self.buf[3], self.buf[4]
                    payload = self.buf[9:9 + length]
                    self.buf = self.buf[9 + length:]
                    return kind, flags, payload
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:
                data = b""
            if not data:
                return None
            self.buf += data

    def send(self, data):
        """False once the server has closed the connection."""
        try:
            self.sock.sendall(data)
            return True
        except OSError:
            return False

    def serve(self, until, reply=True):
        """Reads frames until the server closes or `until` (monotonic) passes, answering its
        SETTINGS and PINGs when `reply`. Returns (frames seen, closed?)."""
        seen = []
        while time.monotonic() < until:
            try:
                f = self.next_frame(max(0.01, until - time.monotonic()))
            except socket.timeout:
                break
            if f is None:
                return seen, True
            seen.append(f)
            kind, flags, payload = f
            if reply and kind == SETTINGS and not flags & ACK:
                self.send(frame(SETTINGS, ACK))
            if reply and kind == PING and not flags & ACK:
                self.send(frame(PING, ACK, 0, payload))
        return seen, False

    def elapsed(self):
        return time.monotonic() - self.start

    def close(self):
        self.sock.close()


def goaway(frames):
    """(error code, debug text) of the first GOAWAY among frames, or None."""
    for kind, _, payload in frames:
        if kind == GOAWAY:
            return int.from_bytes(payload[4:8], "big"), payload[8:].decode(errors="replace")
    return None


def streams_per_connection(server, pb, pb_grpc):
    grpc = rel.grpc
    request = pb.TranslateRequest(texts=[b"A dog runs."], options=pb.TranslateOptions(beam_size=1))
    inflight = lambda: rel.metric(server.metrics(), "nmt_inflight_requests")  # noqa: E731
    with grpc.insecure_channel(server.target) as a, grpc.insecure_channel(
            server.target, options=[("grpc.use_local_subchannel_pool", 1)]) as b:
        stub_a, stub_b = pb_grpc.TranslationServiceStub(a), pb_grpc.TranslationServiceStub(b)
        gates = [threading.Event() for _ in range(8)]

        def messages(gate):
            yield request
            gate.wait(60)  # holds the stream open until released

        streams = [stub_a.TranslateStream(messages(g), timeout=90) for g in gates]
        firsts = [None] * 8

        def first(i):
            try:
                firsts[i] = next(streams[i]).status_code
            except Exception as e:  # noqa: BLE001
                firsts[i] = repr(e)

        readers = [threading.Thread(target=first, args=(i,), daemon=True) for i in range(8)]
        for t in readers:
            t.start()
        at_four = rel.wait_for(lambda: inflight() == 4, 20)
        time.sleep(1.0)  # had the limit not held, more would have arrived by now
        held = inflight()
        answered = sum(1 for f in firsts if f is not None)
        check(at_four and held == 4 and answered <= 4,
              f"8 streams on one connection (limit 4): {held} in the server, {answered} answered, "
              f"the rest waiting in the client")
        code, took, _, _ = rel.call(stub_a.Translate, request, timeout=1.0)
        check(code == "DEADLINE_EXCEEDED" and inflight() == 4,
              f"one more call on that connection waits in the client: {code} after {took:.1f} s (deadline 1 s)")
        gates_b = [threading.Event() for _ in range(4)]
        streams_b = [stub_b.TranslateStream(messages(g), timeout=90) for g in gates_b]
        firsts_b = [next(s).status_code for s in streams_b]
        check(firsts_b == [0] * 4 and inflight() == 8,
              f"a second connection gets its own 4 ({firsts_b}, {inflight()} in the server)")
        for g in gates[:4] + gates_b:
            g.set()
        for t in readers:
            t.join(60)
        check(firsts == [0] * 8, f"the 4 waiting streams are served once the first 4 end ({firsts})")
        for g in gates:
            g.set()
        for s in streams + streams_b:
            rel.call(list, s)
        check(rel.wait_for(lambda: inflight() == 0, 20), "all streams closed: nothing in flight")


def frozen_client(server, tmp):
    """A client process with an open stream, then SIGSTOP: the server's pings go unanswered."""
    script = os.path.join(tmp, "frozen_client.py")
    with open(script, "w") as f:
        f.write(f"""
import sys, threading, time
sys.path.insert(0, {tmp!r})
import grpc
from nmt.v1 import translation_pb2 as pb, translation_pb2_grpc as pb_grpc
channel = grpc.insecure_channel({server.target!r})
stub = pb_grpc.TranslationServiceStub(channel)
hold = threading.Event()
def messages():
    yield pb.TranslateRequest(texts=[b"A dog runs."])
    hold.wait()
stream = stub.TranslateStream(messages())
print("answered", next(stream).status_code, flush=True)
time.sleep(600)
""")
    proc = subprocess.Popen([sys.executable, script], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline().strip()
        inflight = lambda: rel.metric(server.metrics(), "nmt_inflight_requests")  # noqa: E731
        check(line == "answered 0" and inflight() == 1, f"the client's stream is open ({line!r}, {inflight()} in flight)")
        proc.send_signal(signal.SIGSTOP)
        start = time.monotonic()
        freed = rel.wait_for(lambda: inflight() == 0, 20)
        took = time.monotonic() - start
        # keepalive_time 1 s + keepalive_timeout 1 s, and the server's ping timer granularity.
        check(freed and took <= 8, f"frozen client: its stream's place freed after {took:.1f} s "
                                   f"(keepalive 1 s + timeout 1 s)")
    finally:
        proc.kill()
        proc.wait(10)


def main():
    repo, binary = os.path.abspath(sys.argv[1]), sys.argv[2]
    tmp, pb, pb_grpc, health_pb2, health_pb2_grpc = rel.setup(repo, "nmt-connection-limits-")
    config = os.path.join(tmp, "config.yaml")
    rel.write_config(config, os.path.join(repo, "models/m30k-en-de-small"),
                     server={"max_streams_per_connection": 4, "handshake_timeout_seconds": 1,
                             "max_connection_idle_seconds": 6, "keepalive_time_seconds": 1,
                             "keepalive_timeout_seconds": 1, "min_client_ping_interval_seconds": 1,
                             "max_ping_strikes": 2})
    server = rel.json_server(binary, config)
    port = int(server.target.rsplit(":", 1)[1])
    try:
        server.wait_serving(health_pb2, health_pb2_grpc)
        streams_per_connection(server, pb, pb_grpc)

        silent = RawH2(port)
        _, closed = silent.serve(time.monotonic() + 10, reply=False)
        took = silent.elapsed()
        check(closed and 0.8 <= took <= 5, f"no HTTP/2 preface: closed after {took:.1f} s (handshake timeout 1 s)")
        silent.close()

        idle = RawH2(port)
        idle.handshake()
        frames, closed = idle.serve(time.monotonic() + 20)
        took, away = idle.elapsed(), goaway(frames)
        # gRPC 1.51 sends this GOAWAY with code INTERNAL_ERROR and the text "enter idle".
        check(closed and away is not None and "idle" in away[1] and 5.5 <= took <= 12,
              f"idle HTTP/2 connection (answering pings): GOAWAY {away}, closed after {took:.1f} s "
              f"(max_connection_idle 6 s)")
        idle.close()

        pinger = RawH2(port)
        pinger.handshake()
        pinger.serve(time.monotonic() + 0.2)
        for i in range(10):
            pinger.send(frame(PING, 0, 0, struct.pack(">Q", i)))
            time.sleep(0.05)
        frames, closed = pinger.serve(time.monotonic() + 5)
        away = goaway(frames)
        check(away is not None and away[0] == ENHANCE_YOUR_CALM and "too_many_pings" in away[1],
              f"a ping every 50 ms (min interval 1 s, 2 strikes): GOAWAY {away}")
        pinger.close()

        polite = RawH2(port)
        polite.handshake()
        frames = polite.serve(time.monotonic() + 0.2)[0]
        for i in range(4):  # 4 pings this fast would be 3 strikes; all within the idle 6 s
            polite.send(frame(PING, 0, 0, struct.pack(">Q", 100 + i)))
            frames += polite.serve(time.monotonic() + (1.5 if i < 3 else 0.5))[0]
        acks = [f for f in frames if f[0] == PING and f[1] & ACK and f[2] >= struct.pack(">Q", 100)]
        check(goaway(frames) is None and len(acks) == 4,
              f"a ping every 1.5 s: {len(acks)} answered, never struck (GOAWAY: {goaway(frames)})")
        polite.close()

        frozen_client(server, tmp)
        check(server.proc.poll() is None, "the server is alive")
    except Exception as e:
        check(False, f"unexpected {type(e).__name__}: {e}")
    finally:
        rel.finish(check, server)


if __name__ == "__main__":
    main()
