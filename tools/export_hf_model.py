#!/usr/bin/env python3
"""Exports a Hugging Face translation model into the folder layout nmt-server loads: Marian
(OPUS-MT), M2M-100 and NLLB-200 (model_type m2m_100), mBART-50 (model_type mbart).

    pip install torch transformers sentencepiece safetensors huggingface_hub
    tools/export_hf_model.py Helsinki-NLP/opus-mt-en-de models/opus-mt-en-de [--dtype float16]
    tools/export_hf_model.py facebook/nllb-200-distilled-600M models/nllb-600m
    tools/export_hf_model.py --check models/opus-mt-en-de

The export loads the model with transformers' from_pretrained (a .bin or .safetensors
checkpoint) and writes it back with save_pretrained (config.json, model.safetensors,
generation_config.json). The tokenizer files are copied byte for byte from the hub (or from
MODEL when it is a local folder): Marian's source.spm, target.spm, vocab.json,
tokenizer_config.json (+ target_vocab.json with separate vocabularies); the families'
sentencepiece.bpe.model, tokenizer_config.json, tokenizer.json (NLLB, mBART-50; written by
the tokenizer's save_pretrained where the hub has none), vocab.json (M2M-100), and
special_tokens_map.json / added_tokens.json where the hub has them. It prints every file it
wrote with its size and origin, then checks the folder.

--check DIR only reads files (no network, no torch): it says whether DIR has every file the
server needs, whether config.json describes a model the server supports and whether the
safetensors header, the vocabularies and the special token ids agree with it. Exit status 0
when the folder is loadable, 1 with one line per problem otherwise.
"""
import argparse
import json
import os
import shutil
import struct
import sys
import tempfile

MODEL_FILES = ("config.json", "model.safetensors", "generation_config.json")
# Tokenizer files per tokenizer layout: (required, copied when the hub has them).
TOKENIZER_LAYOUTS = {
    "marian": (("source.spm", "target.spm", "vocab.json", "tokenizer_config.json"), ()),
    "nllb": (("sentencepiece.bpe.model", "tokenizer_config.json", "tokenizer.json"),
             ("special_tokens_map.json",)),
    "m2m100": (("sentencepiece.bpe.model", "vocab.json", "tokenizer_config.json"),
               ("special_tokens_map.json", "added_tokens.json")),
    "mbart50": (("sentencepiece.bpe.model", "tokenizer_config.json", "tokenizer.json"),
                ("special_tokens_map.json",)),
}
LAYOUT_NAMES = {"marian": "marian", "nllb": "m2m_100 (NLLB-200)", "m2m100": "m2m_100 (M2M-100)",
                "mbart50": "mbart (mBART-50)"}
SPM_FILES = ("source.spm", "target.spm", "sentencepiece.bpe.model")
# M2M100Tokenizer's language code sets (tokenizer_config.json language_codes) and their sizes.
M2M100_CODE_COUNTS = {"m2m100": 100, "wmt21": 8}
CONFIG_INT_FIELDS = (
    "d_model",
    "encoder_layers",
    "decoder_layers",
    "encoder_attention_heads",
    "decoder_attention_heads",
    "encoder_ffn_dim",
    "decoder_ffn_dim",
    "vocab_size",
    "max_position_embeddings",
)
CONFIG_ID_FIELDS = ("pad_token_id", "eos_token_id", "decoder_start_token_id")
# Per model_type: the architectures it may name, and fairseq-era fields (of the Bart-era
# configs) whose other values describe another architecture than the family's: the server
# refuses them, as model/config/model_config.cc does. Marian: post-norm, sinusoidal positions, no
# embedding norm; M2M-100 / NLLB: pre-norm with final norms, sinusoidal positions; mBART:
# pre-norm with final norms, learned positions, layernorm_embedding.
FAMILIES = {
    "marian": (("MarianMTModel", "MarianModel"), {
        "normalize_before": False, "add_final_layer_norm": False, "normalize_embedding": False,
        "layernorm_embedding": False, "static_position_embeddings": True,
        "add_bias_logits": False, "is_decoder": False, "is_encoder_decoder": True}),
    "m2m_100": (("M2M100ForConditionalGeneration", "M2M100Model"), {
        "normalize_before": True, "add_final_layer_norm": True, "normalize_embedding": False,
        "layernorm_embedding": False, "static_position_embeddings": True,
        "add_bias_logits": False, "is_decoder": False, "is_encoder_decoder": True}),
    "mbart": (("MBartForConditionalGeneration", "MBartModel"), {
        "normalize_before": True, "add_final_layer_norm": True, "normalize_embedding": True,
        "layernorm_embedding": True, "static_position_embeddings": False,
        "add_bias_logits": False, "is_decoder": False, "is_encoder_decoder": True}),
}
BOOL_FIELDS = ("scale_embedding", "tie_word_embeddings", "share_encoder_decoder_embeddings")
ACTIVATIONS = ("swish", "silu", "relu", "gelu")
DTYPES = ("F32", "F16", "BF16")
EMBEDDING_NAMES = ("model.encoder.embed_tokens.weight", "model.shared.weight")
# Per-layer weights the engine reads (design §3); each has .weight and .bias.
ENCODER_LAYER_PARTS = (
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj",
    "self_attn_layer_norm", "fc1", "fc2", "final_layer_norm",
)
DECODER_LAYER_PARTS = ENCODER_LAYER_PARTS + (
    "encoder_attn.q_proj", "encoder_attn.k_proj", "encoder_attn.v_proj", "encoder_attn.out_proj",
    "encoder_attn_layer_norm",
)
# Per-stack norms of the pre-norm families (.weight and .bias): the final norm, and mBART's
# norm of the embeddings.
STACK_NORMS = {"marian": (), "m2m_100": ("layer_norm",), "mbart": ("layer_norm", "layernorm_embedding")}


def tokenizer_layout(model_type, path):
    """marian, nllb, m2m100 or mbart50: which tokenizer files the model folder needs. An
    m2m_100 model is NLLB-200 unless its tokenizer_config.json names M2M100Tokenizer (or,
    without one, it has a vocab.json)."""
    if model_type == "mbart":
        return "mbart50"
    if model_type != "m2m_100":
        return "marian"
    try:
        with open(os.path.join(path, "tokenizer_config.json"), encoding="utf-8") as f:
            cls = json.load(f).get("tokenizer_class") or ""
        return "m2m100" if cls.startswith("M2M100") else "nllb"
    except (OSError, ValueError, AttributeError):
        return "m2m100" if os.path.isfile(os.path.join(path, "vocab.json")) else "nllb"


def _read_json(path, problems):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        problems.append(f"{os.path.basename(path)} is not valid JSON: {e}")
        return None


def _safetensors_header(path, problems):
    """Returns the tensor table of a safetensors file, or None after noting why not."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            problems.append("model.safetensors is truncated: no header length")
            return None
        (n,) = struct.unpack("<Q", head)
        if n == 0 or 8 + n > size:
            problems.append(f"model.safetensors is truncated: header of {n} bytes in a {size}-byte file")
            return None
        try:
            header = json.loads(f.read(n))
        except ValueError as e:
            problems.append(f"model.safetensors header is not valid JSON: {e}")
            return None
    header.pop("__metadata__", None)
    data_size = size - 8 - n
    for name, t in header.items():
        if t.get("dtype") not in DTYPES:
            problems.append(f"model.safetensors: tensor {name} has dtype {t.get('dtype')}, expected one of {', '.join(DTYPES)}")
        end = t.get("data_offsets", [0, 0])[1]
        if end > data_size:
            problems.append(f"model.safetensors: tensor {name} ends at byte {end} beyond the data ({data_size} bytes)")
    return header


def _check_config(cfg, problems):
    model_type = cfg.get("model_type")
    if model_type not in FAMILIES:
        problems.append(f"config.json: model_type is {model_type!r}, expected one of "
                        f"{', '.join(repr(f) for f in FAMILIES)}")
        return
    architectures, fixed = FAMILIES[model_type]
    for field in CONFIG_INT_FIELDS:
        v = cfg.get(field)
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            problems.append(f"config.json: {field} must be a positive integer, found {v!r}")
    for field in CONFIG_ID_FIELDS:
        v = cfg.get(field)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            problems.append(f"config.json: {field} must be a token id, found {v!r}")
    act = cfg.get("activation_function")
    if act not in ACTIVATIONS:
        problems.append(f"config.json: activation_function {act!r} is not supported (use one of {', '.join(ACTIVATIONS)})")
    d = cfg.get("d_model")
    for field in ("encoder_attention_heads", "decoder_attention_heads"):
        h = cfg.get(field)
        if isinstance(d, int) and isinstance(h, int) and h > 0 and d % h:
            problems.append(f"config.json: d_model {d} is not a multiple of {field} {h}")
    for field in BOOL_FIELDS:
        if field in cfg and not isinstance(cfg[field], bool):
            problems.append(f"config.json: {field} must be true or false, found {cfg[field]!r}")
    for field, value in fixed.items():
        if field in cfg and cfg[field] is not None and cfg[field] is not value:
            problems.append(f"config.json: {field} {cfg[field]!r} is not supported ({model_type}: {value!r})")
    for a in cfg.get("architectures") or []:
        if a not in architectures:
            problems.append(f"config.json: architectures {cfg['architectures']!r} is not supported ({architectures[0]})")
    forced = cfg.get("forced_eos_token_id")
    if forced is not None and forced != cfg.get("eos_token_id"):
        problems.append(f"config.json: forced_eos_token_id {forced!r} is not supported (only eos_token_id)")
    if not cfg.get("share_encoder_decoder_embeddings", True):
        v = cfg.get("decoder_vocab_size")
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v <= 0):
            problems.append(f"config.json: decoder_vocab_size must be a positive integer, found {v!r}")


def target_vocab_size(cfg):
    """Rows of the decoder embeddings and lm_head, as transformers' MarianMTModel sizes them."""
    if cfg.get("share_encoder_decoder_embeddings", True):
        return cfg.get("vocab_size")
    return cfg.get("decoder_vocab_size") or cfg.get("vocab_size")


def _check_shape(tensors, name, want, problems):
    if tensors[name].get("shape") != want:
        problems.append(f"model.safetensors: {name} has shape {tensors[name].get('shape')}, config.json says {want}")


def _check_weights(cfg, tensors, problems):
    d, tv = cfg.get("d_model"), target_vocab_size(cfg)
    model_type = cfg.get("model_type")
    emb = next((n for n in EMBEDDING_NAMES if n in tensors), None)
    if emb is None:
        problems.append(f"model.safetensors: no embedding matrix ({' or '.join(EMBEDDING_NAMES)})")
    else:
        _check_shape(tensors, emb, [cfg.get("vocab_size"), d], problems)
    if not cfg.get("share_encoder_decoder_embeddings", True):
        if "model.decoder.embed_tokens.weight" not in tensors:
            problems.append("model.safetensors: no model.decoder.embed_tokens.weight "
                            "(share_encoder_decoder_embeddings is false)")
        else:
            _check_shape(tensors, "model.decoder.embed_tokens.weight", [tv, d], problems)
    if not cfg.get("tie_word_embeddings", True) and "lm_head.weight" not in tensors:
        problems.append("model.safetensors: no lm_head.weight (tie_word_embeddings is false)")
    if "lm_head.weight" in tensors:
        _check_shape(tensors, "lm_head.weight", [tv, d], problems)
    if "final_logits_bias" in tensors:
        _check_shape(tensors, "final_logits_bias", [1, tv], problems)
    for side, parts in (("encoder", ENCODER_LAYER_PARTS), ("decoder", DECODER_LAYER_PARTS)):
        for norm in STACK_NORMS.get(model_type, ()):
            for w in ("weight", "bias"):
                if f"model.{side}.{norm}.{w}" not in tensors:
                    problems.append(f"model.safetensors: no model.{side}.{norm}.{w} ({model_type} has it)")
        if model_type == "mbart":
            name = f"model.{side}.embed_positions.weight"
            if name not in tensors:
                problems.append(f"model.safetensors: no {name} (mBART's learned positions)")
            elif isinstance(cfg.get("max_position_embeddings"), int):
                _check_shape(tensors, name, [cfg["max_position_embeddings"] + 2, d], problems)
        layers = cfg.get(f"{side}_layers")
        if not isinstance(layers, int):
            continue
        missing = [f"model.{side}.layers.{i}.{p}.{w}" for i in range(layers) for p in parts
                   for w in ("weight", "bias") if f"model.{side}.layers.{i}.{p}.{w}" not in tensors]
        if missing:
            problems.append(f"model.safetensors: {len(missing)} {side} tensors missing, first {missing[0]}")
        if f"model.{side}.layers.{layers}.fc1.weight" in tensors:
            problems.append(f"model.safetensors: has more {side} layers than {side}_layers = {layers}")


def _check_vocab(name, vocab, size, size_field, specials, cfg, problems):
    """vocab.json / target_vocab.json: ids below `size`, `specials` agreeing with config.json."""
    if not isinstance(vocab, dict) or not vocab:
        problems.append(f"{name} must map pieces to ids")
        return
    if isinstance(size, int) and max(vocab.values()) >= size:
        problems.append(f"{name}: id {max(vocab.values())} is not below {size_field} {size}")
    for piece, field in specials:
        if vocab.get(piece) != cfg.get(field):
            problems.append(f"{name}: {piece} has id {vocab.get(piece)}, config.json {field} is {cfg.get(field)}")
    if "<unk>" not in vocab:
        problems.append(f"{name}: no <unk> piece")


def separate_vocabs(path):
    """tokenizer_config.json's separate_vocabs when it says, else whether target_vocab.json exists
    (as model/tokenizer/tokenizer.cc decides)."""
    try:
        with open(os.path.join(path, "tokenizer_config.json"), encoding="utf-8") as f:
            tok = json.load(f)
        if isinstance(tok, dict) and "separate_vocabs" in tok:
            return tok["separate_vocabs"] is True
    except (OSError, ValueError):
        pass
    return os.path.isfile(os.path.join(path, "target_vocab.json"))


def _check_spm(path, name, problems):
    with open(os.path.join(path, name), "rb") as f:
        if f.read(1) != b"\x0a":
            problems.append(f"{name} is not a SentencePiece model")


def _check_tokenizer_json(tok, cfg, problems):
    """tokenizer.json (NLLB, mBART-50): every id below vocab_size, </s> and <pad> agreeing
    with config.json, and the language codes among its added tokens."""
    if not isinstance(tok, dict) or not isinstance(tok.get("model"), dict):
        problems.append("tokenizer.json has no model")
        return 0
    vocab = tok["model"].get("vocab")
    ids = list(vocab.values()) if isinstance(vocab, dict) else list(range(len(vocab or [])))
    added = {t.get("content"): t.get("id") for t in tok.get("added_tokens") or []}
    ids += [i for i in added.values() if isinstance(i, int)]
    size = cfg.get("vocab_size")
    if ids and isinstance(size, int) and max(ids) >= size:
        problems.append(f"tokenizer.json: id {max(ids)} is not below vocab_size {size}")
    for piece, field in (("</s>", "eos_token_id"), ("<pad>", "pad_token_id")):
        if added.get(piece) != cfg.get(field):
            problems.append(f"tokenizer.json: {piece} has id {added.get(piece)}, config.json {field} is {cfg.get(field)}")
    codes = [t for t in added if t and ("_" in t) and t[:1] != "<"]
    if not codes:
        problems.append("tokenizer.json: no language codes among its added tokens")
    return len(codes)


def _m2m100_codes(path, vocab, cfg, problems):
    """M2M100Tokenizer places its language codes (and 8 madeupword slots) after vocab.json."""
    tok = _read_json(os.path.join(path, "tokenizer_config.json"), []) or {}
    codes = M2M100_CODE_COUNTS.get(tok.get("language_codes", "m2m100") if isinstance(tok, dict) else "m2m100")
    if codes is None:
        problems.append(f"tokenizer_config.json: language_codes {tok.get('language_codes')!r} is not one of "
                        f"{', '.join(M2M100_CODE_COUNTS)}")
        return 0
    size = cfg.get("vocab_size")
    if isinstance(vocab, dict) and isinstance(size, int) and len(vocab) + codes > size:
        problems.append(f"vocab.json: {len(vocab)} pieces + {codes} language codes exceed vocab_size {size}")
    return codes


def check_model_dir(path):
    """Returns (problems, summary) for a model folder; no problems means loadable."""
    if not os.path.isdir(path):
        return [f"{path} is not a folder"], ""
    problems = [f"missing {name}" for name in MODEL_FILES if not os.path.isfile(os.path.join(path, name))]
    cfg = None
    if os.path.isfile(os.path.join(path, "config.json")):
        cfg = _read_json(os.path.join(path, "config.json"), problems)
    layout = tokenizer_layout(cfg.get("model_type") if isinstance(cfg, dict) else "marian", path)
    problems += [f"missing {name}" for name in TOKENIZER_LAYOUTS[layout][0]
                 if not os.path.isfile(os.path.join(path, name))]
    for name in SPM_FILES:
        if os.path.isfile(os.path.join(path, name)):
            _check_spm(path, name, problems)
    if not isinstance(cfg, dict):
        return problems, ""
    _check_config(cfg, problems)
    tensors = None
    if os.path.isfile(os.path.join(path, "model.safetensors")):
        tensors = _safetensors_header(os.path.join(path, "model.safetensors"), problems)
        if tensors is not None:
            _check_weights(cfg, tensors, problems)
    special_ids = (("</s>", "eos_token_id"), ("<pad>", "pad_token_id"))
    tv = target_vocab_size(cfg)
    if os.path.isfile(os.path.join(path, "tokenizer_config.json")):
        _read_json(os.path.join(path, "tokenizer_config.json"), problems)
    separate = layout == "marian" and separate_vocabs(path)
    languages = 0
    if layout in ("marian", "m2m100") and os.path.isfile(os.path.join(path, "vocab.json")):
        vocab = _read_json(os.path.join(path, "vocab.json"), problems)
        # With separate vocabularies the config's special ids are the target side's.
        _check_vocab("vocab.json", vocab, cfg.get("vocab_size"), "vocab_size",
                     () if separate else special_ids, cfg, problems)
        if layout == "m2m100":
            languages = _m2m100_codes(path, vocab, cfg, problems)
    if layout in ("nllb", "mbart50") and os.path.isfile(os.path.join(path, "tokenizer.json")):
        languages = _check_tokenizer_json(_read_json(os.path.join(path, "tokenizer.json"), problems), cfg, problems)
    if separate:
        if not os.path.isfile(os.path.join(path, "target_vocab.json")):
            problems.append("missing target_vocab.json (tokenizer_config.json: separate_vocabs is true)")
        else:
            _check_vocab("target_vocab.json", _read_json(os.path.join(path, "target_vocab.json"), problems), tv,
                         "decoder_vocab_size", special_ids, cfg, problems)
    elif tv != cfg.get("vocab_size"):
        problems.append(f"config.json: decoder_vocab_size {tv} differs from vocab_size {cfg.get('vocab_size')}, "
                        "but the model has one vocab.json (no target_vocab.json)")
    if os.path.isfile(os.path.join(path, "generation_config.json")):
        _read_json(os.path.join(path, "generation_config.json"), problems)
    dtypes = sorted({t.get("dtype") for t in (tensors or {}).values()})
    vocab = f"vocab {cfg.get('vocab_size')}" + (f" -> {tv}" if separate else "")
    kind = LAYOUT_NAMES[layout]
    langs = f", {languages} languages" if languages else ""
    summary = (f"{kind}, d_model {cfg.get('d_model')}, {cfg.get('encoder_layers')}+{cfg.get('decoder_layers')} layers, "
               f"{vocab}{langs}, {'/'.join(dtypes)} weights")
    return problems, summary


def run_check(path):
    problems, summary = check_model_dir(path)
    if problems:
        print(f"FAIL: {path} is not loadable by nmt-server:")
        for p in problems:
            print(f"  - {p}")
        return 1
    print(f"OK: {path}: {summary}")
    return 0


def _tokenizer_file(model, name, revision):
    """The path of the hub's (or local MODEL's) file name, None when it has none."""
    if os.path.isdir(model):
        path = os.path.join(model, name)
        return path if os.path.isfile(path) else None
    from huggingface_hub import hf_hub_download
    try:
        from huggingface_hub.errors import EntryNotFoundError
    except ImportError:  # huggingface_hub < 0.23
        from huggingface_hub.utils import EntryNotFoundError

    try:
        return hf_hub_download(model, name, revision=revision)
    except EntryNotFoundError:
        return None


MODEL_CLASSES = {"marian": "MarianMTModel", "m2m_100": "M2M100ForConditionalGeneration",
                 "mbart": "MBartForConditionalGeneration"}


def _describe(out, names, origin):
    for name in names:
        size = os.path.getsize(os.path.join(out, name))
        print(f"  wrote {name} ({size:,} bytes, {origin})")


def export(model, out, dtype, revision):
    try:
        import torch
        import transformers
    except ImportError as e:
        sys.exit(f"export needs torch and transformers ({e}); pip install torch transformers sentencepiece safetensors huggingface_hub")
    cfg = transformers.AutoConfig.from_pretrained(model, revision=revision)
    if cfg.model_type not in MODEL_CLASSES:
        sys.exit(f"{model}: model_type {cfg.model_type!r} is not one the server loads "
                 f"({', '.join(MODEL_CLASSES)})")
    os.makedirs(out, exist_ok=True)
    print(f"exporting {model} ({cfg.model_type}) into {out}:")
    m = getattr(transformers, MODEL_CLASSES[cfg.model_type]).from_pretrained(model, revision=revision)
    if dtype != "keep":
        m = m.to({"float16": torch.float16, "float32": torch.float32, "bfloat16": torch.bfloat16}[dtype])
    m.save_pretrained(out)  # config.json, model.safetensors (also from a .bin checkpoint), generation_config.json
    if not os.path.isfile(os.path.join(out, "generation_config.json")):
        m.generation_config.save_pretrained(out)
    _describe(out, MODEL_FILES, f"save_pretrained, {dtype} weights")
    origin = "copied from " + ("the folder" if os.path.isdir(model) else "the hub")
    missing = []

    def copy(name):
        src = _tokenizer_file(model, name, revision)
        if src is None:
            missing.append(name)
            return
        shutil.copyfile(src, os.path.join(out, name))
        _describe(out, [name], origin)

    copy("tokenizer_config.json")  # first: it says which tokenizer an m2m_100 model has
    layout = tokenizer_layout(cfg.model_type, out)
    required, optional = TOKENIZER_LAYOUTS[layout]
    if layout == "marian" and (separate_vocabs(out) or m.config.share_encoder_decoder_embeddings is False):
        required = required + ("target_vocab.json",)
    for name in required + optional:
        if name != "tokenizer_config.json":
            copy(name)
    if "tokenizer.json" in missing:
        # A hub folder without tokenizer.json: the tokenizer's own save_pretrained writes it
        # (the server reads the language codes' ids there); the copied files stay as they were.
        tok = transformers.AutoTokenizer.from_pretrained(model, revision=revision)
        with tempfile.TemporaryDirectory() as tmp:
            tok.save_pretrained(tmp)
            shutil.copyfile(os.path.join(tmp, "tokenizer.json"), os.path.join(out, "tokenizer.json"))
        _describe(out, ["tokenizer.json"], f"written by {type(tok).__name__}.save_pretrained")
        missing.remove("tokenizer.json")
    for name in missing:
        print(f"  {'not found' if name in required else 'skipped (optional, absent)'}: {name}")
    status = run_check(out)
    if status == 0:
        name = os.path.basename(os.path.normpath(out))
        print("add to the models list of your config (paths resolve against the config's folder):")
        print(f"  - name: {name}\n    path: {os.path.abspath(out)}\n    device: auto\n    precision: float16")
    return status


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", nargs="?", help="hub id (e.g. Helsinki-NLP/opus-mt-en-de, "
                    "facebook/nllb-200-distilled-600M) or local folder")
    ap.add_argument("out", nargs="?", help="output folder")
    ap.add_argument("--dtype", choices=("float16", "float32", "bfloat16", "keep"), default="float16",
                    help="weight type written to model.safetensors (default float16)")
    ap.add_argument("--revision", default=None, help="hub revision (branch, tag or commit)")
    ap.add_argument("--check", metavar="DIR", help="only check that DIR is a model folder the server loads")
    args = ap.parse_args(argv)
    if args.check:
        return run_check(args.check)
    if not args.model or not args.out:
        ap.error("give MODEL and OUT, or --check DIR")
    return export(args.model, args.out, args.dtype, args.revision)


if __name__ == "__main__":
    sys.exit(main())
