"""The NLLB-200 / M2M-100 / mBART-50 part of the conformance generator: called by
tools/make_conformance.py (which holds the shared text, SentencePiece, search and margin code)
and writes, under OUT,

  families/<variant>/   a random-weight model as save_pretrained writes it (model and
                        tokenizer), references.jsonl, tokenizer.jsonl, meta.json
  refused/<family>_<case>/  tiny models the loader must refuse, meta.json naming the field

Variants: nllb (NllbTokenizer, legacy_behaviour false), nllb_legacy (legacy_behaviour true),
m2m100 (M2M100Tokenizer: vocab.json + SentencePiece, __xx__ codes), mbart50
(MBart50Tokenizer, xx_XX codes). The models are M2M100ForConditionalGeneration (nllb,
nllb_legacy, m2m100) and MBartForConditionalGeneration (mbart50), pre-norm with the final
encoder/decoder layer norms as the families have them. tests/conformance/README.md describes
every file.

Deterministic as the Marian part: one BPE SentencePiece model trained single-threaded on
text the project writes itself, seeded weights, transformers on the CPU in float32 with one
thread per process; the end-of-sentence boost is chosen by a fixed greedy calibration.
"""
import json
import math
import multiprocessing
import os
import random
import re
import traceback

import make_conformance as mc

SEED = 51  # the issue number; every family generator derives its seed from it
SPM_SIZE = 600
TINY_SPM_SIZE = 200
BOS, PAD, EOS, UNK, MASK = "<s>", "<pad>", "</s>", "<unk>", "<mask>"
FAIRSEQ_SPM_IDS = dict(unk_id=0, bos_id=1, eos_id=2, pad_id=-1)  # as fairseq's models
MAX_LENGTH = 40  # decoder start + at most 39 tokens (the language token, ..., </s>)
PERTURBATION = 3e-3  # as the Marian variants' (make_conformance.PERTURBATION)
# Init candidates (see calibrate), tried in this order: gains of the layers' output
# projections (fc2, attention out_proj) and the token embeddings' std. With pre-norm layers
# the residual stream carries the input token's embedding to the final norm, and with lm_head
# tied to the embeddings the model then keeps predicting the token it was fed ("under under
# under ..." with the Marian variants' gains and embeddings). Larger FFN branches make the
# next token a function of the current token and position (the FFN's input), smaller
# embeddings give the position more weight in it (the model then varies from step to step),
# and the cross-attention makes it depend on the source; attention branches much larger than
# the FFN's would make every step alike (the source is the same each step). The final norm's
# gain grows as the embeddings shrink (OUTPUT_GAIN * EMBEDDING_STD / std), keeping the logits
# as peaked.
RESIDUAL_GAINS = ((1.0, 1.0), (2.0, 1.0), (3.0, 1.0), (4.0, 1.0), (3.0, 2.0), (5.0, 1.5))
EMBEDDING_STDS = (0.1, 0.05, 0.025)
INIT_CANDIDATES = tuple((fc2, out_proj, std) for std in EMBEDDING_STDS
                        for fc2, out_proj in RESIDUAL_GAINS)
# </s> logit boosts tried with the chosen gains.
EOS_BOOSTS = (4.0, 8.0, 12.0, 16.0, 20.0, 24.0, 28.0)
END_TARGET = 0.6
CALIBRATION_RECORDS = 12
POSITION_STD = 0.5  # mBART's learned positions, at the scale of M2M-100's sinusoids

NLLB_CODES = ("eng_Latn", "deu_Latn", "fra_Latn", "spa_Latn", "ita_Latn", "por_Latn",
              "rus_Cyrl", "ell_Grek", "zho_Hans", "zho_Hant")
# Another subset in another order: the ids must come from the tokenizer files, not a table.
NLLB_LEGACY_CODES = ("deu_Latn", "eng_Latn", "fra_Latn", "ukr_Cyrl", "jpn_Jpan", "spa_Latn")

COMMON = dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
              decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
              scale_embedding=True, pad_token_id=1, bos_token_id=0, eos_token_id=2,
              decoder_start_token_id=2, dropout=0.1, attention_dropout=0.1,
              activation_dropout=0.0, encoder_layerdrop=0.0, decoder_layerdrop=0.0,
              init_std=0.02)
# mBART-50's config.json carries fairseq's architecture flags (transformers ignores them; the
# values here are those of facebook/mbart-large-50-many-to-many-mmt).
MBART_FLAGS = dict(add_final_layer_norm=True, normalize_before=True, normalize_embedding=True,
                   static_position_embeddings=False, add_bias_logits=False)

# name -> family, description, config changes, tokenizer options, source language, targets
VARIANTS = {
    "nllb": dict(
        family="nllb", desc="NLLB-200 layout: M2M100ForConditionalGeneration, relu, "
        "NllbTokenizer legacy_behaviour false ([src_lang] X </s>), 10 FLORES-200 codes",
        config=dict(activation_function="relu", max_position_embeddings=1024),
        codes=NLLB_CODES, legacy=False, source="eng_Latn",
        targets=("deu_Latn", "fra_Latn", "zho_Hans"), other_source="fra_Latn"),
    "nllb_legacy": dict(
        family="nllb", desc="NLLB-200 with legacy_behaviour true (X </s> [src_lang]), "
        "d_model 64 (head_dim 16), 2+1 layers, 6 codes in an order of their own",
        config=dict(activation_function="relu", max_position_embeddings=1024, d_model=64,
                    decoder_layers=1),
        codes=NLLB_LEGACY_CODES, legacy=True, source="eng_Latn",
        targets=("fra_Latn", "ukr_Cyrl", "spa_Latn"), other_source="deu_Latn"),
    "m2m100": dict(
        family="m2m100", desc="M2M-100 layout: M2M100ForConditionalGeneration, relu, "
        "M2M100Tokenizer (vocab.json in an order of its own, lacking 4 SentencePiece pieces; "
        "__xx__ codes; [__src__] X </s>)",
        config=dict(activation_function="relu", max_position_embeddings=1024),
        source="en", targets=("de", "fr", "ja"), other_source="fr"),
    "mbart50": dict(
        family="mbart50", desc="mBART-50 many-to-many layout: MBartForConditionalGeneration, "
        "gelu, learned positions, layernorm_embedding, MBart50Tokenizer (xx_XX codes; "
        "[src_lang] X </s>)",
        config=dict(activation_function="gelu", max_position_embeddings=256, **MBART_FLAGS),
        source="en_XX", targets=("de_DE", "fr_XX", "zh_CN"), other_source="fr_XX"),
}
# Tokenizer class, model and config classes, how a language code is spelled as a token, the
# pattern of the codes among the tokenizer's tokens, the SentencePiece model type.
FAMILIES = {
    "nllb": dict(tokenizer="NllbTokenizer", model="M2M100ForConditionalGeneration",
                 config="M2M100Config", token="{}", pattern=r"^[a-z]{3}_[A-Z][a-z]{3}$",
                 spm="bpe"),
    "m2m100": dict(tokenizer="M2M100Tokenizer", model="M2M100ForConditionalGeneration",
                   config="M2M100Config", token="__{}__", pattern=r"^__[a-z]{2,3}__$",
                   spm="bpe"),
    # mBART-50's "sentencepiece.bpe.model" is a unigram model (XLM-R's), and transformers
    # 5.17's MBart50Tokenizer rebuilds it as a Unigram tokenizer: a BPE model would come out
    # segmented differently from SentencePiece's.
    "mbart50": dict(tokenizer="MBart50Tokenizer", model="MBartForConditionalGeneration",
                    config="MBartConfig", token="{}", pattern=r"^[a-z]{2}_[A-Z]{2}$",
                    spm="unigram"),
}
TINY = dict(d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
            decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32)
# Models the loader must refuse: name -> (variant it is built like, field, value, why). A value
# of None with a file name as the field: that file is missing.
REFUSED = {
    "nllb_no_sentencepiece_model": (
        "nllb", "sentencepiece.bpe.model", None,
        "the tokenizer's SentencePiece model is missing (the engine tokenizes with it; "
        "tokenizer.json alone is not enough for it)"),
    "m2m100_no_vocab_json": (
        "m2m100", "vocab.json", None,
        "M2M-100's piece -> id table is missing"),
    "m2m100_activation_tanh": (
        "m2m100", "activation_function", "tanh",
        "an activation transformers has (ACT2FN) but no engine implements"),
    "m2m100_scale_embedding_string": (
        "m2m100", "scale_embedding", "true",
        "scale_embedding must be a JSON boolean (transformers takes any non-empty string as "
        "true)"),
    "mbart50_add_final_layer_norm_false": (
        "mbart50", "add_final_layer_norm", False,
        "fairseq's flag says there is no final layer norm, but the weights have "
        "model.encoder.layer_norm / model.decoder.layer_norm and MBartForConditionalGeneration "
        "applies them regardless: the folder contradicts itself"),
    "mbart50_static_position_embeddings": (
        "mbart50", "static_position_embeddings", True,
        "sinusoidal positions in an mBART config: MBartForConditionalGeneration ignores the "
        "flag and uses the learned model.*.embed_positions"),
}

# The SentencePiece models' normalization: a rule table of the project's own in the format of
# sentencepiece's built-in ones (compiled into the model's precompiled_charsmap, which
# tokenizer.json carries too), a few entries of NFKC's kind: full-width ASCII, ligatures, a
# fraction, no-break and ideographic spaces, tab/newline/CR to a space, the ellipsis, two
# combining sequences. nmt_nfkc's own table would add 240 KB to each model and ~320 KB to
# each tokenizer.json; "identity" (no table) is refused by transformers 5.17's tokenizers-backed
# classes ("Cannot parse precompiled_charsmap").
NORMALIZATION_TSV = "conformance_families_normalization.tsv"
NORMALIZATION_RULES = tuple((f"{c:X}", f"{c - 0xFEE0:X}") for c in range(0xFF01, 0xFF5F)) + (
    ("FB00", "66 66"), ("FB01", "66 69"), ("FB02", "66 6C"), ("BD", "31 2044 32"),
    ("A0", "20"), ("3000", "20"), ("9", "20"), ("A", "20"), ("D", "20"),
    ("2026", "2E 2E 2E"), ("65 301", "E9"), ("61 300", "E0"))

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


# ---------------------------------------------------------------------------------------
# Tokenizers.

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
        mc.write_json(os.path.join(folder, "vocab.json"), vocab, indent=None, sort_keys=False)
    if v["family"] == "nllb":
        cfg.update(legacy_behaviour=v["legacy"], additional_special_tokens=list(v["codes"]))
    mc.write_json(os.path.join(folder, "tokenizer_config.json"), cfg, indent=2)


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
    min_tokens = len(vocab) if vocab else len(mc.spm_pieces(spm_bytes))
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


# ---------------------------------------------------------------------------------------
# Models.

def model_classes(variant):
    import transformers

    fam = FAMILIES[VARIANTS[variant]["family"]]
    return getattr(transformers, fam["config"]), getattr(transformers, fam["model"])


def output_gain(init):
    return mc.OUTPUT_GAIN * mc.EMBEDDING_STD / init[2]


def init_family_weights(model, seed, init):
    """Random weights from a seeded generator, parameter by parameter in name order, by the
    Marian variants' rules (make_conformance.init_weights: gain/sqrt(fan_in) linear layers,
    fc2 rows zero-mean, layer norms 1 +- 0.2), mBART's learned
    positions std POSITION_STD, and <pad>'s embedding row zero as in a fairseq-trained model
    (its padding_idx row gets no gradient); the output projections of attention and FFN
    init: (fc2 gain, out_proj gain, embedding std), see INIT_CANDIDATES; the final decoder
    norm scales by output_gain(init). Returns the final decoder norm's base parameters."""
    import torch

    gen = torch.Generator().manual_seed(seed)

    def randn(shape, std):
        return torch.randn(shape, generator=gen, dtype=torch.float32) * std

    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if name.endswith("embed_positions.weight"):
                p.copy_(randn(p.shape, POSITION_STD))  # mBART's learned positions
            elif name.endswith("embed_tokens.weight") or name.endswith("shared.weight") \
                    or name == "lm_head.weight":
                p.copy_(randn(p.shape, init[2]))
            elif "layer_norm" in name or "layernorm" in name:
                p.copy_((1.0 if name.endswith(".weight") else 0.0) + randn(p.shape, 0.2))
            elif name.endswith(".weight"):
                gain = mc.FFN_GAIN if (".fc1." in name or ".fc2." in name) else mc.ATTENTION_GAIN
                w = randn(p.shape, gain / math.sqrt(p.shape[1]))
                if ".fc2." in name:
                    w -= w.mean(dim=1, keepdim=True)
                if ".fc2." in name:
                    w *= init[0]
                elif ".out_proj." in name:
                    w *= init[1]
                p.copy_(w)
            elif name.endswith(".bias"):
                p.copy_(randn(p.shape, 0.1))
            else:
                raise RuntimeError(f"conformance_families: no init rule for parameter {name}")
        shared = model.model.shared.weight
        shared[model.config.pad_token_id].zero_()
        for emb in (model.model.encoder.embed_tokens, model.model.decoder.embed_tokens,
                    model.lm_head):
            if emb.weight.data_ptr() != shared.data_ptr():
                emb.weight.copy_(shared)
        norm = model.model.decoder.layer_norm
        norm.weight.mul_(output_gain(init))
        return norm.weight.clone(), norm.bias.clone()


def set_eos_boost(model, base_bias, boost):
    """The final decoder norm's bias adds boost to the </s> logit (the Marian variants' rule)."""
    import torch

    with torch.no_grad():
        w_eos = model.lm_head.weight[model.config.eos_token_id]
        model.model.decoder.layer_norm.bias.copy_(base_bias + boost * w_eos / w_eos.dot(w_eos))


def greedy_sample(model, tok, sample, codes):
    """Greedy ids of each (id, source language, target language, text) of sample."""
    import torch

    kw = family_generate_kwargs(MAX_LENGTH)
    found = []
    with torch.no_grad():
        for _, src, tgt, text in sample:
            set_source_language(tok, src)
            enc = tok(text, return_tensors="pt")
            out = model.generate(**enc, **kw["greedy"], **kw["common"],
                                 forced_bos_token_id=codes[tgt])
            found.append(mc._strip(out[0].tolist(), model.config.pad_token_id))
    return found


def calibrate(folder, variant, fields, seed, tok, records, codes):
    """Chooses the init and the </s> boost by greedy on CALIBRATION_RECORDS records spread
    over the list: first the init of INIT_CANDIDATES whose outputs are the most varied (mean
    share of distinct tokens between the language token and </s>, times the share of distinct
    outputs) with the smallest boost, where most outputs run long; then, with that init, the
    boost of EOS_BOOSTS whose fraction of outputs ending before max_length is closest to
    END_TARGET among those averaging >= 6 tokens (else the longest). Earlier in the lists on
    ties; deterministic (the CPU runs one thread). Returns (model with the chosen init, the
    init, the boost, the table of what each gave)."""
    sample = records[::max(1, len(records) // CALIBRATION_RECORDS)][:CALIBRATION_RECORDS]
    table = []

    def measure(model, init, boost):
        set_eos_boost(model, model._conformance_norm[2], boost)
        outs = greedy_sample(model, tok, sample, codes)
        bodies = [ids[1:-1] for ids in outs if len(ids) > 2]
        row = {"init": list(init), "eos_boost": boost,
               "ended_before_max_length": sum(len(i) < MAX_LENGTH - 1 for i in outs) / len(outs),
               "mean_length": sum(len(i) for i in outs) / len(outs),
               "distinct_token_share": sum(len(set(b)) / len(b) for b in bodies) / len(outs),
               "distinct_outputs": len({tuple(i) for i in outs}) / len(outs)}
        table.append(row)
        return row

    rows = [measure(build_family_model(folder, variant, fields, seed, init), init, EOS_BOOSTS[0])
            for init in INIT_CANDIDATES]
    init = INIT_CANDIDATES[rows.index(max(
        rows, key=lambda r: r["distinct_token_share"] * r["distinct_outputs"]))]
    model = build_family_model(folder, variant, fields, seed, init)
    rows = [measure(model, init, b) for b in EOS_BOOSTS]
    ok = [r for r in rows if r["mean_length"] >= 6]
    best = (min(ok, key=lambda r: abs(r["ended_before_max_length"] - END_TARGET)) if ok else
            max(rows, key=lambda r: r["mean_length"]))
    set_eos_boost(model, model._conformance_norm[2], best["eos_boost"])
    return model, init, best["eos_boost"], table


def build_family_model(folder, variant, fields, seed, init):
    """Builds and initialises the model (not yet saved); returns it."""
    import torch

    config_cls, model_cls = model_classes(variant)
    torch.manual_seed(seed)
    model = model_cls(config_cls(**fields)).eval()
    weight, bias = init_family_weights(model, seed, init)
    model._conformance_norm = (folder, weight, bias)
    return model


def save_family_model(model, folder):
    """save_pretrained (float32 safetensors) with the generation config the family's hub
    models have (+ forced_eos_token_id, see family_generate_kwargs); returns the tensors'
    names and shapes as saved."""
    from safetensors import safe_open

    gc = model.generation_config
    gc.forced_eos_token_id = model.config.eos_token_id
    gc.decoder_start_token_id = model.config.decoder_start_token_id
    del model._conformance_norm
    model.save_pretrained(folder)
    with safe_open(os.path.join(folder, "model.safetensors"), "pt") as f:
        return {k: list(f.get_slice(k).get_shape()) for k in sorted(f.keys())}


def load_family_model(variant, folder):
    import torch

    _, model_cls = model_classes(variant)
    return model_cls.from_pretrained(folder, dtype=torch.float32).float().eval()


def check_family_reload(variant, folder, fields, problems):
    """from_pretrained gives back every saved tensor and the config fields; lm_head is tied to
    the shared embedding."""
    import torch
    from safetensors.torch import load_file

    model = load_family_model(variant, folder)
    sd = model.state_dict()
    for k, v in load_file(os.path.join(folder, "model.safetensors")).items():
        if k not in sd or not torch.equal(sd[k], v):
            problems.append(f"{folder}: {k} differs after from_pretrained")
    for k, want in fields.items():
        got = getattr(model.config, k, None)
        if got != want:
            problems.append(f"{folder}: config {k} reloads as {got!r}, not {want!r}")
    if not torch.equal(model.lm_head.weight, model.model.shared.weight):
        problems.append(f"{folder}: lm_head differs from model.shared after reload")
    if not torch.equal(model.model.encoder.embed_tokens.weight, model.model.shared.weight):
        problems.append(f"{folder}: encoder embeddings differ from model.shared after reload")


# ---------------------------------------------------------------------------------------
# References.

def family_generate_kwargs(max_length):
    """generate()'s arguments for every record; each record adds forced_bos_token_id = its
    target language's token. forced_eos_token_id is passed (mBART-50's hub config has it,
    NLLB's and M2M-100's do not) so that every hypothesis ends with </s>, as the Marian
    references do."""
    return {
        "greedy": dict(num_beams=1, do_sample=False, max_length=max_length),
        "beam4": dict(num_beams=4, num_return_sequences=1, do_sample=False,
                      max_length=max_length, length_penalty=1.0, early_stopping=False),
        "nbest4": dict(num_beams=4, num_return_sequences=4, do_sample=False,
                       max_length=max_length, length_penalty=1.0, early_stopping=False),
        "common": dict(decoder_start_token_id=2, eos_token_id=2, forced_eos_token_id=2,
                       pad_token_id=1),
        "per_record": {"forced_bos_token_id": "the id of target_language's token"},
    }


def translate_family_chunk(task):
    """greedy, beam 4, 4-best (make_conformance.search_modes) for each (id, source language,
    target language, source) of one chunk, one at a time. Returns the records and margins."""
    variant, folder, items, eps = task
    import torch

    tok = load_tokenizer(variant, folder)
    model = load_family_model(variant, folder)
    codes = language_ids(variant, tok)
    kw = family_generate_kwargs(MAX_LENGTH)
    records, greedy_gaps, nbest_gaps, problems, unstable = [], [], [], [], []
    beam_mismatch = 0
    with torch.no_grad():
        for sid, src, tgt, source in items:
            set_source_language(tok, src)
            enc = tok(source, return_tensors="pt")
            rec = {"id": sid, "source_language": src, "target_language": tgt,
                   "source": source, "source_ids": enc["input_ids"][0].tolist()}
            found, g, n, moved = mc.search_modes(model, tok, enc, kw, 1, [], eps,
                                                 {"forced_bos_token_id": codes[tgt]})
            rec.update(found)
            greedy_gaps.append(g)
            nbest_gaps.append(n)
            unstable.append(moved)
            beam_mismatch += rec["nbest4"][0]["ids"] != rec["beam4"]["ids"]
            for h in rec["nbest4"] + [rec["greedy"], rec["beam4"]]:
                if h["ids"][-1:] != [2] or h["ids"][:1] != [codes[tgt]]:
                    problems.append(f"{folder} id {sid} {tgt}: a hypothesis does not start "
                                    f"with the language token and end with </s>")
            records.append(rec)
    return records, dict(greedy_gaps=greedy_gaps, nbest_gaps=nbest_gaps, unstable=unstable,
                         beam_mismatch=beam_mismatch, problems=problems)


def reference_items(variant, plain_items):
    """(id, source language, target language, source text): each sentence once, the target
    cycling over the variant's three; the first six sentences also into the other two targets
    (one source, three languages); every seventh also in the made-up language
    (make_conformance.to_target) from other_source."""
    v = VARIANTS[variant]
    items = []
    for k, (sid, s) in enumerate(plain_items):
        targets = v["targets"] if k < 6 else (v["targets"][k % 3],)
        items += [(sid, v["source"], t, s) for t in targets]
        if k % 7 == 3:
            items.append((sid, v["other_source"], v["targets"][(k + 1) % 3], mc.to_target(s)))
    return items


def distinct_summary(records):
    """How varied the 4-best hypotheses are: a random model that repeats one token tests
    little."""
    hyps = [h["ids"][1:-1] for r in records for h in r["nbest4"]]
    one_token = sum(1 for h in hyps if len(set(h)) <= 1)
    distinct = [len(set(h)) / len(h) for h in hyps if h]
    return {"hypotheses_of_one_repeated_token_or_empty": one_token,
            "mean_distinct_token_ratio": sum(distinct) / max(1, len(distinct)),
            "distinct_texts_beam4": len({r["beam4"]["text"] for r in records})}


# ---------------------------------------------------------------------------------------

def family_corpus():
    """The SentencePiece training text: template sentences, sentences.en's Latin lines and
    the made-up language of both (make_conformance.english_corpus / to_target)."""
    rng = random.Random(SEED)
    english = mc.english_corpus(rng, 3000)
    return english, [mc.to_target(s) for s in english]


def tokenizer_with_fallback(folder, variant, candidates, seed, drop, problems):
    """build_tokenizer with the first SentencePiece model of candidates ((normalization name,
    bytes), ...) that transformers builds a tokenizer from; M2M-100's vocab.json is made from
    its pieces (drop: leave 4 out). Returns (spm bytes, normalization, vocab, dropped pieces,
    files written, codes -> ids, how it was built)."""
    failures = []
    for norm, spm_bytes in candidates:
        vocab = dropped = None
        if VARIANTS[variant]["family"] == "m2m100":
            pieces = mc.spm_pieces(spm_bytes)
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


def prepare_variant_task(task):
    """prepare_variant in a worker process: (plan or None, problems). A variant that fails is
    reported and left out, so that one run shows every failure."""
    out, n, variant, spms, plain_items = task
    problems = []
    try:
        return prepare_variant(out, n, variant, spms, plain_items, problems), problems
    except Exception:  # noqa: BLE001 - reported, the run fails
        return None, problems + [f"families/{variant}: {traceback.format_exc()}"]


def prepare_variant(out, n, variant, spms, plain_items, problems):
    """Writes the tokenizer and the calibrated model of one variant; returns its plan.
    spms: SentencePiece model type -> [(normalization, model bytes), ...] (see
    tokenizer_with_fallback)."""
    import torch

    v = VARIANTS[variant]
    folder = os.path.join(out, "families", variant)
    os.makedirs(folder)
    seed = SEED * 1000 + n
    spm_bytes, norm, vocab, dropped, files, codes, how = tokenizer_with_fallback(
        folder, variant, spms[FAMILIES[v["family"]]["spm"]], seed, True, problems)
    tok = load_tokenizer(variant, folder)
    fields = dict(COMMON, **v["config"], vocab_size=vocab_size_of(variant, tok))
    items = reference_items(variant, plain_items)
    torch.set_num_threads(1)
    model, init, boost, table = calibrate(folder, variant, fields, seed, tok, items, codes)
    shapes = save_family_model(model, folder)
    check_family_reload(variant, folder, fields, problems)
    extra = []
    if dropped:
        extra.append(("pieces_missing_from_vocab_json",
                      " ".join(p.replace("\u2581", "") for p in dropped)))
    extra.append(("made_up_language", mc.to_target(plain_items[1][1])))
    tok_records, differs = tokenizer_records(variant, tok, spm_bytes, vocab, codes, extra)
    mc.write_jsonl(os.path.join(folder, "tokenizer.jsonl"), tok_records)
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        saved_config = json.load(f)
    with open(os.path.join(folder, "generation_config.json"), encoding="utf-8") as f:
        saved_generation = json.load(f)
    info = dict(description=v["desc"], seed=seed, config=saved_config,
                generation_config=saved_generation, tensors=shapes,
                weights="float32 safetensors written by save_pretrained",
                tokenizer=dict(cls=FAMILIES[v["family"]]["tokenizer"],
                               sentencepiece=dict(model_type=FAMILIES[v["family"]]["spm"],
                                                  normalization=norm),
                               built=how + " on a folder holding only "
                                     "sentencepiece.bpe.model" +
                                     (" + vocab.json" if vocab else "") +
                                     " + tokenizer_config.json, then save_pretrained",
                               save_pretrained_wrote=files, kwargs=tokenizer_kwargs(variant),
                               languages=codes, vocab_size=fields["vocab_size"],
                               mask_id=tok.get_vocab().get(MASK),
                               pieces_missing_from_vocab_json=dropped,
                               ids_differing_from_the_documented_layout=differs),
                init=dict(attention_gain=mc.ATTENTION_GAIN, ffn_gain=mc.FFN_GAIN,
                          embedding_std=init[2], output_gain=output_gain(init),
                          position_std=POSITION_STD, pad_embedding="zeros",
                          residual_gain=dict(fc2=init[0], out_proj=init[1]), eos_boost=boost,
                          calibration=table))
    return dict(variant=variant, folder=folder, items=items, info=info)


def build_refused(out, name, spec, tiny_spms, problems):
    """One refused/ case: a tiny model built like its variant, then the one fault."""
    variant, field, value, why = spec
    v = VARIANTS[variant]
    folder = os.path.join(out, "refused", name)
    os.makedirs(folder)
    tokenizer_with_fallback(folder, variant, tiny_spms[FAMILIES[v["family"]]["spm"]], SEED,
                            False, problems)
    tok = load_tokenizer(variant, folder)
    fields = dict(dict(COMMON, **v["config"]), **TINY, vocab_size=vocab_size_of(variant, tok))
    model = build_family_model(folder, variant, fields, SEED, INIT_CANDIDATES[0])
    save_family_model(model, folder)
    cfg_path = os.path.join(folder, "config.json")
    if value is None:
        os.remove(os.path.join(folder, field))
    else:
        with open(cfg_path, encoding="utf-8") as f:
            cfg = json.load(f)
        cfg[field] = value
        mc.write_json(cfg_path, cfg, indent=2)
    try:
        load_family_model(variant, folder)
        load_tokenizer(variant, folder)
        loads = "loads (model and tokenizer)"
    except Exception as e:  # noqa: BLE001 - recorded, not handled
        msg = (str(e).splitlines() or [""])[0][:200].replace(folder, "<folder>")
        loads = f"refuses: {type(e).__name__}: {msg}"
    mc.write_json(os.path.join(folder, "meta.json"), {
        "refuse_field": field, "value": value, "why": why, "transformers": loads,
        "built_like": variant, "versions": mc.versions()})


def family_spms(lines, size, model_type, log_path):
    """[(normalization, SentencePiece model)]: the project's rule table (NORMALIZATION_RULES),
    then nmt_nfkc as a fallback should transformers not take the first. The rule file is
    written beside log_path and named relative to it: its name is stored in the model."""
    rule_dir = os.path.dirname(log_path)
    with open(os.path.join(rule_dir, NORMALIZATION_TSV), "w", encoding="ascii") as f:
        f.write("".join(f"{a}\t{b}\n" for a, b in NORMALIZATION_RULES))
    cwd = os.getcwd()
    os.chdir(rule_dir)
    try:
        custom = mc.train_spm(lines, size, None, log_path, model_type, FAIRSEQ_SPM_IDS,
                              rule_tsv=NORMALIZATION_TSV)
    finally:
        os.chdir(cwd)
    return [("rules:" + NORMALIZATION_TSV, custom),
            ("nmt_nfkc", mc.train_spm(lines, size, "nmt_nfkc", log_path, model_type,
                                      FAIRSEQ_SPM_IDS))]


def write_families(out, sentences, plain_items, jobs, log_path):
    """Writes families/ and the families' refused/ cases under out; returns (summary,
    problems)."""
    import sentencepiece  # noqa: F401 - fail early where it is missing

    english, target = family_corpus()
    latin = [s for s in sentences if not mc.non_latin(s)]
    corpus = english + latin + target + [mc.to_target(s) for s in latin]
    spms = {t: family_spms(corpus, SPM_SIZE, t, log_path) for t in ("bpe", "unigram")}
    tiny_spms = {t: family_spms(english, TINY_SPM_SIZE, t, log_path) for t in ("bpe", "unigram")}
    problems, plans = [], []
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(min(jobs, len(VARIANTS)), initializer=mc._worker_init) as pool:
        prepared = pool.map(prepare_variant_task, [
            (out, n, variant, spms, plain_items) for n, variant in enumerate(VARIANTS)],
            chunksize=1)
    for plan, found in prepared:
        problems += found
        if plan is not None:
            plans.append(plan)
    for name, spec in REFUSED.items():
        try:
            build_refused(out, name, spec, tiny_spms, problems)
        except Exception:  # noqa: BLE001 - reported below, the run fails
            problems.append(f"refused/{name}: {traceback.format_exc()}")

    tasks, counts = [], []
    for p in plans:
        parts = mc.chunks(p["items"], max(1, jobs // len(plans)))
        counts.append(len(parts))
        tasks += [(p["variant"], p["folder"], c, PERTURBATION) for c in parts]
    with ctx.Pool(jobs, initializer=mc._worker_init) as pool:
        results = pool.map(translate_family_chunk, tasks, chunksize=1)

    summary, at = {}, 0
    for p, n in zip(plans, counts):
        recs = [r for rs, _ in results[at:at + n] for r in rs]
        stats = [st for _, st in results[at:at + n]]
        at += n
        problems += [x for st in stats for x in st["problems"]]
        recs, margins, left_out = mc.keep_decidable(recs, stats, MAX_LENGTH)
        mc.write_jsonl(os.path.join(p["folder"], "references.jsonl"), recs)
        kw = family_generate_kwargs(MAX_LENGTH)
        meta = {
            "versions": mc.versions(),
            "generate": kw,
            "max_decoding_length": MAX_LENGTH - 1,
            "precision": "float32 on the CPU, one thread per process, batch 1 (TF32 off)",
            "records": [[r["id"], r["source_language"], r["target_language"]] for r in recs],
            "min_margin": mc.MIN_MARGIN,
            "beam_step_perturbation": {"uniform_noise_per_step": PERTURBATION,
                                       "seeds": list(mc.PERTURBATION_SEEDS)},
            "score_convention": {
                "beam4/nbest4": "transformers' sequences_scores: sum of the tokens' log-probs "
                                "(log-softmax over the whole vocabulary; the forced language "
                                "token and a </s> forced at max_length count 0) divided by "
                                "len(ids), length_penalty 1.0",
                "greedy": "the same sum for the greedy ids divided by len(ids)",
                "ids": "generated ids without the decoder start token: the target language "
                       "token first, </s> last",
                "text": "the tokenizer's decode(ids, skip_special_tokens=True)",
            },
            "margins": margins, "left_out": left_out, "variety": distinct_summary(recs),
        }
        meta.update(p["info"])
        mc.write_json(os.path.join(p["folder"], "meta.json"), meta)
        summary[p["variant"]] = dict(margins, **meta["variety"],
                                     eos_boost=p["info"]["init"]["eos_boost"])
    return summary, problems

