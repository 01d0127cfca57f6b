#!/usr/bin/env python3
"""bench/e2e/server/tail_by_steps.py on made-up server logs whose answers are known, in the text and
the JSON log formats."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

TOOL = os.path.join(sys.argv[1] if len(sys.argv) > 1 else ".", "bench/e2e/server/tail_by_steps.py")

# (ms, decode_ms, steps): 50 requests of 10 steps, 49 of 20, one of 40 whose steps were slower.
REQUESTS = [(20.0, 19.0, 10)] * 50 + [(40.0, 38.0, 20)] * 49 + [(120.0, 116.0, 40)]

EXPECTED = """100 translated requests

| measure | p50 | p99 | p99/p50 |
|---|---|---|---|
| span in the server | 20.00 ms | 40.00 ms | 2.00 |
| decode | 19.00 ms | 38.00 ms | 2.00 |
| steps (longest sentence) | 10 | 20 | 2.00 |
| decode a step | 1.900 ms | 1.900 ms | 1.00 |

| steps | requests | span p50 ms | span p99 ms | p99/p50 |
|---|---|---|---|---|
| 10 | 50 | 20.00 | 20.00 | 1.00 |
| 20 | 49 | 40.00 | 40.00 | 1.00 |
"""


def fields(i, ms, decode_ms, steps):
    return {"request_id": f"r-{i}", "method": "Translate", "model": "m", "sentences": 1,
            "input_tokens": 9, "output_tokens": steps, "ms": ms, "code": "OK", "queue_ms": 0.1,
            "decode_ms": decode_ms, "steps": steps}


# Lines the tool must pass over: a refusal (no steps), a request logged before steps were, a
# failure, another event.
OTHERS = [{"msg": "request", "request_id": "x", "ms": 0.2, "code": "RESOURCE_EXHAUSTED"},
          {"msg": "request", "request_id": "y", "ms": 30.0, "code": "OK"},
          {"msg": "request failed", "request_id": "z", "ms": 5.0, "code": "INTERNAL", "error": "boom"},
          {"msg": "serving", "address": "0.0.0.0:50051"}]


def text_line(msg, f):
    body = " ".join(f"{k}={v}" for k, v in f.items() if k != "msg")
    return f"[2026-11-29 10:05:29.158] [info] {msg} {body}"


class TailBySteps(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def run_tool(self, lines, *args):
        path = os.path.join(self.dir.name, "server.log")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        return subprocess.run([sys.executable, TOOL, path, *args], capture_output=True, text=True)

    def test_json_log(self):
        lines = [json.dumps({"time": "t", "level": "info", "msg": "request", **fields(i, *r)})
                 for i, r in enumerate(REQUESTS)]
        lines[10:10] = [json.dumps(o) for o in OTHERS]
        r = self.run_tool(lines)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, EXPECTED)

    def test_text_log(self):
        lines = [text_line("request", fields(i, *r)) for i, r in enumerate(REQUESTS)]
        lines[3:3] = [text_line(o["msg"], o) for o in OTHERS]
        r = self.run_tool(lines)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, EXPECTED)

    def test_min_count_keeps_small_groups(self):
        lines = [text_line("request", fields(i, *r)) for i, r in enumerate(REQUESTS)]
        r = self.run_tool(lines, "--min-count", "1")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.endswith("| 40 | 1 | 120.00 | 120.00 | 1.00 |\n"), r.stdout)

    def test_a_log_without_steps_is_an_error(self):
        r = self.run_tool([json.dumps(o) for o in OTHERS])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("no translated request lines with steps", r.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
