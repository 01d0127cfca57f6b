#!/usr/bin/python3
"""/metrics under attack (issues 14, 56): 300 connections trickling a request head one byte a
second and 100 sending garbage (random bytes, endless header lines, POST bodies, 1 MB
headers, a TLS hello), each reconnecting as soon as the server closes it, from 10 loopback
addresses (40 each, within the endpoint's 64 per address), while a scraper on another
address fetches /metrics every second for 15 s. Every scrape must be answered within 2 s; a
Translate call made each second meanwhile keeps its latency; a trickling connection is
closed (408) near the endpoint's 5 s header deadline, not held open; the garbage gets a 4xx
answer or a close, never a hang; the server's threads do not grow with the connections; one
address past its 64 connections is closed at once while the scraper is still served.

    test_metrics_endpoint.py REPO_ROOT NMT_SERVER [SECONDS]
"""
import os
import random
import resource
import selectors
import socket
import statistics
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rel  # noqa: E402

check = rel.Checks()

TRICKLERS = 300
GARBAGE = 100
REQUEST_DEADLINE = 5.0  # metrics_endpoint_limits().header_timeout_seconds
PER_ADDRESS = 64        # metrics_endpoint_limits().max_connections_per_address
ADDRESSES = [f"127.0.0.{i}" for i in range(2, 12)]  # the attack's; the scraper is 127.0.0.1

TRICKLE_HEAD = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 4096


def garbage_payload(kind):
    if kind == 0:  # random bytes: 400
        return random.randbytes(20000).replace(b"\r\n\r\n", b"....")
    if kind == 1:  # endless header lines past libmicrohttpd's 32 KB connection buffer: 431
        return b"GET /metrics HTTP/1.1\r\n" + b"X-A: b\r\n" * 6000
    if kind == 2:  # a POST with a body: 405
        return b"POST /metrics HTTP/1.1\r\nContent-Length: 10000\r\n\r\n" + b"x" * 10000
    if kind == 3:  # a 1 MB header
        return b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * (1 << 20) + b"\r\n\r\n"
    # A TLS hello, which never ends an HTTP head: 408 at the deadline.
    return b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 500


class Attack:
    """The hostile connections, driven from one thread with a selector."""

    def __init__(self, port):
        self.port = port
        self.sel = selectors.DefaultSelector()
        self.stop = threading.Event()
        self.trickle_lifetimes = []   # seconds from connect to the server's close
        self.trickle_answers = set()  # status lines the tricklers got
        self.garbage_answers = {}     # kind -> set of status lines (or "closed")
        self.connects = 0
        self.errors = []
        self.thread = threading.Thread(target=self.run, daemon=True)

    def open(self, role, kind=0, address=None):
        """A connection from `address` (a reconnection keeps its closed one's: each address
        stays at 40), by default the next of ADDRESSES in turn."""
        address = address or ADDRESSES[self.connects % len(ADDRESSES)]
        s = socket.socket()
        s.bind((address, 0))
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", self.port))
        self.connects += 1
        state = {"role": role, "kind": kind, "address": address, "start": time.monotonic(), "sent": 0,
                 "payload": TRICKLE_HEAD if role == "trickle" else garbage_payload(kind),
                 "got": b"", "next": time.monotonic()}
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if role == "garbage" else 0)
        self.sel.register(s, events, state)

    def closed(self, s, state, answer):
        self.sel.unregister(s)
        s.close()
        line = answer.split(b"\r\n", 1)[0].decode(errors="replace") if answer else "closed"
        if state["role"] == "trickle":
            self.trickle_lifetimes.append(time.monotonic() - state["start"])
            self.trickle_answers.add(line)
        else:
            self.garbage_answers.setdefault(state["kind"], set()).add(line)
        if not self.stop.is_set():
            self.open(state["role"], state["kind"], state["address"])

    def run(self):
        for i in range(TRICKLERS):
            self.open("trickle")
        for i in range(GARBAGE):
            self.open("garbage", i % 5)
        while not self.stop.is_set():
            for key, events in self.sel.select(timeout=0.05):
                s, st = key.fileobj, key.data
                if events & selectors.EVENT_READ:
                    try:
                        data = s.recv(65536)
                    except OSError:
                        data = b""
                    if data:
                        st["got"] += data
                    else:
                        self.closed(s, st, st["got"])
                    continue
                if events & selectors.EVENT_WRITE:  # garbage goes as fast as it can
                    try:
                        st["sent"] += s.send(st["payload"][st["sent"]:st["sent"] + 65536])
                    except BlockingIOError:
                        pass
                    except OSError:
                        self.closed(s, st, st["got"])
                        continue
                    if st["sent"] >= len(st["payload"]):
                        self.sel.modify(s, selectors.EVENT_READ, st)
            # Each trickler sends its next byte once a second.
            now = time.monotonic()
            for key in list(self.sel.get_map().values()):
                st = key.data
                if st["role"] == "trickle" and now >= st["next"] and st["sent"] < len(st["payload"]):
                    try:
                        st["sent"] += key.fileobj.send(st["payload"][st["sent"]:st["sent"] + 1])
                    except OSError:  # still connecting, or closed (the read sees that)
                        pass
                    st["next"] = now + 1.0
        for key in list(self.sel.get_map().values()):
            key.fileobj.close()

    def open_count(self):
        return len(self.sel.get_map())


def scrape(port, timeout=2.0):
    start = time.monotonic()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as r:
            body = r.read().decode()
            ok = r.status == 200 and "nmt_requests_total" in body
    except Exception as e:  # a timeout or a refused connection is a failed scrape
        return False, time.monotonic() - start, f"{type(e).__name__}: {e}"
    return ok, time.monotonic() - start, ""


def main():
    repo, binary = os.path.abspath(sys.argv[1]), sys.argv[2]
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 15.0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4096)), hard))
    tmp, pb, pb_grpc, health_pb2, health_pb2_grpc = rel.setup(repo, "nmt-metrics-endpoint-")
    config = os.path.join(tmp, "config.yaml")
    rel.write_config(config, os.path.join(repo, "models/m30k-en-de-small"))
    server = rel.Server(binary, config)
    grpc = rel.grpc
    attack = None
    try:
        server.wait_serving(health_pb2, health_pb2_grpc)
        with grpc.insecure_channel(server.target) as channel:
            stub = pb_grpc.TranslationServiceStub(channel)
            request = pb.TranslateRequest(texts=[b"A man is riding a bike."])
            baseline = [rel.call(stub.Translate, request, timeout=60) for _ in range(6)][1:]
            check(all(b[0] == "OK" for b in baseline), "translations before the attack: OK")
            base = statistics.median(b[1] for b in baseline)
            idle_threads = rel.proc_status(server.proc.pid)["Threads"]

            attack = Attack(server.metrics_port)
            attack.thread.start()
            opened = rel.wait_for(lambda: attack.open_count() >= TRICKLERS + GARBAGE - 20, 10)
            check(opened, f"{attack.open_count()} hostile connections open")
            scrapes, calls, peak_threads, peak_open = [], [], 0, 0
            end = time.monotonic() + seconds

            def scraper():  # once a second, whatever the Translate calls take
                tick = time.monotonic()
                while tick < end:
                    scrapes.append(scrape(server.metrics_port))
                    tick += 1.0
                    time.sleep(max(0.0, tick - time.monotonic()))

            scraping = threading.Thread(target=scraper)
            scraping.start()
            while time.monotonic() < end:
                tick = time.monotonic()
                calls.append(rel.call(stub.Translate, request, timeout=30))
                peak_threads = max(peak_threads, rel.proc_status(server.proc.pid)["Threads"])
                peak_open = max(peak_open, attack.open_count())
                time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
            scraping.join(30)
            attack.stop.set()
            attack.thread.join(30)

            slow = [s for s in scrapes if not s[0] or s[1] > 2.0]
            worst = max(s[1] for s in scrapes)
            check(len(scrapes) >= seconds - 1 and not slow,
                  f"{len(scrapes)} scrapes during the attack, all answered 200 within 2 s "
                  f"(slowest {worst:.3f} s; failed or slow: {slow[:3]})")
            latencies = [c[1] for c in calls]
            codes = {c[0] for c in calls}
            # Generous for a loaded 2-core machine and sanitizer builds: the same call's median
            # before the attack, times 4, plus 1 s.
            # The typical call keeps its latency; one call may meet a busy core (CI's two
            # shared cores run other tests beside this one: a 2.1 s outlier was seen), but
            # none may stall behind the attack.
            bound = 4 * base + 1.0
            check(codes == {"OK"} and statistics.median(latencies) <= bound and max(latencies) <= 5.0,
                  f"{len(calls)} Translate calls during the attack: {codes}, median "
                  f"{statistics.median(latencies) * 1e3:.0f} ms, max {max(latencies) * 1e3:.0f} ms "
                  f"(before: median {base * 1e3:.0f} ms; bound on the median {bound * 1e3:.0f} ms, "
                  f"on every call 5000 ms)")
            lifetimes = attack.trickle_lifetimes
            check(peak_open >= TRICKLERS + GARBAGE - 20 and len(lifetimes) >= TRICKLERS,
                  f"{peak_open} hostile connections open at the peak, {attack.connects} made; "
                  f"{len(lifetimes)} trickling connections closed by the server")
            if lifetimes:
                check(min(lifetimes) >= REQUEST_DEADLINE - 0.5 and max(lifetimes) <= REQUEST_DEADLINE + 2.0
                      and attack.trickle_answers <= {"HTTP/1.1 408 Request Timeout", "closed"},
                      f"a trickler is closed {min(lifetimes):.2f}-{max(lifetimes):.2f} s after it "
                      f"connected (deadline {REQUEST_DEADLINE} s), answered {sorted(attack.trickle_answers)}")
            expected = {0: "400", 1: "431", 2: "405", 3: "431", 4: "408"}
            for kind, want in expected.items():
                got = attack.garbage_answers.get(kind, set())
                check(got and all(a == "closed" or want in a for a in got),
                      f"garbage kind {kind}: answered {sorted(got)} (expected {want} or a close)")
            check(peak_threads <= idle_threads + 8,
                  f"server threads {idle_threads} idle, {peak_threads} at most during the attack")
            # One address at its bound: the next connection from it is closed at once (before
            # any request), while the scraper's address is served.
            held = []
            for _ in range(PER_ADDRESS):
                s = socket.create_connection(("127.0.0.1", server.metrics_port), timeout=5,
                                             source_address=("127.0.0.12", 0))
                s.sendall(b"G")
                held.append(s)
            time.sleep(0.5)  # all accepted
            extra = socket.create_connection(("127.0.0.1", server.metrics_port), timeout=5,
                                             source_address=("127.0.0.12", 0))
            start = time.monotonic()
            try:
                got = extra.recv(100)
            except OSError:  # reset: closed as well
                got = b""
            closed_in = time.monotonic() - start
            ok, took, err = scrape(server.metrics_port)
            check(got == b"" and closed_in < REQUEST_DEADLINE - 1 and ok,
                  f"connection {PER_ADDRESS + 1} from one address closed after {closed_in:.2f} s "
                  f"(at once, not at the deadline); a scrape meanwhile {ok} ({took:.3f} s) {err}")
            for s in held + [extra]:
                s.close()
            ok, took, err = scrape(server.metrics_port)
            check(ok, f"a scrape after the attack ({took:.3f} s) {err}")
        check(server.proc.poll() is None, "the server is alive")
    except Exception as e:
        check(False, f"unexpected {type(e).__name__}: {e}")
    finally:
        if attack:
            attack.stop.set()
        rel.finish(check, server)


if __name__ == "__main__":
    main()
