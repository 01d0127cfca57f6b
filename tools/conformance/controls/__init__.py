"""Standalone reference generators of the decoding controls (issue 54), one module per control,
each run on the GPU machine (transformers, torch) and writing tests/conformance/controls/<name>/:

  repetition   no_repeat_ngram_size, repetition_penalty, suppress_sequences
"""
