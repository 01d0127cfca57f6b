#!/usr/bin/env python3
"""bench/headline.py on made-up results whose tables are known: figures only beside a baseline
of the same run, the newest such run, passes as their median, experiments passed over."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

TOOL = os.path.join(sys.argv[1] if len(sys.argv) > 1 else ".", "bench/headline.py")
DEMO = "/work/main/models/m30k-en-de-small"


def engine(name, batch, tokens_per_s, call, **extra):
    return dict({"engine": name, "model": DEMO, "beam": 4, "batch": batch, "precision": "float16",
                 "tokens_per_s": tokens_per_s, "sentences_per_s": tokens_per_s / 10,
                 "device": "GPU-X", "commit": "abc1234", "date": "2026-11-28", "call": call}, **extra)


def compared(call, ours, theirs, **extra):
    """nmt-serve and CTranslate2 at batches 64, 256, 1024 and 1 (with p50) in one run."""
    rows = []
    for batch in (64, 256, 1024):
        rows += [engine("nmt-serve", batch, ours * batch, call, **extra),
                 engine("ctranslate2", batch, theirs * batch, call)]
    rows += [engine("nmt-serve", 1, ours, call, p50_ms=1.0, **extra),
             engine("ctranslate2", 1, theirs, call, p50_ms=4.0)]
    return rows


def served(clients, rate, p50, call):
    return {"engine": "nmt-server", "rpc": "Translate", "clients": clients, "sentences_per_request": 1,
            "beam": 4, "precision": "float16",
            "sentences_per_s": rate, "latency_ms": {"p50": p50}, "errors": 0, "busy_poll": False,
            "device": "GPU-X", "commit": "def5678", "date": "2026-11-29", "call": call}


def headline(files):
    """The tool's exit status, stdout and stderr on a results folder holding these files."""
    with tempfile.TemporaryDirectory() as folder:
        for name, lines in files.items():
            with open(os.path.join(folder, name), "w") as f:
                f.write("\n".join(l if isinstance(l, str) else "RESULT " + json.dumps(l) for l in lines) + "\n")
        done = subprocess.run([sys.executable, TOOL, folder], capture_output=True, text=True)
        return done.returncode, done.stdout, done.stderr


def rows(out, first_cell):
    return [l for l in out.splitlines() if l.startswith("| " + first_cell + " |")]


class Headline(unittest.TestCase):
    def test_engine_against_ctranslate2_from_the_newest_run_with_both(self):
        old = compared("engine run 1", 100, 50)
        newer = compared("engine run 2", 300, 100) + [
            engine("nmt-serve", 64, 1e9, "engine run 2", precision="float32"),
            engine("ctranslate2", 256, 1e9, "engine run 2", beam=1)]
        experiment = (compared("engine run 3", 900, 100, label="a")
                      + [engine("nmt-serve", b, 1, "engine run 3", label="b") for b in (64, 256, 1024)])
        two_builds = (compared("engine run 4", 900, 100)
                      + [engine("nmt-serve", b, 1, "engine run 4", commit="fff0000") for b in (64, 256, 1024)])
        alone = [engine("nmt-serve", b, 5000 * b, "engine run 5") for b in (1, 64, 256, 1024)]
        code, out, err = headline({"e2e.jsonl": old + newer + experiment + two_builds + alone})
        self.assertEqual(code, 0, err)
        demo = rows(out, "demo (m30k-en-de-small)")
        self.assertEqual(demo, [
            "| demo (m30k-en-de-small) | 64 | 19,200 | 6,400 | 3.0x | engine run 2 (abc1234, 2026-11-28, GPU-X) |",
            "| demo (m30k-en-de-small) | 256 | 76,800 | 25,600 | 3.0x | engine run 2 (abc1234, 2026-11-28, GPU-X) |",
            "| demo (m30k-en-de-small) | 1024 | 307,200 | 102,400 | 3.0x | engine run 2 (abc1234, 2026-11-28, GPU-X) |",
            "| demo (m30k-en-de-small) | 1 | 300 | 100 | 3.0x | engine run 2 (abc1234, 2026-11-28, GPU-X) |",
            "| demo (m30k-en-de-small) | 1, p50 latency | 1.00 ms | 4.00 ms | 4.0x | engine run 2 (abc1234, 2026-11-28, GPU-X) |",
        ])
        self.assertNotIn("transformers", out)
        self.assertNotIn("Served", out)

    def test_served_as_a_fraction_of_offline_median_over_passes(self):
        call = "server run 9, call 2"
        offline = [engine("nmt-serve", b, 10 * r, call + ", pass 1") for b, r in ((64, 1000), (256, 2000))]
        offline.append(engine("nmt-serve", 1, 500, call + ", pass 1", p50_ms=1.5))
        loads = []
        for n, scale in ((1, 1.0), (2, 0.5), (3, 0.9)):
            loads += [served(1, 400, 2.0 / scale, f"{call}, pass {n}"),
                      served(64, 900 * scale, 5.0, f"{call}, pass {n}"),
                      served(256, 2200 * scale, 9.0, f"{call}, pass {n}")]
        busy = dict(served(64, 5000, 1.0, call + ", pass 1"), busy_poll=True)
        code, out, err = headline({"e2e.jsonl": offline + loads + [busy, ""],
                                   "bare.jsonl": [json.dumps(engine("nmt-serve", 512, 1, "engine run 0"))]})
        self.assertEqual(code, 0, err)
        self.assertEqual(rows(out, "demo (m30k-en-de-small)"), [
            "| demo (m30k-en-de-small) | 1 | p50 2.22 ms | batch 1 p50 1.50 ms | 68% | server run 9, call 2 (abc1234, 2026-11-28, GPU-X) |",
            "| demo (m30k-en-de-small) | 64 | 810 sentences/s | batch 64 1,000 sentences/s | 81% | server run 9, call 2 (abc1234, 2026-11-28, GPU-X) |",
            "| demo (m30k-en-de-small) | 256 | 1,980 sentences/s | batch 256 2,000 sentences/s | 99% | server run 9, call 2 (abc1234, 2026-11-28, GPU-X) |",
        ])

    def test_exactness_newest_record_of_each_suite_and_search(self):
        def exact(identical, commit):
            return {"bench": "exactness", "suite": "test_golden_cuda", "device": "GPU-X", "precision": "float16",
                    "search": "beam 4", "identical": identical, "of": 1000, "commit": commit,
                    "date": "2026-11-29", "call": "engine run " + commit}
        code, out, err = headline({"exactness.jsonl": [exact(990, "1"), exact(996, "2")]})
        self.assertEqual(code, 0, err)
        self.assertEqual(rows(out, "test_golden_cuda"),
                         ["| test_golden_cuda | GPU-X | float16 | beam 4 | 996/1000 | engine run 2 (2, 2026-11-29) |"])

    def test_a_line_that_is_not_a_result_is_named(self):
        for line in ("RESULT {not json", "a log line", "[1, 2]"):
            code, _, err = headline({"e2e.jsonl": compared("engine run 1", 100, 50) + [line]})
            self.assertNotEqual(code, 0, line)
            self.assertIn("e2e.jsonl:9:", err, line)

    def test_no_headline_figure_is_an_error(self):
        code, _, err = headline({"e2e.jsonl": [engine("nmt-serve", 64, 1000, "engine run 1")]})
        self.assertNotEqual(code, 0)
        self.assertIn("no RESULT line gives a headline figure", err)


class ReadmeTable(unittest.TestCase):
    def test_the_readme_shows_the_table_of_the_committed_results(self):
        """README.md's performance section holds headline.py's output on bench/results verbatim:
        after adding results, re-run the script and paste its output."""
        root = os.path.dirname(os.path.dirname(TOOL))
        done = subprocess.run([sys.executable, TOOL], capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stderr)
        with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
            readme = f.read()
        self.assertIn("| CTranslate2 |", done.stdout)
        self.assertTrue(done.stdout.strip() in readme,
                        "README.md's performance tables differ from `/usr/bin/python3 bench/headline.py`'s output")


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
