#!/usr/bin/env python3
"""Where a decode step's GPU time goes, from an ncu CSV of a window of a step loop's kernels.

  ncu --csv --print-units base --clock-control none --cache-control none \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
      --launch-skip S --launch-count C --log-file F.csv nmt-bench-e2e ...
  bench/e2e/engine/ncu_step.py F.csv [--marker reorder_embed_kernel] [--top 25]

The window is cut to whole steps: from the first launch of the marker kernel (the step's first
launch, the beam reorder + embedding) to the last one's, exclusive. Per kernel (its name
without template arguments and its grid): launches a step, microseconds a step, its share of
the step's summed kernel time, and the DRAM bandwidth it achieved (bytes read + written over its
time). ncu serializes the launches, so the sum is the step's kernel time without launch gaps or
overlap (programmatic dependent launch): the step's wall time beside it shows those.
"""
import argparse
import collections
import csv
import re
import sys


def short(name):
    """A kernel's name with its template arguments, without namespaces and parameters (ncu
    writes an anonymous namespace as 'unnamed>::')."""
    for anonymous in ("(anonymous namespace)::", "<unnamed>::", "unnamed>::"):
        name = name.replace(anonymous, "")
    name = re.sub(r"\b[A-Za-z_]\w*::", "", re.sub(r"^void\s+", "", name))
    depth = 0
    for i, ch in enumerate(name):  # the parameter list: the first '(' outside template arguments
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            name = name[:i]
            break
    return name


def launches(path):
    """[(id, kernel name, grid, {metric: value})] in launch order."""
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f) if len(r) > 5]
    start = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
    head, rows = rows[start], rows[start + 1:]
    col = {k: head.index(k) for k in ("ID", "Kernel Name", "Grid Size", "Metric Name", "Metric Value")}
    by_id = collections.OrderedDict()
    for r in rows:
        key = int(r[col["ID"]])
        entry = by_id.setdefault(key, [r[col["Kernel Name"]], r[col["Grid Size"]], {}])
        try:
            entry[2][r[col["Metric Name"]]] = float(r[col["Metric Value"]].replace(",", ""))
        except ValueError:
            pass
    return [(k, n, g, m) for k, (n, g, m) in by_id.items()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--marker", default="reorder_embed_kernel")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--title", default="")
    a = ap.parse_args()
    ls = launches(a.csv)
    marks = [i for i, (_, n, _, _) in enumerate(ls) if a.marker in n]
    if len(marks) < 2:
        sys.exit(f"{a.csv}: fewer than two launches of {a.marker}: no whole step in the window")
    window = ls[marks[0]:marks[-1]]
    steps = len(marks) - 1
    agg = collections.OrderedDict()
    for _, n, g, m in window:
        k = (short(n), g)
        t = agg.setdefault(k, [0, 0.0, 0.0])
        t[0] += 1
        t[1] += m.get("gpu__time_duration.sum", 0.0)
        t[2] += m.get("dram__bytes_read.sum", 0.0) + m.get("dram__bytes_write.sum", 0.0)
    total_ns = sum(t[1] for t in agg.values()) / steps
    total_bytes = sum(t[2] for t in agg.values()) / steps
    print(f"# {a.title or a.csv}: {steps} steps, {len(window) / steps:.0f} launches a step, "
          f"kernel time {total_ns / 1e3:.1f} us a step, DRAM {total_bytes / 1e6:.1f} MB a step "
          f"({total_bytes / total_ns:.0f} GB/s over the kernel time)")
    print("| kernel | grid | launches a step | us a step | % of step | DRAM GB/s |")
    print("|---|---|---|---|---|---|")
    order = sorted(agg.items(), key=lambda kv: -kv[1][1])
    for (name, grid), (count, ns, by) in order[:a.top]:
        print(f"| {name} | {grid} | {count / steps:g} | {ns / steps / 1e3:.2f} | {100 * ns / steps / total_ns:.1f} | "
              f"{by / ns if ns else 0:.0f} |")
    rest = order[a.top:]
    if rest:
        ns = sum(t[1] for _, t in rest) / steps
        print(f"| ({len(rest)} others) | | {sum(t[0] for _, t in rest) / steps:g} | {ns / 1e3:.2f} | "
              f"{100 * ns / total_ns:.1f} | |")


if __name__ == "__main__":
    main()
