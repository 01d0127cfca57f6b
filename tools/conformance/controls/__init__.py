"""The decoding controls' reference generators (issue 54): one standalone script per control,
each run on the GPU machine with transformers and torch, writing
tests/conformance/controls/<control>/{references.jsonl,meta.json}."""
