"""The NLLB-200 / M2M-100 / mBART-50 half of the conformance generator (families/ and the
families' refused/ cases; tools/make_conformance.py calls generate.write_families).

  variants     the families' variants and refused cases
  tokenizers   the families' tokenizer files and tokenizer.jsonl cases
  models       the families' random init and its calibration, saving, reloading
  references   the families' references per chunk and their items
  generate     families/ and the families' refused/ cases, end to end
"""
