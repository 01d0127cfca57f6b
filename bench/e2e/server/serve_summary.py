#!/usr/bin/env python3
"""Markdown summary of serve_bench.sh's results.jsonl: served sentences/s against the engine's
offline throughput at the matching batch size, latency against the offline batch-1 p50.
usage: serve_summary.py results.jsonl"""
import json
import sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
offline = {r["batch"]: r for r in rows if r.get("engine") == "nmt-serve"}
served = [r for r in rows if r.get("engine") == "nmt-server"]
b1 = offline.get(1, {}).get("p50_ms")
b1_p99 = offline.get(1, {}).get("p99_ms")
print(f"offline: " + ", ".join(
    f"batch {b} {r['sentences_per_s']:,.0f} sentences/s" for b, r in sorted(offline.items()) if b > 1)
    + (f", batch 1 p50 {b1:.2f} ms" if b1 else "")
    + (f", batch 1 p99/p50 {b1_p99 / b1:.2f} (the sentences' own spread)" if b1 and b1_p99 else ""))
print()
print("| workers | flags | load | sentences/s | vs offline | p50 ms | p99 ms | p99/p50 | server-side p99/p50 | errors |")
print("|---|---|---|---|---|---|---|---|---|---|")


def flags(r):
    """The server's extra flags and, where serve_bench pinned them, the cores of each side."""
    pinned = f"server cores {r['server_cpus']}, clients {r['client_cpus']}" if r.get("server_cpus") else ""
    unix = "Unix socket" if r.get("transport") == "unix" else ""
    return " ".join(f for f in (r.get("server_args", ""), pinned, unix) if f)


def load_flags(r):
    """flags() and, where the load generator shared its clients out over threads or
    connections, how many."""
    threads = f"clients on {r['client_threads']} threads" if r.get("client_threads") else ""
    shared = f"over {r['connections']} connections" if r.get("connections") else ""
    return " ".join(f for f in (flags(r), threads, shared) if f)


def call_rate_after(i):
    """Calls a second the transport alone carried at 256 clients, measured next after load i
    with the same server and load configuration (serve_bench measures it after the 256-client
    load of each pass, so passes of one configuration keep their own); None if never."""
    key = (served[i]["workers"], load_flags(served[i]))
    return next((p["requests_per_s"] for p in served[i:]
                 if p["name"] == "ping-256" and (p["workers"], load_flags(p)) == key), None)


for i, r in enumerate(served):
    clients = r["clients"]
    if r["name"] == "ping-256":
        lat = r["latency_ms"]
        print(f"| {r['workers']} | {load_flags(r)} | ping, 256 clients | {r['requests_per_s']:,.0f} calls/s | "
              f"the transport's call rate | {lat['p50']:.3f} | {lat['p99']:.3f} | | | {r['errors']} |")
        continue
    if r["name"] == "ping":
        lat = r["latency_ms"]
        print(f"| {r['workers']} | {flags(r)} | ping (Health.Check) | | transport round trip | "
              f"{lat['p50']:.3f} | {lat['p99']:.3f} | | | {r['errors']} |")
        continue
    # The matching batch is the sentences a load keeps in flight: 64 clients of 8 sentences a
    # request against batch 512 (in results from before serve_bench measured it, batch 256).
    in_flight = clients * r["sentences_per_request"]
    match = offline.get(in_flight) or offline.get(256 if in_flight >= 256 else 64)
    ratio = f"{100 * r['sentences_per_s'] / match['sentences_per_s']:.0f}% of batch {match['batch']}" \
        if match and clients > 1 else (f"p50 - offline p50 = {r['latency_ms']['p50'] - b1:+.2f} ms" if b1 else "")
    if clients == 1 and b1 and "server_ms" in r:  # the part of it inside the server
        ratio += f" (server-side {r['server_ms']['total']['p50'] - b1:+.2f} ms)"
    rate = call_rate_after(i) if clients == 256 and r["sentences_per_request"] == 1 else None
    if rate:
        ratio += f", {100 * r['requests_per_s'] / rate:.0f}% of the transport's call rate"
    lat = r["latency_ms"]
    # The server's own receipt-to-response time: what of the tail is the server's, not the
    # transport's or the load generator's.
    total = r.get("server_ms", {}).get("total")
    server_tail = f"{total['p99'] / total['p50']:.2f}" if total and total.get("p50") else ""
    print(f"| {r['workers']} | {load_flags(r)} | {r['name']} | {r['sentences_per_s']:,.0f} | {ratio} | {lat['p50']:.2f} | "
          f"{lat['p99']:.2f} | {lat['p99'] / lat['p50']:.2f} | {server_tail} | {r['errors']} |")
