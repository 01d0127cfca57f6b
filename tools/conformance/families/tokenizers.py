"""The families' tokenizers: the files a hub repository ships (SentencePiece model, M2M-100's
vocab.json, tokenizer_config.json), the tokenizer built from them and saved with
save_pretrained, its language ids, and tokenizer.jsonl's encode and decode cases."""
import os
import random
import re

from .variants import BOS, EOS, FAMILIES, MASK, PAD, UNK, VARIANTS
from ..records import write_json
from ..sentencepiece_models import spm_pieces


# Texts of tokenizer.jsonl: (case, text). The families' SentencePiece model saw no Cyrillic,
# Greek, CJK or emoji, so those come out as <unk>.
TOKENIZER_TEXTS = (
    ("plain", "The cat sat on the mat."),
    ("empty", ""),
    ("space", " "),
    ("spaces", "   "),
    ("leading_trailing_spaces", "  Hello there.  "),
    ("inner_spaces", "two  spaces   and three"),
    ("tab_newline", "tab\there and a\nnew line"),
    ("accents", "Zoë's café, naïve Björn and Renée"),
    ("normalized", "\ufb01ne \uff21\uff22\uff23 \u00bd e\u0301t\u00e9 \u2026"),
    ("no_break_space", "a\u00a0b c"),
    ("zero_width", "a\u200bb"),
    ("cyrillic", "Привет, мир"),
    ("greek", "Καλημέρα κόσμε"),
    ("cjk", "日本語のテキスト"),
    ("emoji", "ok 🙂 👍🏽"),
    ("unknown_run", "xyz ☃☃☃ end"),
    ("numbers", "1,234.56 € at 7:30 in 1998"),
    ("punctuation", "\"Quotes\" - (brackets) [x]!? ..."),
    ("single_char", "a"),
    ("special_literal", "Hello </s> world <unk> and <s>"),
    ("mask_literal", "a <mask> b"),
)


def fairseq_vocab(pieces):
    """fairseq's dictionary over SentencePiece ids: <s> 0, <pad> 1, </s> 2, <unk> 3, then the
    pieces (SentencePiece id i >= 3 at i + 1)."""
    vocab = {BOS: 0, PAD: 1, EOS: 2, UNK: 3}
    for i, p in enumerate(pieces[3:], start=3):
        vocab[p] = i + 1
    return vocab


def m2m100_vocab(pieces, rng, dropped):
    """M2M-100's vocab.json: the four specials, then the pieces in an order of their own (a
    fairseq dictionary is ordered by frequency in its training data, not by SentencePiece id),
    without the dropped pieces (a dictionary built from other data lacks some)."""
    rest = [p for p in pieces[3:] if p not in dropped]
    rng.shuffle(rest)
    return {tok: i for i, tok in enumerate([BOS, PAD, EOS, UNK] + rest)}


def dropped_pieces(pieces, rng):
    """Four multi-letter pieces that M2M-100's vocab.json leaves out."""
    cands = [p for p in pieces[3:] if len(p.lstrip("\u2581")) >= 3 and p.isprintable()]
    return sorted(rng.sample(cands, 4))


def write_tokenizer_inputs(folder, variant, spm_bytes, vocab=None):
    """What a hub repository of the family ships before transformers touches it: the
    SentencePiece model, M2M-100's vocab.json, and a tokenizer_config.json naming the class."""
    v = VARIANTS[variant]
    fam = FAMILIES[v["family"]]
    with open(os.path.join(folder, "sentencepiece.bpe.model"), "wb") as f:
        f.write(spm_bytes)
    cfg = {"tokenizer_class": fam["tokenizer"], "src_lang": v["source"],
           "tgt_lang": v["targets"][0], "model_max_length": 1024}
    if vocab is not None:
        write_json(os.path.join(folder, "vocab.json"), vocab, indent=None, sort_keys=False)
    if v["family"] == "nllb":
        cfg.update(legacy_behaviour=v["legacy"], additional_special_tokens=list(v["codes"]))
    write_json(os.path.join(folder, "tokenizer_config.json"), cfg, indent=2)


def tokenizer_kwargs(variant):
    v = VARIANTS[variant]
    kw = dict(src_lang=v["source"], tgt_lang=v["targets"][0])
    if v["family"] == "nllb":
        kw.update(legacy_behaviour=v["legacy"], additional_special_tokens=list(v["codes"]))
    return kw


def load_tokenizer(variant, folder, **kw):
    import transformers

    cls = getattr(transformers, FAMILIES[VARIANTS[variant]["family"]]["tokenizer"])
    return cls.from_pretrained(folder, **kw)


def construct_tokenizer(variant, folder, min_tokens):
    """The tokenizer of a folder holding the hub's input files (write_tokenizer_inputs):
    from_pretrained as for a hub folder, else the class's constructor on the files. Returns
    (tokenizer, how) for the first that has min_tokens tokens and tokenizes a plain sentence
    without <unk>; raises with what each attempt gave otherwise."""
    import transformers

    cls = getattr(transformers, FAMILIES[VARIANTS[variant]["family"]]["tokenizer"])
    spm_path = os.path.join(folder, "sentencepiece.bpe.model")
    kw = tokenizer_kwargs(variant)
    attempts = [("from_pretrained(folder)", lambda: cls.from_pretrained(folder, **kw))]
    if VARIANTS[variant]["family"] == "m2m100":
        attempts.append(("constructor(vocab_file, spm_file)", lambda: cls(
            vocab_file=os.path.join(folder, "vocab.json"), spm_file=spm_path, **kw)))
    else:
        attempts.append(("constructor(vocab_file)", lambda: cls(vocab_file=spm_path, **kw)))
    seen = []
    for how, make in attempts:
        try:
            tok = make()
        except Exception as e:  # noqa: BLE001 - the next attempt, or raised below
            seen.append(f"{how}: {type(e).__name__}: {e}")
            continue
        n = len(tok.get_vocab())
        ids = tok(TOKENIZER_TEXTS[0][1], add_special_tokens=False)["input_ids"]
        if n >= min_tokens and ids and tok.unk_token_id not in ids:
            return tok, how
        seen.append(f"{how}: {n} tokens, plain sentence -> {ids}")
    raise RuntimeError(f"{folder}: no tokenizer: " + "; ".join(seen))


def build_tokenizer(folder, variant, spm_bytes, vocab, problems):
    """Builds the tokenizer from the SentencePiece model (and vocab.json) as from_pretrained
    does for a hub folder that has only those, saves it with save_pretrained, and checks that
    the saved files give the same tokenizer. Returns (files save_pretrained wrote, codes ->
    ids, how it was built)."""
    write_tokenizer_inputs(folder, variant, spm_bytes, vocab)
    before = set(os.listdir(folder))
    min_tokens = len(vocab) if vocab else len(spm_pieces(spm_bytes))
    tok, how = construct_tokenizer(variant, folder, min_tokens)
    written = tok.save_pretrained(folder)
    # (save_pretrained also names files it did not write, such as M2M-100's added_tokens.json)
    names = sorted(n for n in {os.path.basename(str(p)) for p in written} |
                   (set(os.listdir(folder)) - before) if os.path.isfile(os.path.join(folder, n)))
    # save_pretrained may not keep the SentencePiece model (a tokenizers-backed class writes
    # tokenizer.json); the hub folders ship it, and the engine reads it: keep ours.
    with open(os.path.join(folder, "sentencepiece.bpe.model"), "wb") as f:
        f.write(spm_bytes)
    reloaded = load_tokenizer(variant, folder)
    codes = language_ids(variant, reloaded)
    if codes != language_ids(variant, tok):
        problems.append(f"{folder}: the saved tokenizer's language ids differ from the built one's")
    for _, text in TOKENIZER_TEXTS:
        if reloaded(text)["input_ids"] != tok(text)["input_ids"]:
            problems.append(f"{folder}: the saved tokenizer encodes {text!r} differently")
    return names, codes, how


def language_ids(variant, tok):
    """The model's language codes as it spells them -> token id, in id order."""
    fam = FAMILIES[VARIANTS[variant]["family"]]
    if VARIANTS[variant]["family"] == "m2m100":
        # M2M100Tokenizer keeps its codes out of get_vocab() (ids after vocab.json's).
        return dict(sorted(tok.lang_code_to_id.items(), key=lambda kv: kv[1]))
    pat = re.compile(fam["pattern"])
    vocab = tok.get_vocab()
    found = sorted((i, t) for t, i in vocab.items() if pat.match(t))
    out = {}
    for i, t in found:
        code = t[2:-2] if fam["token"] == "__{}__" else t
        out[code] = i
    return out


def vocab_size_of(variant, tok):
    """The model's vocabulary: every id the tokenizer has (the language codes included), and
    M2M-100's "madeupword" slots after the codes (m2m100_418M: 128,004 + 100 codes + 8 =
    128,112), which M2M100Tokenizer counts (num_madeup_words) without naming them."""
    size = max(list(tok.get_vocab().values()) + list(language_ids(variant, tok).values())) + 1
    if VARIANTS[variant]["family"] == "m2m100":
        size += tok.num_madeup_words
    return size


def set_source_language(tok, code):
    tok.src_lang = code


def expected_ids(variant, sp, vocab, text, src_id):
    """The layout the README documents, from the SentencePiece model alone: the pieces' ids
    (fairseq offset, or vocab.json for M2M-100; unknown -> <unk> 3) with the language token
    and </s> where the family puts them. Compared with the tokenizer's ids in meta.json."""
    pieces = sp.encode(text, out_type=str)
    if vocab is None:
        ids = [sp.piece_to_id(p) + 1 if sp.piece_to_id(p) else 3 for p in pieces]
    else:
        ids = [vocab.get(p, 3) for p in pieces]
    v = VARIANTS[variant]
    if v["family"] == "nllb" and v["legacy"]:
        return ids + [2, src_id]
    return [src_id] + ids + [2]


def tokenizer_records(variant, tok, spm_bytes, vocab, codes, extra_texts):
    """tokenizer.jsonl's encode cases (every text with the default source language and two
    others, two texts with every language code) and decode cases; and the texts whose ids
    differ from expected_ids."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_proto=spm_bytes)
    v = VARIANTS[variant]
    texts = list(TOKENIZER_TEXTS) + extra_texts
    langs = [v["source"], v["other_source"], v["targets"][-1]]
    encode, differs = [], []
    plan = [(c, t, l) for l in langs for c, t in texts]
    plan += [(c, t, code) for code in codes for c, t in texts[:1] + texts[4:5]
             if code not in langs]
    for case, text, lang in plan:
        set_source_language(tok, lang)
        ids = tok(text)["input_ids"]
        encode.append({"kind": "encode", "case": case, "text": text, "language": lang,
                       "ids": ids})
        if ids != expected_ids(variant, sp, vocab, text, codes[lang]):
            differs.append({"case": case, "language": lang, "text": text})
    set_source_language(tok, v["source"])
    decode = []
    src = codes[v["source"]]
    tgt = codes[v["targets"][0]]
    plain = tok(TOKENIZER_TEXTS[0][1])["input_ids"]
    body = [i for i in plain if i not in (src, 2)]
    mask = tok.get_vocab().get(MASK, 3)  # M2M-100 has no <mask>: <unk> in its place
    crafted = [
        ("empty", []),
        ("eos_only", [2]),
        ("language_and_eos", [tgt, 2]),
        ("generated_layout", [tgt] + body + [2]),
        ("specials_inside", [0] + body[:2] + [1, 3] + body[2:] + [mask, 2]),
        ("language_mid_sentence", body[:3] + [tgt] + body[3:]),
        ("no_eos", body),
        ("unk_only", [3, 3]),
    ]
    for case, ids in crafted:
        decode.append({"kind": "decode", "case": case, "ids": ids,
                       "text": tok.decode(ids, skip_special_tokens=True)})
    for rec in encode[:len(texts)]:
        decode.append({"kind": "decode", "case": "encoded_" + rec["case"], "ids": rec["ids"],
                       "text": tok.decode(rec["ids"], skip_special_tokens=True)})
    return encode + decode, differs


def tokenizer_with_fallback(folder, variant, candidates, seed, drop, problems):
    """build_tokenizer with the first SentencePiece model of candidates ((normalization name,
    bytes), ...) that transformers builds a tokenizer from; M2M-100's vocab.json is made from
    its pieces (drop: leave 4 out). Returns (spm bytes, normalization, vocab, dropped pieces,
    files written, codes -> ids, how it was built)."""
    failures = []
    for norm, spm_bytes in candidates:
        vocab = dropped = None
        if VARIANTS[variant]["family"] == "m2m100":
            pieces = spm_pieces(spm_bytes)
            vrng = random.Random(seed)
            dropped = dropped_pieces(pieces, vrng) if drop else []
            vocab = m2m100_vocab(pieces, vrng, dropped)
        try:
            files, codes, how = build_tokenizer(folder, variant, spm_bytes, vocab, problems)
        except RuntimeError as e:
            failures.append(f"{norm}: {e}")
            for name in os.listdir(folder):
                os.remove(os.path.join(folder, name))
            continue
        if failures:
            problems.append(f"{folder}: fell back to {norm}: " + "; ".join(failures))
        return spm_bytes, norm, vocab, dropped, files, codes, how
    raise RuntimeError(f"{folder}: no tokenizer from any SentencePiece model: {failures}")
