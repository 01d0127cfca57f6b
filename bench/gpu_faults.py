#!/usr/bin/env python3
"""Faults of the served decode loop on a GPU (issue 14), against the real nmt-server:

  storm  A request storm of 10x the server's capacity (batching.max_active_sentences plus
         max_queue_sentences, one sentence a request) from closed-loop clients, after a 1x
         run: refusals must be RESOURCE_EXHAUSTED and fast, and the admitted requests' p99
         must stay near the 1x p99 (the queue bounds it).
  oom    Device memory exhausted inside the running loop: the server restarted with
         models[].device_memory_limit_mb at what it held after the storm plus 16 MiB, so that
         the decoder caches cannot grow past their first size. Long requests (beam 4, at least
         100 tokens) fail RESOURCE_EXHAUSTED when they reach the growth; short requests
         decoding beside them all the while are answered OK; the loop serves afterwards.

Runs where only grpcio is installed (the GPU machine has no protoc): requests are encoded
by hand. Prints one JSON object per phase and a verdict; exits 1 when a check failed.

    gpu_faults.py --server build/bin/nmt-server --model models/m30k-en-de-small [--seconds 8]
"""
import argparse
import asyncio
import json
import math
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from protowire import field, varint  # noqa: E402  (bench/protowire.py)

SENTENCES = [b"The weather is nice today.", b"Where is the train station?",
             b"My brother plays the piano every evening.", b"We are going to the market.",
             b"She opened the window because it was warm.", b"The children laugh in the garden.",
             b"Please close the door behind you.", b"A small boat crosses the lake."]
TRANSLATE = "/nmt.v1.TranslationService/Translate"




def request(text, beam, max_length=None, min_length=None):
    """nmt.v1.TranslateRequest: texts = 2, options = 3 (beam_size = 1, max_decoding_length =
    4, min_decoding_length = 5)."""
    options = varint(1 << 3) + varint(beam)
    if max_length:
        options += varint(4 << 3) + varint(max_length)
    if min_length:
        options += varint(5 << 3) + varint(min_length)
    return field(2, text) + field(3, options)


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(math.ceil(q * len(values))) - 1)] if values else None


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, binary, model, batching, memory_limit_mb=0, device="cuda"):
        self.dir = tempfile.mkdtemp(prefix="nmt-gpu-faults-")
        config = os.path.join(self.dir, "config.yaml")
        with open(config, "w") as f:
            f.write("batching:\n" + "".join(f"  {k}: {v}\n" for k, v in batching.items()))
            f.write(f"models:\n  - name: m\n    path: {os.path.abspath(model)}\n    device: {device}\n    workers: 1\n"
                    f"    device_memory_limit_mb: {memory_limit_mb}\n")
        self.port, self.metrics_port = free_port(), free_port()
        self.log = open(os.path.join(self.dir, "server.log"), "w+")
        self.proc = subprocess.Popen([binary, "--config", config, "--host", "127.0.0.1", "--port", str(self.port),
                                      "--metrics-port", str(self.metrics_port), "--log-level", "error"],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        self.target = f"127.0.0.1:{self.port}"

    def wait_serving(self, timeout=120):
        end = time.monotonic() + timeout
        with grpc.insecure_channel(self.target) as ch:
            check = ch.unary_unary("/grpc.health.v1.Health/Check", request_serializer=None, response_deserializer=None)
            while time.monotonic() < end and self.proc.poll() is None:
                try:
                    if check(b"", timeout=1) == b"\x08\x01":  # status: SERVING
                        return
                except grpc.RpcError:
                    pass
                time.sleep(0.2)
        self.log.seek(0)
        raise RuntimeError("nmt-server never became SERVING:\n" + self.log.read()[-3000:])

    def metric(self, name):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name):
                    return float(line.split()[-1])
        return None

    def stop(self):
        self.proc.terminate()
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)


def make_request(mode, i, n):
    """(request bytes, kind) of client i's n-th call in a phase."""
    if mode == "short":  # beam 4, up to 32 tokens
        return request(SENTENCES[(i + n) % len(SENTENCES)], 4, 32), "short"
    if mode == "mixed" and i < 4:  # beam 4, at least 100 tokens: past the first cache size
        return request(SENTENCES[i], 4, 120, 100), "long"
    return request(SENTENCES[(i + n) % len(SENTENCES)], 1, 24), "short"  # greedy, up to 24


async def closed_loop(target, first, clients, seconds, mode, channels):
    """(code, seconds, kind) of every call of clients first..first+clients-1, and the first
    error message of each (kind, code)."""
    chans = [grpc.aio.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])
             for _ in range(channels)]
    calls = [c.unary_unary(TRANSLATE, request_serializer=None, response_deserializer=None) for c in chans]
    results, details = [], {}
    end = time.monotonic() + seconds

    async def client(i):
        n = 0
        while time.monotonic() < end:
            body, kind = make_request(mode, i, n)
            n += 1
            start = time.monotonic()
            try:
                await calls[i % channels](body, timeout=60)
                code = "OK"
            except grpc.aio.AioRpcError as e:
                code = e.code().name
                details.setdefault((kind, code), e.details())
            results.append((code, time.monotonic() - start, kind))

    await asyncio.gather(*(client(first + i) for i in range(clients)))
    for c in chans:
        await c.close()
    return results, details


def worker(job):
    return asyncio.run(closed_loop(*job))


def load(target, clients, seconds, mode, processes=8):
    """Closed-loop clients spread over client processes (one Python event loop would itself
    be the bottleneck at a thousand clients). Returns (results, details)."""
    processes = max(1, min(processes, clients))
    share = [clients // processes + (1 if p < clients % processes else 0) for p in range(processes)]
    jobs, first = [], 0
    for n in share:
        jobs.append((target, first, n, seconds, mode, max(1, min(8, n // 64 + 1))))
        first += n
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        parts = pool.map(worker, jobs)
    results, details = [], {}
    for r, d in parts:
        results += r
        for k, v in d.items():
            details.setdefault(k, v)
    return results, details


def summary(results, details, kind=None):
    rows = [r for r in results if kind is None or r[2] == kind]
    out = {"calls": len(rows)}
    for code in sorted({r[0] for r in rows}):
        lat = [r[1] * 1e3 for r in rows if r[0] == code]
        out[code] = {"n": len(lat), "p50_ms": round(percentile(lat, 0.5), 2),
                     "p99_ms": round(percentile(lat, 0.99), 2), "max_ms": round(max(lat), 2)}
        for (k, c), text in details.items():
            if c == code and (kind is None or k == kind):
                out[code]["detail"] = text[:160]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--device", default="cuda", help="cpu: a smoke run of the script itself")
    a = ap.parse_args()
    failures = []

    def check(ok, what):
        print(("ok    " if ok else "FAIL  ") + what, flush=True)
        if not ok:
            failures.append(what)

    batching = {"max_active_sentences": 64, "max_active_rows": 256, "max_queue_sentences": 64}
    capacity = batching["max_active_sentences"] + batching["max_queue_sentences"]

    server = Server(a.server, a.model, batching, device=a.device)
    try:
        server.wait_serving()
        load(server.target, 32, 2, "short", processes=1)  # warm-up: graphs, allocator
        # The baseline: as many clients as the loop has sentence slots (nothing waits long).
        runs = {}
        for name, clients in (("baseline", batching["max_active_sentences"]), ("10x", 10 * capacity)):
            runs[name] = summary(*load(server.target, clients, a.seconds, "short"))
            print(json.dumps({"phase": "storm", "run": name, "clients": clients, "capacity": capacity,
                              "seconds": a.seconds, **runs[name]}), flush=True)
        base, ten = runs["baseline"], runs["10x"]
        check(set(base) <= {"calls", "OK"}, f"baseline ({batching['max_active_sentences']} clients): all OK")
        check(set(ten) <= {"calls", "OK", "RESOURCE_EXHAUSTED"} and "RESOURCE_EXHAUSTED" in ten,
              f"10x capacity ({10 * capacity} clients): only OK and RESOURCE_EXHAUSTED")
        if "RESOURCE_EXHAUSTED" in ten and "OK" in ten and "OK" in base:
            check(ten["RESOURCE_EXHAUSTED"]["p99_ms"] < 100,
                  f"refusals are fast: p99 {ten['RESOURCE_EXHAUSTED']['p99_ms']} ms (client-side)")
            check(ten["OK"]["p99_ms"] <= 4 * base["OK"]["p99_ms"] + 50,
                  f"admitted p99 bounded: {ten['OK']['p99_ms']} ms at 10x vs {base['OK']['p99_ms']} ms baseline")
        held = server.metric("nmt_gpu_memory_bytes") or 0
    finally:
        print(json.dumps({"phase": "storm server exit", "rc": server.stop()}), flush=True)

    limit_mb = int(math.ceil(held / (1 << 20))) + 16
    server = Server(a.server, a.model, batching, memory_limit_mb=limit_mb, device=a.device)
    try:
        server.wait_serving()
        res, det = load(server.target, 36, a.seconds, "mixed", processes=2)
        long_sum, short_sum = summary(res, det, "long"), summary(res, det, "short")
        print(json.dumps({"phase": "oom", "memory_limit_mb": limit_mb, "held_before_mb": round(held / (1 << 20), 1),
                          "long": long_sum, "short": short_sum}), flush=True)
        check("RESOURCE_EXHAUSTED" in long_sum and set(long_sum) <= {"calls", "RESOURCE_EXHAUSTED"},
              f"long requests past the cache growth: RESOURCE_EXHAUSTED ({long_sum})")
        check(set(short_sum) == {"calls", "OK"},
              f"short requests decoding beside them all the while: all OK ({short_sum})")
        after = summary(*load(server.target, 8, 2, "tight", processes=1))
        check(after.keys() == {"calls", "OK"}, f"the loop serves afterwards: {after}")
        print(json.dumps({"phase": "oom after", **after,
                          "gpu_memory_mb": round((server.metric("nmt_gpu_memory_bytes") or 0) / (1 << 20), 1)}),
              flush=True)
    finally:
        rc = server.stop()
        print(json.dumps({"phase": "oom server exit", "rc": rc}), flush=True)
        check(rc == 0, f"exit 0 on SIGTERM ({rc})")
    print(f"\n{len(failures)} failed checks")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
