"""The Marian half of the conformance generator (tools/make_conformance.py writes demo/,
models/<variant>/ and the Marian refused/ cases with them).

  variants     the Marian variants and refused cases, generate()'s arguments
  tokenizer    Marian vocab.json and tokenizer files, MarianTokenizer's check
  model        Marian random init, saving and reload checks
  references   Marian references per chunk, meta.json, demo/
"""
