#!/usr/bin/env python3
"""bench/e2e/engine/nllb_shape.py without a GPU: its arguments, the shapes it writes (parameter counts
of NLLB-200-distilled-600M and NLLB-200-1.3B), its sources' layout and its tokens/s arithmetic.
Importing it needs neither torch nor ctranslate2 (the GPU runs happen on the device machine)."""
import importlib.util
import os
import sys
import unittest

REPO = sys.argv[1] if len(sys.argv) > 1 else "."
spec = importlib.util.spec_from_file_location("nllb_shape", os.path.join(REPO, "bench/e2e/engine/nllb_shape.py"))
nllb_shape = importlib.util.module_from_spec(spec)
spec.loader.exec_module(nllb_shape)


class Arguments(unittest.TestCase):
    def test_defaults_are_the_issues_measurement(self):
        a = nllb_shape.parse_args(["all", "--out", "/tmp/x"])
        self.assertEqual((a.model, a.shape, a.batches, a.beam, a.tgt_len), ("/tmp/x", "600m", [1, 16, 64, 256], 4, 32))

    def test_ct2_times_a_given_folder(self):
        a = nllb_shape.parse_args(["ct2", "--model", "m", "--batches", "1,64", "--tgt-len", "8"])
        self.assertEqual((a.model, a.batches, a.tgt_len), ("m", [1, 64], 8))

    def test_refused_arguments(self):
        for argv in (["write"], ["ct2"], ["ct2", "--model", "m", "--batches", "1,x"],
                     ["ct2", "--model", "m", "--batches", "0"], ["write", "--out", "o", "--shape", "3b"],
                     ["ct2", "--model", "m", "--src-len", "2"]):
            with self.subTest(argv=argv), self.assertRaises(SystemExit):
                with open(os.devnull, "w") as null:
                    stderr, sys.stderr = sys.stderr, null
                    try:
                        nllb_shape.parse_args(argv)
                    finally:
                        sys.stderr = stderr


class Shapes(unittest.TestCase):
    def test_600m_is_nllb_200_distilled_600m(self):
        cfg = nllb_shape.model_config("600m")
        self.assertEqual((cfg["d_model"], cfg["encoder_layers"], cfg["decoder_layers"], cfg["encoder_attention_heads"],
                          cfg["encoder_ffn_dim"], cfg["vocab_size"], cfg["activation_function"],
                          cfg["max_position_embeddings"]), (1024, 12, 12, 16, 4096, 256206, "relu", 1024))
        self.assertTrue(610e6 < nllb_shape.parameter_count(cfg) < 620e6)  # the hub model: 615M

    def test_1_3b_is_nllb_200_1_3b(self):
        cfg = nllb_shape.model_config("1.3b")
        self.assertEqual((cfg["encoder_layers"], cfg["decoder_layers"], cfg["decoder_ffn_dim"]), (24, 24, 8192))
        self.assertTrue(1.36e9 < nllb_shape.parameter_count(cfg) < 1.38e9)  # the hub model: 1.37B

    def test_the_tokenizer_source_is_committed(self):
        with open(nllb_shape.SPM, "rb") as f:
            self.assertEqual(f.read(1), b"\x0a")  # a SentencePiece ModelProto


class Measurement(unittest.TestCase):
    def test_sources_in_nllb_layout(self):
        src = nllb_shape.random_sources(["a", "b", "c"], 5, 27)
        self.assertEqual(len(src), 5)
        for s in src:
            self.assertEqual((len(s), s[0], s[-1]), (27, "eng_Latn", "</s>"))
            self.assertTrue(set(s[1:-1]) <= {"a", "b", "c"})
        self.assertEqual(src, nllb_shape.random_sources(["a", "b", "c"], 5, 27))  # seeded

    def test_tokens_per_second_counts_the_tokens_after_the_language(self):
        self.assertEqual(nllb_shape.throughput(512, 32, 2.0), 8192.0)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
