"""Conformance references of the decoding controls (issue 54): one standalone generator per
control, each writing tests/conformance/controls/<control>/{references.jsonl,meta.json}."""
