#!/usr/bin/env python3
"""The translation cache's bars from cache_bench.sh's results.jsonl (issue 56): the
half-repeated load's sentences a second with the cache on against off (bar >= 1.8x), and
the cache off at each client count against the build before (bar: within 3%, the medians of
the rounds). Prints one line per bar and a RESULT line (JSON) with the ratios; exits 1 when a
measured bar is missed or a load had errors.
usage: cache_summary.py results.jsonl"""
import json
import statistics
import sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
ok = True
summary = {"name": "cache-bars"}
errors = sum(r.get("errors", 0) for r in rows)
if errors:
    ok = False
    print(f"errors: {errors} failed requests in the loads")


def rate(name, build, cache):
    got = [r["sentences_per_s"] for r in rows if (r["name"], r["build"], r["cache"]) == (name, build, cache)]
    return statistics.median(got) if got else None


off, on = rate("repeat50", "after", "off"), rate("repeat50", "after", "on")
if off and on:
    hits = [r for r in rows if (r["name"], r["cache"]) == ("repeat50", "on")]
    h = sum(r["cache_hits"] for r in hits)
    m = sum(r["cache_misses"] for r in hits)
    ratio = on / off
    summary.update(repeat50_off=off, repeat50_on=on, repeat50_ratio=round(ratio, 3),
                   hit_ratio=round(h / (h + m), 4) if h + m else None)
    passed = ratio >= 1.8
    ok &= passed
    print(f"bar 1 {'ok  ' if passed else 'MISS'}: 50% repeated, cache on {on:,.1f} vs off {off:,.1f} sentences/s = "
          f"{ratio:.2f}x (bar >= 1.8x); hit ratio {summary['hit_ratio']}")
for name in sorted({r["name"] for r in rows if r["name"].startswith("clients-")}, key=lambda n: int(n.split("-")[1])):
    before, after = rate(name, "before", "off"), rate(name, "after", "off")
    if not (before and after):
        continue
    change = after / before - 1
    passed = abs(change) <= 0.03 or change > 0
    ok &= passed
    summary[f"{name}_change"] = round(change, 4)
    print(f"bar 2 {'ok  ' if passed else 'MISS'}: {name} cache off {after:,.1f} vs before {before:,.1f} sentences/s "
          f"({change * 100:+.1f}%; bar: not more than 3% lower)")
print("RESULT " + json.dumps(summary))
sys.exit(0 if ok else 1)
