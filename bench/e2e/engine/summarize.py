#!/usr/bin/env python3
"""Markdown summary of run_e2e.sh's results.jsonl against the issue-6 bars.
usage: summarize.py results.jsonl"""
import json, sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
demo = [r for r in rows if "m30k" in r.get("model", "")]
base = [r for r in rows if "m30k" not in r.get("model", "")]  # random-weight shapes
hf_best = max((r["tokens_per_s"] for r in demo if r["engine"] == "transformers" and r["batch"] > 1), default=0)

def graphs(r):
    return "" if r["engine"] == "transformers" else (" (no graphs)" if str(r.get("graphs")) == "0" else "")

print("Demo model m30k-en-de-small, 1000 test2016 sentences, beam 4 "
      f"(transformers' best throughput in this run: {hf_best:,.0f} tok/s):\n")
print("| engine | precision | batch | target tok/s | x transformers' best | p50 / p90 ms per sentence | GPU memory |")
print("|---|---|---|---|---|---|---|")
for r in demo:
    mem = (f"engine {r['engine_mib']} MiB, device {r['gpu_used_mib']} MiB" if "engine_mib" in r
           else (f"torch max allocated {r['gpu_max_allocated_mib']} MiB" if "gpu_max_allocated_mib" in r else ""))
    if r["batch"] == 1:
        lat = f"{r['p50_ms']:.2f}" + (f" / {r['p90_ms']:.2f}" if "p90_ms" in r else "")
        tps = f"{r['tokens_per_s']:,.0f}" if "tokens_per_s" in r else ""
        print(f"| {r['engine']}{graphs(r)} | {r['precision']} | 1 ({r['sentences']} sentences) | "
              f"{tps} | | {lat} | {mem} |")
    else:
        x = r["tokens_per_s"] / hf_best if hf_best else 0
        print(f"| {r['engine']}{graphs(r)} | {r['precision']} | {r['batch']} | {r['tokens_per_s']:,.0f} | "
              f"{x:.1f}x | | {mem} |")
print()
SHAPES = {"base": "d 512, 8 heads, ffn 2048", "big": "d 1024, 16 heads, ffn 4096"}
for shape, dims in SHAPES.items():
    # rows of a random-weight model: nmt-serve names the folder transformer-SHAPE, transformers
    # the model transformer-SHAPE-random (results of older runs: base only)
    rows_s = [r for r in base if ("transformer-big" in r["model"]) == (shape == "big")]
    if not rows_s:
        continue
    hf = {r["batch"]: r for r in rows_s if r["engine"] == "transformers"}
    print(f"\nTransformer-{shape} shape (random weights, {dims}, 6+6 layers, vocab 58101), "
          "27 source tokens, 32 target tokens, beam 4, float16:\n")
    print("| engine | batch | target tok/s | x transformers | ms per batch | ms per decode step | GPU memory |")
    print("|---|---|---|---|---|---|---|")
    for r in rows_s:
        x = r["tokens_per_s"] / hf[r["batch"]]["tokens_per_s"] if r["batch"] in hf else 0
        step = f"{r['ms_per_step']:.3f}" if "ms_per_step" in r else ""
        mem = (f"engine {r['engine_mib']} MiB, device {r['gpu_used_mib']} MiB" if "engine_mib" in r
               else f"torch max allocated {r.get('gpu_max_allocated_mib')} MiB")
        print(f"| {r['engine']} | {r['batch']} | {r['tokens_per_s']:,.0f} | {x:.1f}x | {r['ms_per_batch']:.1f} | {step} | {mem} |")
