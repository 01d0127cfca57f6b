"""CTranslate2 on the CPU, timed the way nmt-translate reports itself: sentences/s and target
tokens/s (tokens without EOS) of translating INPUT, beside bench/cpu_compare.sh.
  python3 bench/ct2_cpu_translate.py MODEL_DIR SPM INPUT --compute-type float32|int8
      --threads N --beam N --batch-size N [--output FILE]
"""
import argparse
import sys
import time

import ctranslate2
import sentencepiece as spm

p = argparse.ArgumentParser()
p.add_argument("model")
p.add_argument("spm")
p.add_argument("input")
p.add_argument("--compute-type", default="float32")
p.add_argument("--threads", type=int, default=2)
p.add_argument("--beam", type=int, default=4)
p.add_argument("--batch-size", type=int, default=32)
p.add_argument("--output")
a = p.parse_args()

sp = spm.SentencePieceProcessor(model_file=a.spm)
lines = [l.rstrip("\n") for l in open(a.input, encoding="utf-8")]
t = ctranslate2.Translator(a.model, device="cpu", compute_type=a.compute_type,
                           intra_threads=a.threads, inter_threads=1)
src = [sp.encode(l, out_type=str) + ["</s>"] for l in lines]
start = time.perf_counter()
res = t.translate_batch(src, beam_size=a.beam, max_batch_size=a.batch_size,
                        batch_type="examples")
elapsed = time.perf_counter() - start
tokens = sum(len(r.hypotheses[0]) for r in res)
print(f"ct2: {len(lines)} sentences in {elapsed:.2f} s, {len(lines) / elapsed:.1f} sentences/s, "
      f"{tokens / elapsed:.0f} target tokens/s ({a.compute_type}, {a.threads} threads, beam {a.beam}, "
      f"batch {a.batch_size})")
if a.output:
    tsp = sp  # the demo model shares one SentencePiece model? decoded with the target one below
    with open(a.output, "w", encoding="utf-8") as f:
        for r in res:
            f.write("".join(r.hypotheses[0]).replace("\u2581", " ").strip() + "\n")
