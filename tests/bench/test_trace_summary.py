#!/usr/bin/env python3
"""bench/e2e/engine/trace_summary.py on made-up launch timelines whose answers are known."""
import os
import subprocess
import sys
import tempfile
import unittest

TOOL = os.path.join(sys.argv[1] if len(sys.argv) > 1 else ".", "bench/e2e/engine/trace_summary.py")

# One step: (source:line, blocks, microseconds from this launch's release to the next one's,
# microseconds block 0 waited).
STEP = [("elementwise.cu:126", 4, 1.5, 0.1), ("small_gemm.cu:180", 384, 3.0, 0.2),
        ("attention.cu:392", 16, 2.5, 0.5), ("small_gemm.cu:180", 128, 2.0, 1.5),
        ("topk.cu:770", 1, 20.0, 3.0)]


def timeline(path, steps, noise=None):
    t = 1_000_000
    with open(path, "w") as f:
        f.write("source,line,blocks,wait_ns,release_ns\n")
        for s in range(steps):
            pattern = noise if noise and s == steps // 2 else STEP
            for key, blocks, adds, early in pattern:
                source, line = key.split(":")
                f.write(f"{source},{line},{blocks},{t - int(early * 1000)},{t}\n")
                t += int(adds * 1000)


def run(path, *args):
    return subprocess.run([sys.executable, TOOL, path, *args], capture_output=True, text=True)


class TraceSummary(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "t.csv")

    def tearDown(self):
        self.dir.cleanup()

    def test_each_launch_adds_its_share(self):
        timeline(self.path, 120)
        r = run(self.path, "--skip-steps", "10")
        self.assertEqual(r.returncode, 0, r.stderr)
        # 120 steps give 119 whole ones (the last has no next release); 10 skipped.
        self.assertIn("109 steps of 5 launches (start elementwise.cu:126); step: mean 29.0 us", r.stdout)
        self.assertRegex(r.stdout, r"\n\s+4 topk.cu:770\s+1\s+20.00\s+20.00\s+3.00\n")
        # Aggregated by launch site: two small GEMMs a step, 5.0 us together.
        self.assertRegex(r.stdout, r"\nsmall_gemm.cu:180\s+2\s+5.0\s+17.2%\s+2.50\n")

    def test_steps_off_the_pattern_are_left_out(self):
        odd = STEP[:3] + [("layer_norm.cu:140", 2, 9.0, 0.0)] + STEP[3:]
        timeline(self.path, 60, noise=odd)
        r = run(self.path, "--skip-steps", "0")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("58 steps of 5 launches", r.stdout)  # 59 whole steps, one off the pattern
        self.assertNotIn("layer_norm", r.stdout)

    def test_empty_timeline_is_an_error(self):
        with open(self.path, "w") as f:
            f.write("source,line,blocks,wait_ns,release_ns\n")
        r = run(self.path)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("empty timeline", r.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
