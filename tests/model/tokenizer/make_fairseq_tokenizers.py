#!/usr/bin/python3
"""Tokenizer folders of the fairseq-dictionary schemes for tests/model/tokenizer/test_tokenizer_fairseq.cc.

Trains one small SentencePiece BPE model on the project's own sentences
(tests/conformance/sentences.en) and writes, under OUT:
  nllb/, nllb_legacy/   sentencepiece.bpe.model + tokenizer_config.json (NllbTokenizer; ids
                        computed from the SentencePiece ids, as without a tokenizer.json)
  nllb_json/            the same with a tokenizer.json whose vocabulary and added tokens give
                        the ids (the codes in an order of their own, so that a test can tell)
  m2m100/               vocab.json (pieces in a shuffled order) + sentencepiece.bpe.model
  mbart50/              MBart50Tokenizer, codes in special_tokens_map.json only
  spm.jsonl             per test text: SentencePiece's own pieces and ids, and its decoding
No transformers here: the files are written the way save_pretrained lays them out, and the
test checks the id layouts against SentencePiece's own output; transformers' ids are checked
by the conformance data (tests/conformance/families).
"""
import json
import os
import random
import sys

import sentencepiece as spm

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
NLLB_CODES = ["eng_Latn", "deu_Latn", "fra_Latn", "zho_Hans", "zho_Hant", "arb_Arab", "arz_Arab"]
M2M_CODES = ["en", "de", "fr", "zh", "no"]
MBART_CODES = ["en_XX", "de_DE", "fr_XX", "zh_CN"]
TEXTS = [
    "A man is riding a bike.",
    "Two dogs play in the snow, and one of them is barking!",
    "",
    "  leading and trailing spaces  ",
    "numbers 1234 and punctuation: (a), \"b\"; c?",
    "Latin accents: caf\u00e9, na\u00efve",
    "unknown characters: \u4e2d\u6587 and more",
]


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)


def folder(out, name, files):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(out, "spm.model"), "rb") as f:
        model = f.read()
    with open(os.path.join(d, "sentencepiece.bpe.model"), "wb") as f:
        f.write(model)
    for fname, obj in files.items():
        write_json(os.path.join(d, fname), obj)


def main(out):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(ROOT, "tests/conformance/sentences.en"), encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=os.path.join(out, "spm"), vocab_size=300,
        model_type="bpe", character_coverage=1.0, bos_id=1, eos_id=2, unk_id=0, pad_id=-1,
        num_threads=1, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(out, "spm.model"))
    n = sp.get_piece_size()
    pieces = [sp.id_to_piece(i) for i in range(3, n)]

    nllb_config = {"tokenizer_class": "NllbTokenizer", "src_lang": "eng_Latn",
                   "additional_special_tokens": NLLB_CODES}
    folder(out, "nllb", {"tokenizer_config.json": dict(nllb_config, legacy_behaviour=False)})
    folder(out, "nllb_legacy", {"tokenizer_config.json": dict(nllb_config, legacy_behaviour=True)})

    # tokenizer.json: fairseq's ids for the pieces, the codes reversed after them, then <mask>.
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for i in range(3, n):
        vocab[sp.id_to_piece(i)] = i + 1
    added = [{"id": i, "content": t, "special": True} for t, i in vocab.items() if i < 4]
    for k, code in enumerate(reversed(NLLB_CODES)):
        added.append({"id": n + 1 + k, "content": code, "special": True})
    added.append({"id": n + 1 + len(NLLB_CODES), "content": "<mask>", "special": True, "lstrip": True})
    folder(out, "nllb_json", {
        "tokenizer_config.json": {"tokenizer_class": "NllbTokenizer", "src_lang": "deu_Latn"},
        "tokenizer.json": {"version": "1.0", "added_tokens": added,
                           "model": {"type": "BPE", "vocab": vocab, "merges": []}}})

    order = list(range(len(pieces)))
    random.Random(7).shuffle(order)
    m2m_vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for k, j in enumerate(order):
        m2m_vocab[pieces[j]] = 4 + k
    folder(out, "m2m100", {
        "vocab.json": m2m_vocab,
        "tokenizer_config.json": {"tokenizer_class": "M2M100Tokenizer", "src_lang": "de", "tgt_lang": "fr",
                                  "additional_special_tokens": ["__%s__" % c for c in M2M_CODES]}})

    folder(out, "mbart50", {
        "tokenizer_config.json": {"tokenizer_class": "MBart50Tokenizer", "src_lang": None},
        "special_tokens_map.json": {"additional_special_tokens": MBART_CODES}})

    with open(os.path.join(out, "spm.jsonl"), "w", encoding="utf-8") as f:
        for text in TEXTS:
            ids = sp.encode(text)
            f.write(json.dumps({"text": text, "spm_ids": ids, "pieces": [sp.id_to_piece(i) for i in ids],
                                "spm_decoded": sp.decode(ids), "spm_size": n,
                                "trailing_space": text != text.rstrip(), "space_id": sp.piece_to_id("\u2581")},
                               ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
