"""The conformance generator's modules (tools/make_conformance.py is the entry script; it runs
on the GPU machine, where transformers, torch and sentencepiece are installed, and writes the
files under tests/conformance, which its README describes). None of them imports torch or
transformers at the top, so `make_conformance.py --help` works without them.

  text                   template sentences and the made-up target language
  sentencepiece_models   SentencePiece training (Marian's and fairseq's conventions)
  records                JSON / JSONL writing and the version record of meta.json
  search                 greedy / beam 4 / 4-best through generate(), margins, perturbation
  marian/                the Marian variants, tokenizer files, models and references
  families/              the NLLB-200 / M2M-100 / mBART-50 variants, tokenizers, models,
                         references, and generate (families/ end to end)
  controls/              the decoding controls' standalone reference generators (issue 54):
                         controls/alignments.py writes tests/conformance/controls/alignments
"""
