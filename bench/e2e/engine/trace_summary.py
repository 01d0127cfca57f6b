#!/usr/bin/env python3
"""Where a decode step's time goes, from nmt-bench-e2e --trace FILE (builds with NMT_CUDA_TRACE).

Each row of the timeline is one launch: when its block 0 reached griddepcontrol.wait and when
the wait released it (the kernel before it had finished). A decode step repeats one sequence of
launches; this finds it (the launches that occur once a step, rotated to start at --start or at
the first such launch of elementwise.cu), keeps the steps that follow it exactly, and prints for
each position the mean time from its release to the next launch's release: what that kernel
adds to the step's chain. "early" is how long block 0 waited at the wait (the overlap that
programmatic dependent launch bought); a launch with little or none started late.

usage: trace_summary.py TIMELINE.csv [--start source:line] [--skip-steps N]
"""
import argparse
import collections
import csv
import statistics
import sys


def main():
    p = argparse.ArgumentParser()
    p.add_argument("timeline")
    p.add_argument("--start", help="source:line of a step's first launch")
    p.add_argument("--skip-steps", type=int, default=20, help="steps left out at the start (warm-up)")
    a = p.parse_args()

    rows = []
    with open(a.timeline) as f:
        for r in csv.DictReader(f):
            rows.append((f"{r['source']}:{r['line']}", int(r["blocks"]), int(r["wait_ns"]), int(r["release_ns"])))
    if not rows:
        sys.exit("empty timeline")
    counts = collections.Counter(k for k, _, _, _ in rows)
    # Steps: the commonest count among launches that occur at least 50 times (most_common
    # lists the counts by how many launches share them, the first of a tie first).
    by_sharing = collections.Counter(counts.values()).most_common()
    steps = next((c for c, _ in by_sharing if c >= 50), None)
    if steps is None:
        sys.exit("no repeated step found")
    start = a.start
    if start is None:
        candidates = [k for k, _, _, _ in rows if counts[k] == steps]
        start = next((k for k in candidates if k.startswith("elementwise")), candidates[0])
    starts = [i for i, r in enumerate(rows) if r[0] == start]
    segments = [(rows[s:e], tuple(r[0] for r in rows[s:e]), rows[e][3]) for s, e in zip(starts, starts[1:])]
    pattern = collections.Counter(keys for _, keys, _ in segments).most_common(1)[0][0]
    kept = [(seg, next_release) for seg, keys, next_release in segments if keys == pattern]
    kept = kept[a.skip_steps:]
    if not kept:
        sys.exit("no complete step after the warm-up")
    n = len(pattern)
    adds = [[] for _ in range(n)]
    early = [[] for _ in range(n)]
    for seg, next_release in kept:
        releases = [r[3] for r in seg] + [next_release]
        for i, (_, _, wait, release) in enumerate(seg):
            adds[i].append((releases[i + 1] - release) / 1e3)
            early[i].append((release - wait) / 1e3)
    step_us = [(nr - seg[0][3]) / 1e3 for seg, nr in kept]
    print(f"{len(kept)} steps of {n} launches (start {start}); step: mean {statistics.mean(step_us):.1f} us, "
          f"p50 {statistics.median(step_us):.1f} us")
    print(f"{'#':>3} {'launch':<22} {'blocks':>6} {'adds us':>8} {'p50':>7} {'early us':>8}")
    blocks = [seg_row[1] for seg_row in kept[0][0]]
    for i, k in enumerate(pattern):
        print(f"{i:>3} {k:<22} {blocks[i]:>6} {statistics.mean(adds[i]):>8.2f} {statistics.median(adds[i]):>7.2f} "
              f"{statistics.mean(early[i]):>8.2f}")
    by = collections.defaultdict(lambda: [0, 0.0])
    for i, k in enumerate(pattern):
        by[k][0] += 1
        by[k][1] += statistics.mean(adds[i])
    total = sum(v[1] for v in by.values())
    print(f"\n{'launch':<22} {'a step':>6} {'us a step':>9} {'share':>6} {'us each':>8}")
    for k, (c, us) in sorted(by.items(), key=lambda kv: -kv[1][1]):
        print(f"{k:<22} {c:>6} {us:>9.1f} {100 * us / total:>5.1f}% {us / c:>8.2f}")


if __name__ == "__main__":
    main()
