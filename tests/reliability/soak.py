#!/usr/bin/python3
"""Soak: nmt-server on the CPU under nmt-loadgen's closed loop (64 clients by default) for
DURATION seconds. Passes when the loadgen saw 0 errors and the server's resident memory
(VmRSS from /proc/PID/status, sampled every second) grew less than 5% after warm-up: the median
of the last third of the time after warm-up against the median of its first third.

    soak.py REPO_ROOT NMT_SERVER NMT_LOADGEN [--duration 60] [--clients 64] [--warmup S]
"""
import argparse
import json
import os
import statistics
import subprocess
import threading
import time

import rel

check = rel.Checks()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("repo")
    ap.add_argument("server")
    ap.add_argument("loadgen")
    ap.add_argument("--duration", type=int, default=60)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=0, help="default: a quarter of the run, at most 60 s")
    ap.add_argument("--max-growth", type=float, default=0.05)
    a = ap.parse_args()
    warmup = a.warmup or min(60, max(10, a.duration // 4))
    repo = os.path.abspath(a.repo)
    tmp, pb, pb_grpc, health_pb2, health_pb2_grpc = rel.setup(repo, "nmt-soak-")
    sentences = os.path.join(repo, "..", "shared", "data", "multi30k", "test_2016_flickr.en.gz")
    if not os.path.exists(sentences):
        sentences = os.path.join(tmp, "sentences.txt")
        with open(sentences, "w") as f:
            f.write("\n".join(rel.SENTENCES) + "\n")
    config = os.path.join(tmp, "config.yaml")
    rel.write_config(config, os.path.join(repo, "models/m30k-en-de-small"))
    server = rel.Server(a.server, config, ["--log-level", "warn"])
    samples = []  # (seconds since load start, VmRSS kB, threads, fds)
    try:
        server.wait_serving(health_pb2, health_pb2_grpc)
        idle = rel.proc_status(server.proc.pid)
        start = time.monotonic()
        done = threading.Event()

        def sample():
            while not done.wait(1.0):
                s = rel.proc_status(server.proc.pid)
                samples.append((time.monotonic() - start, s["VmRSS"], s["Threads"], s["fds"]))

        sampler = threading.Thread(target=sample)
        sampler.start()
        r = subprocess.run([a.loadgen, "--target", server.target, "--input", sentences,
                            "--clients", str(a.clients), "--duration", str(a.duration),
                            "--beam", "4", "--timeout-ms", "30000", "--json"],
                           capture_output=True, text=True, timeout=a.duration + 300)
        done.set()
        sampler.join()
        report = json.loads(r.stdout) if r.stdout.strip().startswith("{") else {}
        errors = report.get("errors")
        check(r.returncode == 0 and errors == 0 and report.get("requests", 0) > 0,
              f"{a.clients} clients, {a.duration} s: {report.get('requests')} requests, "
              f"{report.get('sentences')} sentences, errors {errors} {report.get('error_kinds', r.stderr[-500:])}")
        # RSS swings with the batch being decoded (its buffers come and go), so the bar compares
        # medians over the first and the last third of the time after warm-up.
        after = [s for s in samples if s[0] >= warmup]
        third = (after[-1][0] - warmup) / 3
        base = statistics.median(s[1] for s in after if s[0] < warmup + third)
        final = statistics.median(s[1] for s in after if s[0] >= after[-1][0] - third)
        peak = max(s[1] for s in after)
        growth = final / base - 1
        summary = {
            "clients": a.clients, "duration_s": a.duration, "warmup_s": warmup,
            "requests": report.get("requests"), "errors": errors,
            "requests_per_s": report.get("requests_per_s"), "latency_ms": report.get("latency_ms"),
            "rss_kb": {"idle": idle["VmRSS"], "first_third_median": base, "last_third_median": final,
                       "peak_after_warmup": peak},
            "rss_growth_after_warmup": round(growth, 4),
            "threads": {"idle": idle["Threads"], "max": max(s[2] for s in samples)},
            "fds": {"idle": idle["fds"], "max": max(s[3] for s in samples)},
        }
        print(json.dumps(summary, indent=2))
        check(growth < a.max_growth,
              f"RSS after warm-up, median of the first third {base} kB -> of the last third {final} kB "
              f"({growth * 100:+.2f}%, peak {peak} kB)")
        rc = server.stop()
        check(rc == 0, f"exit 0 on SIGTERM (got {rc})")
    except Exception as e:
        check(False, f"unexpected {type(e).__name__}: {e}")
    finally:
        server.stop()
        if check.failures:
            print(server.output()[-3000:])
    check.exit()


if __name__ == "__main__":
    main()
