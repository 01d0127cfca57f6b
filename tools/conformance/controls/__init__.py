"""Standalone reference generators of the decoding controls (issue 54), one module per control,
each run on the GPU machine (transformers, torch) and writing tests/conformance/controls/<name>/
{references.jsonl,meta.json}:

  alignments     return_alignments (cross_attentions of generate(output_attentions=True))
  prefix_score   target_prefix (generate with decoder_input_ids) and Score (a forward pass)
  repetition     no_repeat_ngram_size, repetition_penalty, suppress_sequences
"""
