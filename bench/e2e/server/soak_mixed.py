#!/usr/bin/env python3
"""A soak under mixed and hostile load (issue 56, item 6): nmt-server on the default config
(configs/default.yaml, its model in a repository of its own so that it can be reloaded) for
DURATION seconds under, all at once:
  - nmt-loadgen's closed loop of unary Translate calls (--clients; well-behaved), half of its
    sentences repeats (--repeat-fraction 0.5: the translation cache, on by default, answers
    them) and half never sent before (decoded);
  - a second nmt-loadgen whose calls have 5 ms deadlines (most expire: DEADLINE_EXCEEDED);
  - TranslateStream clients, each stream 20 messages sent one after another's answer;
  - long texts (a paragraph of 40 sentences a call);
  - calls cancelled 0-50 ms after they start;
  - malformed requests (an empty text, beam 1000, an unknown model, bytes that are no
    TranslateRequest), each of which must be refused with its code;
  - a model reload every minute (the model's config.json touched, then ModelControl/Reload:
    its engines are built again while requests go on);
  - on the HTTP API (http.port) a population of slow clients trickling half-sent requests a
    byte a second (reconnecting when closed), beside a loop of well-behaved LibreTranslate
    /translate calls.
Every 10 s it samples the server's RSS, threads and descriptors (/proc) and its GPU memory
(nvidia-smi, per process, and the engines' own nmt_gpu_memory_bytes; absent on the CPU). After the warm-up each series' least-squares
slope, as a fraction of its mean per minute, must stay under --max-slope (1%); every
well-behaved request (the closed loop, the streams' messages, the long texts, the HTTP
calls) must be answered OK; the server must not crash and must exit 0 on SIGTERM.

Threads: gRPC core keeps pools that grow on demand and never shrink before shutdown
(gRPC 1.51, Debian's). Each sample counts the server's threads by name (/proc/PID/task/*/comm)
besides the total:
  - "default-executor" and "resolver-executor" (src/core/lib/iomgr/executor.cc): each starts
    with one thread and adds one whenever a closure is queued on a thread that already holds
    more than two (MAX_DEPTH), up to 2 x gpr_cpu_num_cores() (sysconf(_SC_NPROCESSORS_CONF)):
    BOUNDED, by twice the machine's cores. Only name resolution runs on the resolver's, which
    a server does not do: it keeps its one thread;
  - "grpc_global_timer" (src/core/lib/iomgr/timer_manager.cc): a thread is added whenever the
    last idle timer thread starts running expired timers; the code has no ceiling, so it is
    bounded only by how many timer callbacks run at once (NOT bounded by a constant).
So that the measured window sees the pools at rest, the warm-up is a burst over the same paths,
harder: the load below plus --burst-clients unary clients on --burst-connections connections
(many calls contending for each HTTP/2 transport),
--burst-deadline-clients more 5 ms deadlines (timers firing together), and a reload every
--burst-reload-every s (a reload slows the steps and bunches the answers). It lasts at least
--warmup s and until every bounded pool is at its ceiling (at most half the run); the window
starts at the first sample --settle s (60) after it: when the burst ends, the decode loops it
kept busy go idle and give their memory back, and the load that remains grows it again to its
own working set within a minute or two (reliability run 8: the engines' gauge 194 MiB at the
burst's end, 222 70 s later, 216-233 from then on), which a window from the burst's end would
read as growth. A window of fewer than 3 samples fails (a run too short for its warm-up). A RESULT line "soak-thread-pools" names each pool, its
ceiling, where it stood when the window began and at the end, and whether the window began
with the bounded pools full.

RESULT lines (JSON) go to stdout and OUT_DIR/results.jsonl: one per sampled series (first,
last, mean, slope per minute, relative slope, pass), one for the requests (counts by kind
and code, unanswered well-behaved), one verdict. OUT_DIR/samples.jsonl holds the samples,
OUT_DIR/server.log the server's log. Exit 0 iff every bar holds. --reanalyze prints the series'
verdicts again from OUT_DIR/samples.jsonl with another --settle or --max-slope.

No generated stubs: the messages are encoded by hand (as bench/gpu_faults.py does), so that
only python3-grpcio is needed on the machine.

  soak_mixed.py OUT_DIR [--server nmt-server] [--loadgen nmt-loadgen] [--device cuda|cpu]
                [--duration 510] [--warmup 120] [--clients 128] [--streams 8]
                [--slow-http 200] [--max-slope 0.01] [--burst-clients 512] [--burst-connections 4]
                [--settle 60]
  soak_mixed.py OUT_DIR --reanalyze [--settle S] [--max-slope F]
GPU (about 9 minutes: the longest command the GPU machine runs is 10):
  soak_mixed.py OUT --device cuda --duration 510   (8.5 minutes: with the start, the drain and
  the verdict it fits a 600 s device call; NMT_SHARED: where data/multi30k is, default ../shared)
CPU, 30 minutes, outside CI:
  soak_mixed.py OUT --device cpu --duration 1800 --clients 8 --streams 2 --slow-http 50 \
                --burst-clients 128 --burst-connections 2 --burst-deadline-clients 16
What the reloads alone keep resident (no load; a reload and one request each time, RSS after each;
a RESULT line, exit 0):
  soak_mixed.py OUT --device cpu --idle-reloads 20
"""
import argparse
import json
import os
import random
import selectors
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from protowire import field, read_varint, varint  # noqa: E402  (bench/protowire.py)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
MODEL = "m30k-en-de-small"
# The sampled series whose slopes are bars (the engines' gauge and nvidia-smi's on the GPU only).
SERIES = ("rss_kb", "threads", "fds", "gpu_mib", "engine_gpu_mib")
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
TRANSLATE = "/nmt.v1.TranslationService/Translate"
STREAM = "/nmt.v1.TranslationService/TranslateStream"
RELOAD = "/nmt.v1.ModelControl/Reload"
TRICKLE = b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Slow: " + b"a" * 4096


# --- protobuf by hand: nmt.v1.TranslateRequest {model 1, texts 2, options 3 {beam_size 1}}


def translate_request(texts, beam=4, model=""):
    body = field(1, model.encode()) if model else b""
    for t in texts:
        body += field(2, t.encode() if isinstance(t, str) else t)
    return body + field(3, varint(1 << 3) + varint(beam))


def stream_status(message):
    """TranslateStreamResponse.status_code (field 2, varint; absent = 0)."""
    i = 0
    while i < len(message):
        key, i = read_varint(message, i)
        number, kind = key >> 3, key & 7
        if kind == 0:
            value, i = read_varint(message, i)
            if number == 2:
                return value
        elif kind == 2:
            length, i = read_varint(message, i)
            i += length
        else:
            return -1
    return 0


def reload_changed(message):
    """ReloadResponse.changed (field 3): the reloaded models' names."""
    names, i = [], 0
    while i < len(message):
        key, i = read_varint(message, i)
        length, i = read_varint(message, i)
        if key >> 3 == 3:
            names.append(message[i:i + length].decode())
        i += length
    return names


class Tally:
    """Counts by (kind, outcome), from every thread."""

    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}

    def add(self, kind, outcome, n=1):
        with self.lock:
            self.counts.setdefault(kind, {})
            self.counts[kind][outcome] = self.counts[kind].get(outcome, 0) + n

    def get(self, kind):
        with self.lock:
            return dict(self.counts.get(kind, {}))


def code_name(e):
    return e.code().name if isinstance(e, grpc.RpcError) and e.code() else type(e).__name__


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "Threads"):
                out[key] = int(value.split()[0])
    out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    return out


# gRPC core's pools that grow on demand (the docstring says how), by the 15-character thread
# name Linux keeps: their ceilings (None where gRPC sets none), and whether the warm-up must
# fill them. Only name resolution runs on the resolver executor, which a server does not do:
# it keeps its one thread, and is watched, not waited for.
GRPC_POOLS = {
    "default-executo": (2 * os.sysconf("SC_NPROCESSORS_CONF"), True),
    "resolver-execut": (2 * os.sysconf("SC_NPROCESSORS_CONF"), False),
    "grpc_global_tim": (None, False),
}


def thread_names(pid):
    """The process's threads counted by name (/proc/PID/task/*/comm)."""
    names = {}
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/comm") as f:
                name = f.read().strip()
        except OSError:  # a thread that ended while listed
            continue
        names[name] = names.get(name, 0) + 1
    return names


def bounded_pools_full(names):
    return all(names.get(name, 0) >= ceiling for name, (ceiling, fill) in GRPC_POOLS.items() if fill)


def gpu_memory_mib(pid):
    """The process's GPU memory (MiB, all GPUs) per nvidia-smi; where nvidia-smi does not see
    the process (a container's pid namespace), the GPUs' memory in use, which on the
    dedicated machine is the server's; None without nvidia-smi."""
    if not shutil.which("nvidia-smi"):
        return None
    r = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                       capture_output=True, text=True, timeout=30)
    total, seen = 0, False
    for line in r.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0] == str(pid):
            total += int(parts[1])
            seen = True
    if seen:
        return total
    r = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                       capture_output=True, text=True, timeout=30)
    return sum(int(v) for v in r.stdout.split() if v.isdigit())


def engine_gpu_mib(metrics_port):
    """The engines' own account of their device memory (nmt_gpu_memory_bytes, MiB)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
            text = r.read().decode()
    except OSError:
        return None
    return round(sum(float(line.split()[-1]) for line in text.splitlines()
                     if line.startswith("nmt_gpu_memory_bytes{")) / 2**20, 1)


def slope_per_minute(points):
    """Least-squares slope of (seconds, value) in value per minute."""
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    return 0.0 if var == 0 else 60 * sum((t - mt) * (v - mv) for t, v in points) / var


class SlowHttp:
    """`count` connections trickling a half-sent request a byte a second from one thread,
    each reconnecting when the server closes it; 40 from each of the loopback addresses
    127.0.0.2, .3, ... (within http.max_connections_per_address, 64: the well-behaved HTTP
    calls come from 127.0.0.1)."""

    def __init__(self, port, count, stop):
        self.port, self.count, self.stop = port, count, stop
        self.sel = selectors.DefaultSelector()
        self.closed_by_server = 0
        self.answers = {}

    def open(self, address):
        s = socket.socket()
        s.bind((address, 0))
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", self.port))
        self.sel.register(s, selectors.EVENT_READ, {"sent": 0, "next": time.monotonic(), "got": b"",
                                                    "address": address})

    def run(self):
        # Opened over the first 10 s, so that their deadlines (and reconnections) do not all
        # fall together and the 10 s samples of descriptors see a steady population.
        t0 = time.monotonic()
        pending = [(t0 + 10.0 * i / self.count, f"127.0.0.{2 + i // 40}") for i in range(self.count)]
        while not self.stop.is_set():
            while pending and pending[0][0] <= time.monotonic():
                self.open(pending.pop(0)[1])
            for key, _ in self.sel.select(timeout=0.1):
                try:
                    data = key.fileobj.recv(65536)
                except OSError:
                    data = b""
                if data:
                    key.data["got"] += data
                    continue
                line = key.data["got"].split(b"\r\n", 1)[0].decode(errors="replace") or "closed"
                self.answers[line] = self.answers.get(line, 0) + 1
                self.closed_by_server += 1
                self.sel.unregister(key.fileobj)
                key.fileobj.close()
                self.open(key.data["address"])
            now = time.monotonic()
            for key in list(self.sel.get_map().values()):
                st = key.data
                if now >= st["next"] and st["sent"] < len(TRICKLE):
                    try:
                        st["sent"] += key.fileobj.send(TRICKLE[st["sent"]:st["sent"] + 1])
                    except OSError:
                        pass
                    st["next"] = now + 1.0
        for key in list(self.sel.get_map().values()):
            key.fileobj.close()


def series_results(after, max_slope):
    """One RESULT record per sampled series over the window's samples: its least-squares slope
    as a fraction of its mean per minute against max_slope; a failing one when the window has
    fewer than 3 samples (no slope to judge)."""
    if len(after) < 3:
        return [{"name": "soak-window", "samples": len(after), "pass": False,
                 "why": "fewer than 3 samples after the warm-up and --settle: run longer"}]
    records = []
    for series in SERIES:
        points = [(s["t"], s[series]) for s in after if s.get(series) is not None]
        if len(points) < 3:
            continue
        mean = statistics.mean(v for _, v in points)
        slope = slope_per_minute(points)
        relative = slope / mean if mean else 0.0
        records.append({"name": f"soak-{series}", "samples": len(points), "first": points[0][1], "last": points[-1][1],
                        "mean": round(mean, 1), "max": max(v for _, v in points), "slope_per_min": round(slope, 3),
                        "relative_slope_per_min": round(relative, 5), "bar": max_slope,
                        "pass": abs(relative) < max_slope})
    return records


def window_start_after(burst_end_s, settle_s):
    """Where the measured window starts: settle_s after the warm-up burst ended."""
    return burst_end_s + settle_s + 0.1


def reanalyze(a):
    """--reanalyze: the series' verdicts again from OUT_DIR/samples.jsonl, with --settle and
    --max-slope (the burst's end: the sample at which the sampler ended it, its last)."""
    samples = [json.loads(line) for line in open(os.path.join(a.out, "samples.jsonl")) if line.strip()]
    start = window_start_after(max(s["t"] for s in samples if s.get("burst")), a.settle)
    ok = True
    for record in series_results([s for s in samples if s["t"] >= start], a.max_slope):
        record.update(reanalyzed=True, settle_s=a.settle, window_start_s=round(start, 1))
        ok &= record["pass"]
        print("RESULT " + json.dumps(record))
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--server", default="nmt-server")
    ap.add_argument("--loadgen", default="nmt-loadgen")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--duration", type=int, default=510)
    ap.add_argument("--warmup", type=int, default=0, help="default: a quarter of the run, 30 to 120 s")
    ap.add_argument("--settle", type=int, default=60,
                    help="seconds after the burst before the window (the docstring says why)")
    ap.add_argument("--reanalyze", action="store_true", help="the verdicts again from OUT_DIR/samples.jsonl")
    ap.add_argument("--clients", type=int, default=128)
    ap.add_argument("--deadline-clients", type=int, default=32)
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--slow-http", type=int, default=200)
    ap.add_argument("--reload-every", type=int, default=60)
    ap.add_argument("--sample-every", type=int, default=10)
    ap.add_argument("--max-slope", type=float, default=0.01)
    ap.add_argument("--idle-reloads", type=int, default=0, help="only this many reloads, no load (RSS after each)")
    ap.add_argument("--burst-clients", type=int, default=512, help="the warm-up burst's extra closed-loop clients")
    ap.add_argument("--burst-connections", type=int, default=4, help="the connections they share")
    ap.add_argument("--burst-deadline-clients", type=int, default=64, help="the burst's extra 5 ms deadlines")
    ap.add_argument("--burst-reload-every", type=int, default=15, help="the burst's reloads")
    a = ap.parse_args()
    if a.reanalyze:
        sys.exit(reanalyze(a))
    warmup = a.warmup or min(120, max(30, a.duration // 4))
    os.makedirs(a.out, exist_ok=True)
    results_path = os.path.join(a.out, "results.jsonl")
    # NMT_COMMIT first: a copy of the tree (the GPU machine's) may carry an older .git.
    commit = os.environ.get("NMT_COMMIT") or subprocess.run(
        ["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip() or "unknown"
    device_name = "cpu"
    if a.device == "cuda" and shutil.which("nvidia-smi"):
        device_name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                     capture_output=True, text=True).stdout.splitlines()[0].strip()
    stamp = {"device": device_name, "commit": commit, "date": time.strftime("%Y-%m-%d", time.gmtime()),
             "duration_s": a.duration, "warmup_s": warmup, "server_device": a.device}

    def result(record):
        record = {**record, **stamp}
        print("RESULT " + json.dumps(record), flush=True)
        with open(results_path, "a") as f:
            f.write(json.dumps(record) + "\n")

    # The default config, its model in a repository of its own (touched to be reloaded).
    tmp = tempfile.mkdtemp(prefix="nmt-soak-")
    repo_dir = os.path.join(tmp, "models")
    shutil.copytree(os.path.join(REPO, "models", MODEL), os.path.join(repo_dir, MODEL))
    with open(os.path.join(REPO, "configs", "default.yaml")) as f:
        config = f.read().replace("path: ../models", f"path: {repo_dir}")
    config_path = os.path.join(tmp, "config.yaml")
    with open(config_path, "w") as f:
        f.write(config)
    # The closed loop's input: Multi30k's test2016 (1,000 lines) in $NMT_SHARED (as the other
    # scripts here), else the few sentences above; its repeats come from the first lines.
    shared = os.environ.get("NMT_SHARED", os.path.join(REPO, "..", "shared"))
    sentences = os.path.join(shared, "data", "multi30k", "test_2016_flickr.en.gz")
    repeat_pool = 100
    if not os.path.exists(sentences):
        sentences = os.path.join(tmp, "sentences.txt")
        with open(sentences, "w") as f:
            f.write("\n".join(SENTENCES) + "\n")
        repeat_pool = len(SENTENCES) // 2
    port, metrics_port, http_port = free_port(), free_port(), free_port()
    log = open(os.path.join(a.out, "server.log"), "w")
    server = subprocess.Popen([a.server, "--config", config_path, "--device", a.device, "--host", "127.0.0.1",
                               "--port", str(port), "--metrics-port", str(metrics_port), "--http-host", "127.0.0.1",
                               "--http-port", str(http_port), "--log-level", "warn"],
                              stdout=log, stderr=subprocess.STDOUT)
    target = f"127.0.0.1:{port}"
    tally = Tally()
    stop = threading.Event()
    threads, samples = [], []
    ok = True
    try:
        channel = grpc.insecure_channel(target)
        translate = channel.unary_unary(TRANSLATE)
        stream = channel.stream_stream(STREAM)
        reload_rpc = channel.unary_unary(RELOAD)
        end_wait = time.monotonic() + 240
        while time.monotonic() < end_wait:
            try:
                translate(translate_request(["Hello."]), timeout=60, wait_for_ready=True)
                break
            except grpc.RpcError:
                if server.poll() is not None:
                    raise RuntimeError("the server exited at start: see server.log")
                time.sleep(0.5)
        if a.idle_reloads:
            rss_mb = [proc_status(server.pid)["VmRSS"] // 1024]
            for _ in range(a.idle_reloads):
                os.utime(os.path.join(repo_dir, MODEL, "config.json"))
                reload_rpc(b"", timeout=300)
                translate(translate_request(["Two dogs play in the snow."]), timeout=60)
                time.sleep(0.3)
                rss_mb.append(proc_status(server.pid)["VmRSS"] // 1024)
            result({"name": "soak-idle-reloads", "reloads": a.idle_reloads, "rss_mb": rss_mb,
                    "growth_mb": rss_mb[-1] - rss_mb[0], "pass": True})
            server.terminate()
            server.wait(timeout=120)
            return
        start = time.monotonic()
        end = start + a.duration
        burst_over, burst_end, bursts = threading.Event(), [], []

        def loop(kind, fn):
            def run():
                while not stop.is_set() and time.monotonic() < end:
                    fn(kind)
            t = threading.Thread(target=run, daemon=True)
            threads.append(t)
            t.start()

        def unary(kind, request, timeout):
            try:
                translate(request, timeout=timeout)
                tally.add(kind, "OK")
            except grpc.RpcError as e:
                tally.add(kind, code_name(e))

        def one_stream(kind):
            answers = []
            gate = threading.Semaphore(1)

            def messages():
                for m in range(20):
                    gate.acquire()
                    if stop.is_set():
                        return
                    yield translate_request([random.choice(SENTENCES)])
            try:
                for message in stream(messages(), timeout=120):
                    answers.append(stream_status(message))
                    gate.release()
                tally.add(kind, "OK", sum(1 for s in answers if s == 0))
                tally.add(kind, "not OK", sum(1 for s in answers if s != 0))
                tally.add(kind, "unanswered", 20 - len(answers))
            except grpc.RpcError as e:
                tally.add(kind, "stream " + code_name(e))
                tally.add(kind, "unanswered", 20 - len(answers))

        def cancelled(kind):
            future = translate.future(translate_request([random.choice(SENTENCES)]), timeout=30)
            time.sleep(random.uniform(0, 0.05))
            future.cancel()
            try:
                future.result()
                tally.add(kind, "OK")
            except grpc.FutureCancelledError:
                tally.add(kind, "CANCELLED")
            except grpc.RpcError as e:
                tally.add(kind, code_name(e))

        malformed = [("empty text", translate_request([""]), "INVALID_ARGUMENT"),
                     ("beam 1000", translate_request(["A man."], beam=1000), "INVALID_ARGUMENT"),
                     ("unknown model", translate_request(["A man."], model="no-such-model"), "NOT_FOUND"),
                     ("not a message", b"\xff\xff\xff\xff", "INVALID_ARGUMENT")]

        def bad(kind):
            name, request, want = random.choice(malformed)
            try:
                translate(request, timeout=30)
                tally.add(kind, f"{name}: OK")
            except grpc.RpcError as e:
                tally.add(kind, f"{name}: {code_name(e)}")
            time.sleep(0.05)

        long_text = " ".join(SENTENCES[i % len(SENTENCES)] for i in range(40))

        def http_call(kind):
            body = json.dumps({"q": random.choice(SENTENCES), "source": "en", "target": "de"}).encode()
            req = urllib.request.Request(f"http://127.0.0.1:{http_port}/translate", data=body,
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=30) as r:
                    r.read()
                    tally.add(kind, str(r.status) if r.status != 200 else "OK")
            except urllib.error.HTTPError as e:
                tally.add(kind, str(e.code))
            except OSError as e:
                tally.add(kind, type(e).__name__)

        def reloader(kind):
            if stop.wait(a.reload_every if burst_over.is_set() else a.burst_reload_every) or time.monotonic() >= end:
                return
            if not burst_over.is_set():
                kind = "burst reload"
            os.utime(os.path.join(repo_dir, MODEL, "config.json"))
            t0 = time.monotonic()
            try:
                changed = reload_changed(reload_rpc(b"", timeout=300))
                tally.add(kind, "reloaded" if MODEL in changed else f"not changed: {changed}")
            except grpc.RpcError as e:
                tally.add(kind, code_name(e))
            tally.add(kind, "seconds", round(time.monotonic() - t0))

        for _ in range(a.streams):
            loop("streams", one_stream)
        loop("long texts", lambda k: unary(k, translate_request([long_text]), 120))
        for _ in range(2):
            loop("cancelled", cancelled)
        loop("malformed", bad)
        loop("http", http_call)
        loop("reload", reloader)
        slow = SlowHttp(http_port, a.slow_http, stop)
        slow_thread = threading.Thread(target=slow.run, daemon=True)
        slow_thread.start()

        def sampler():
            while not stop.is_set():
                t = time.monotonic() - start
                # The window ends with the load: the loadgens stop at --duration and their
                # connections close (a sample then read the descriptors 410 -> 250, a slope
                # of a load leaving, not of the server).
                if t > a.duration - 1:
                    return
                try:
                    s = proc_status(server.pid)
                except OSError:
                    return
                try:
                    names = thread_names(server.pid)
                except OSError:
                    return
                s = {"t": round(t, 1), "rss_kb": s["VmRSS"], "threads": s["Threads"], "fds": s["fds"],
                     "gpu_mib": gpu_memory_mib(server.pid) if a.device == "cuda" else None,
                     "engine_gpu_mib": engine_gpu_mib(metrics_port) if a.device == "cuda" else None,
                     "pools": {name: names.get(name, 0) for name in GRPC_POOLS}, "burst": not burst_over.is_set()}
                samples.append(s)
                with open(os.path.join(a.out, "samples.jsonl"), "a") as f:
                    f.write(json.dumps(s) + "\n")
                # The warm-up burst ends once it has lasted --warmup s and every bounded pool is
                # at its ceiling, or at half the run; the window starts at the next sample.
                if not burst_over.is_set() and t >= warmup and (bounded_pools_full(names) or t >= a.duration / 2):
                    for p in bursts:
                        p.terminate()
                    burst_end.append(t)
                    burst_over.set()
                stop.wait(a.sample_every)

        common = ["--target", target, "--input", sentences, "--beam", "4", "--duration", str(a.duration), "--json"]
        # The warm-up burst (the docstring says why): ended by the sampler.
        bursts += [subprocess.Popen([a.loadgen, *common, "--clients", str(a.burst_clients), "--connections",
                                    str(a.burst_connections), "--client-threads", "4", "--timeout-ms", "30000",
                                    "--repeat-fraction", "0.5", "--repeat-pool", str(repeat_pool)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
                  subprocess.Popen([a.loadgen, *common, "--clients", str(a.burst_deadline_clients), "--timeout-ms", "5"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
        sampling = threading.Thread(target=sampler, daemon=True)
        sampling.start()
        good = subprocess.Popen([a.loadgen, *common, "--clients", str(a.clients), "--timeout-ms", "30000",
                                 "--repeat-fraction", "0.5", "--repeat-pool", str(repeat_pool)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        tight = subprocess.Popen([a.loadgen, *common, "--clients", str(a.deadline_clients), "--timeout-ms", "5"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        good_out, good_err = good.communicate(timeout=a.duration + 300)
        tight_out, _ = tight.communicate(timeout=a.duration + 300)
        stop.set()
        for t in threads:
            t.join(150)
        slow_thread.join(30)
        sampling.join(30)
        for p in bursts:
            if p.poll() is None:
                p.terminate()
            p.wait(timeout=60)
        good_report = json.loads(good_out) if good_out.strip().startswith("{") else {}
        tight_report = json.loads(tight_out) if tight_out.strip().startswith("{") else {}

        # The series after the warm-up burst.
        window_start = window_start_after(burst_end[0], a.settle) if burst_end else warmup
        after = [s for s in samples if s["t"] >= window_start]
        if after:
            first, last = after[0]["pools"], samples[-1]["pools"]
            full = bounded_pools_full(first)
            result({"name": "soak-thread-pools", "window_start_s": round(window_start, 1),
                    "pools": {name: {"ceiling": ceiling, "filled_by_warmup": fill, "at_window_start": first.get(name, 0),
                                     "at_end": last.get(name, 0)} for name, (ceiling, fill) in GRPC_POOLS.items()},
                    "bounded_pools_full_at_window_start": full,
                    "burst": {"clients": a.burst_clients, "connections": a.burst_connections,
                              "deadline_clients": a.burst_deadline_clients, "reloads": tally.get("burst reload")},
                    "pass": full})
            ok &= full
        for record in series_results(after, a.max_slope):
            ok &= record["pass"]
            result(record)

        # The well-behaved requests: every one answered OK.
        good_errors = good_report.get("errors")
        streams, longs, http = tally.get("streams"), tally.get("long texts"), tally.get("http")
        unanswered = (good_errors if good_errors is not None else 1) + \
            sum(n for k, n in streams.items() if k != "OK") + \
            sum(n for k, n in longs.items() if k != "OK") + sum(n for k, n in http.items() if k != "OK")
        malformed_counts = tally.get("malformed")
        wrong_refusals = {k: n for k, n in malformed_counts.items()
                          if not any(k == f"{name}: {want}" for name, _, want in malformed)}
        tight_kinds = tight_report.get("error_kinds", {})
        tight_other = {k: n for k, n in tight_kinds.items() if not k.startswith("4:")}
        reloads = tally.get("reload")
        alive = server.poll() is None
        requests_ok = (unanswered == 0 and not wrong_refusals and alive and reloads.get("reloaded", 0) >= 1
                       and good_report.get("requests", 0) > 0 and not tight_other)
        ok &= requests_ok
        result({"name": "soak-requests", "unanswered_well_behaved": unanswered,
                "closed_loop": {"clients": a.clients, "input": sentences, "requests": good_report.get("requests"),
                                "errors": good_errors, "error_kinds": good_report.get("error_kinds"),
                                "requests_per_s": good_report.get("requests_per_s"),
                                "latency_ms": good_report.get("latency_ms"), "stderr": good_err[-300:]},
                "deadlines_5ms": {"clients": a.deadline_clients, "answered_ok": tight_report.get("requests"),
                                  "error_kinds": tight_kinds},
                "streams": streams, "long_texts": longs, "http": http, "cancelled": tally.get("cancelled"),
                "malformed": malformed_counts, "malformed_wrong_code": wrong_refusals, "reloads": reloads,
                "slow_http": {"population": a.slow_http, "closed_by_server": slow.closed_by_server,
                              "answers": slow.answers},
                "server_alive": alive, "pass": requests_ok})
        rc = None
        if alive:
            server.terminate()
            rc = server.wait(timeout=120)
        ok &= rc == 0
        result({"name": "soak", "exit_code_on_sigterm": rc, "pass": bool(ok)})
    except Exception as e:
        ok = False
        result({"name": "soak", "error": f"{type(e).__name__}: {e}", "pass": False})
    finally:
        stop.set()
        if server.poll() is None:
            server.kill()
            server.wait()
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
