"""The conformance generator's modules (tools/make_conformance.py is the entry script; it runs
on the GPU machine, where transformers, torch and sentencepiece are installed, and writes the
files under tests/conformance, which its README describes). None of them imports torch or
transformers at the top, so `make_conformance.py --help` works without them.

  text                   template sentences and the made-up target language
  sentencepiece_models   SentencePiece training (Marian's and fairseq's conventions)
  records                JSON / JSONL writing and the version record of meta.json
  search                 greedy / beam 4 / 4-best through generate(), margins, perturbation
  marian_variants        the Marian variants and refused cases, generate()'s arguments
  marian_tokenizer       Marian vocab.json and tokenizer files, MarianTokenizer's check
  marian_model           Marian random init, saving and reload checks
  marian_references      Marian references per chunk, meta.json, demo/
  family_variants        the NLLB-200 / M2M-100 / mBART-50 variants and refused cases
  family_tokenizers      the families' tokenizer files and tokenizer.jsonl cases
  family_models          the families' random init and its calibration, saving, reloading
  family_references      the families' references per chunk and their items
  families               families/ and the families' refused/ cases, end to end
"""
