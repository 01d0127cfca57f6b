#!/usr/bin/env python3
"""Where a served load's latency tail comes from, from nmt-server's per-request log lines (its
text format or --log-format json): each translated request's span in the server (ms), its decode
(decode_ms, from its first admission on) and its longest sentence's decoder steps (steps).

A tail that the sentences' own steps explain has the steps' p99/p50 near the span's and a flat
decode time a step; one that the loop adds (admissions, a filling loop's slower steps) shows as
a spread of the time a step, and of the span at a fixed number of steps.

usage: tail_by_steps.py SERVER_LOG [--min-count N]
"""
import argparse
import json
import math
import re

TEXT = re.compile(r"\] request ((?:\S+=\S+ ?)+)$")


def requests(path):
    """The translated requests' (ms, decode_ms, steps), in log order."""
    out = []
    with open(path, errors="replace") as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                try:
                    fields = json.loads(line)
                except ValueError:
                    continue
                if fields.get("msg") != "request":
                    continue
            else:
                m = TEXT.search(line)
                if not m:
                    continue
                fields = dict(kv.split("=", 1) for kv in m.group(1).split())
            if str(fields.get("code")) != "OK" or "steps" not in fields:
                continue
            out.append((float(fields["ms"]), float(fields["decode_ms"]), int(fields["steps"])))
    return out


def quantile(values, q):
    """Nearest rank: the smallest value with at least q of them at or below it."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def spread(name, values, fmt):
    p50, p99 = quantile(values, 0.5), quantile(values, 0.99)
    ratio = f"{p99 / p50:.2f}" if p50 > 0 else "-"
    return f"| {name} | {fmt.format(p50)} | {fmt.format(p99)} | {ratio} |"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("log")
    p.add_argument("--min-count", type=int, default=20, help="requests a steps count needs for its row")
    a = p.parse_args()
    reqs = requests(a.log)
    if not reqs:
        raise SystemExit(f"{a.log}: no translated request lines with steps (a server before they were logged?)")
    print(f"{len(reqs)} translated requests")
    print()
    print("| measure | p50 | p99 | p99/p50 |")
    print("|---|---|---|---|")
    print(spread("span in the server", [r[0] for r in reqs], "{:.2f} ms"))
    print(spread("decode", [r[1] for r in reqs], "{:.2f} ms"))
    print(spread("steps (longest sentence)", [r[2] for r in reqs], "{}"))
    print(spread("decode a step", [r[1] / r[2] for r in reqs], "{:.3f} ms"))
    print()
    print("| steps | requests | span p50 ms | span p99 ms | p99/p50 |")
    print("|---|---|---|---|---|")
    by_steps = {}
    for ms, _, steps in reqs:
        by_steps.setdefault(steps, []).append(ms)
    for steps, spans in sorted(by_steps.items()):
        if len(spans) < a.min_count:
            continue
        p50, p99 = quantile(spans, 0.5), quantile(spans, 0.99)
        print(f"| {steps} | {len(spans)} | {p50:.2f} | {p99:.2f} | {p99 / p50:.2f} |")


if __name__ == "__main__":
    main()
