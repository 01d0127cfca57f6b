#!/usr/bin/env python3
"""bench/e2e/server/serve_summary.py on made-up serve_bench results whose ratios are known."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

TOOL = os.path.join(sys.argv[1] if len(sys.argv) > 1 else ".", "bench/e2e/server/serve_summary.py")


def offline(batch, rate):
    return {"engine": "nmt-serve", "batch": batch, "sentences_per_s": rate}


def served(name, clients, per_request, rate):
    lat = {"mean": 10.0, "p50": 10.0, "p90": 12.0, "p99": 15.0, "max": 20.0}
    return {"engine": "nmt-server", "name": name, "workers": 2, "clients": clients,
            "sentences_per_request": per_request, "sentences_per_s": rate,
            "requests_per_s": rate / per_request, "latency_ms": lat, "errors": 0}


def summary(rows):
    """The tool's output on these results."""
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        f.write("\n".join(json.dumps(r) for r in rows) + "\n")
    try:
        return subprocess.run([sys.executable, TOOL, f.name], capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(f.name)


def summarize(rows):
    """The summary's table rows by load name."""
    return {line.split("|")[3].strip(): line for line in summary(rows).splitlines() if line.startswith("| 2 ")}


class ServeSummary(unittest.TestCase):
    def test_each_load_against_the_batch_it_keeps_in_flight(self):
        rows = [offline(64, 10000), offline(256, 20000), offline(512, 40000),
                served("clients-64", 64, 1, 9000), served("clients-256", 256, 1, 18000),
                served("clients-64x8", 64, 8, 30000)]
        lines = summarize(rows)
        self.assertIn("90% of batch 64", lines["clients-64"])
        self.assertIn("90% of batch 256", lines["clients-256"])
        self.assertIn("75% of batch 512", lines["clients-64x8"])

    def test_results_without_batch_512_hold_64x8_against_batch_256(self):
        rows = [offline(64, 10000), offline(256, 20000), served("clients-64x8", 64, 8, 30000)]
        self.assertIn("150% of batch 256", summarize(rows)["clients-64x8"])

    def test_each_256_client_load_against_the_call_rate_of_its_own_pass_and_connections(self):
        def pinged(rate, **load):
            return dict(served("ping-256", 256, 1, rate), **load)
        shared = {"client_threads": 4, "connections": 16}
        rows = [offline(256, 40000),
                served("clients-256", 256, 1, 18000), pinged(20000),
                dict(served("clients-256", 256, 1, 19000), **shared), pinged(38000, **shared),
                served("clients-256", 256, 1, 10000), pinged(25000)]
        loads = [line for line in summary(rows).splitlines() if "| clients-256 |" in line]
        self.assertEqual(len(loads), 3)
        self.assertIn("45% of batch 256, 90% of the transport's call rate", loads[0])
        self.assertIn("clients on 4 threads over 16 connections", loads[1])
        self.assertIn("48% of batch 256, 50% of the transport's call rate", loads[1])
        self.assertIn("25% of batch 256, 40% of the transport's call rate", loads[2])


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
