#!/usr/bin/env python3
"""Writes a Transformer-base shaped Marian model with random weights (hf_baseline.py
write-base: d 512, 6+6 layers, 8 heads, ffn 2048, vocab 58101) as a complete model-repository
folder: the demo model's SentencePiece files and a vocab.json widened to 58101 ids (the
demo's pieces keep their ids, <pad> moves to 58100, the rest are filler pieces), so that
nmt-server loads it like any OPUS-MT folder. Its translations are noise: it is for load
times and speed only. Needs torch and transformers.

    write_base_repository_model.py DEST DEMO_MODEL_DIR
"""
import argparse
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "engine"))  # hf_baseline
import hf_baseline  # noqa: E402

VOCAB = 58101


def main():
    dest, demo = sys.argv[1], sys.argv[2]
    hf_baseline.write_base(argparse.Namespace(out=dest))
    for name in ("source.spm", "target.spm"):
        shutil.copy(os.path.join(demo, name), dest)
    with open(os.path.join(demo, "vocab.json")) as f:
        vocab = json.load(f)
    pad = vocab.pop("<pad>")
    used = set(vocab.values())
    for i in range(VOCAB - 1):
        if i not in used:
            vocab[f"<filler_{i}>"] = i
    vocab["<pad>"] = VOCAB - 1
    assert pad != VOCAB - 1 and len(vocab) == VOCAB
    with open(os.path.join(dest, "vocab.json"), "w") as f:
        json.dump(vocab, f)


if __name__ == "__main__":
    main()
