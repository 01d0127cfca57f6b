#!/usr/bin/env python3
"""Exports a Hugging Face Marian (OPUS-MT) model into the folder layout nmt-server loads.

    pip install torch transformers sentencepiece safetensors huggingface_hub
    tools/export_hf_marian.py Helsinki-NLP/opus-mt-en-de models/opus-mt-en-de [--dtype float16]
    tools/export_hf_marian.py --check models/opus-mt-en-de

The export loads the model with transformers' from_pretrained and writes it back with
save_pretrained (config.json, model.safetensors, generation_config.json); the tokenizer files
(source.spm, target.spm, vocab.json, tokenizer_config.json, and target_vocab.json for models
with separate source and target vocabularies) are copied byte for byte from the hub (or from
MODEL when it is a local folder). Then the folder is checked.

--check DIR only reads files (no network, no torch): it says whether DIR has every file the
server needs, whether config.json describes a Marian model the server supports and whether
the safetensors header, vocab.json and the special token ids agree with it. Exit status 0
when the folder is loadable, 1 with one line per problem otherwise.
"""
import argparse
import json
import os
import shutil
import struct
import sys

REQUIRED_FILES = (
    "config.json",
    "model.safetensors",
    "source.spm",
    "target.spm",
    "vocab.json",
    "tokenizer_config.json",
    "generation_config.json",
)
TOKENIZER_FILES = ("source.spm", "target.spm", "vocab.json", "tokenizer_config.json")
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
# Fields (of the Bart-era MarianConfig and its siblings) whose other values describe another
# architecture: the server refuses them, as model/model_config.cc does.
MARIAN_ONLY_VALUES = {
    "normalize_before": False,
    "add_final_layer_norm": False,
    "normalize_embedding": False,
    "layernorm_embedding": False,
    "static_position_embeddings": True,
    "add_bias_logits": False,
    "is_decoder": False,
    "is_encoder_decoder": True,
}
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
    if model_type != "marian":
        problems.append(f"config.json: model_type is {model_type!r}, expected 'marian'")
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
    for field, value in MARIAN_ONLY_VALUES.items():
        if cfg.get(field) not in (None, value):
            problems.append(f"config.json: {field} {cfg[field]!r} is not supported (Marian: {value!r})")
    for a in cfg.get("architectures") or []:
        if a not in ("MarianMTModel", "MarianModel"):
            problems.append(f"config.json: architectures {cfg['architectures']!r} is not supported (MarianMTModel)")
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
    (as model/tokenizer.cc decides)."""
    try:
        with open(os.path.join(path, "tokenizer_config.json"), encoding="utf-8") as f:
            tok = json.load(f)
        if isinstance(tok, dict) and "separate_vocabs" in tok:
            return tok["separate_vocabs"] is True
    except (OSError, ValueError):
        pass
    return os.path.isfile(os.path.join(path, "target_vocab.json"))


def check_model_dir(path):
    """Returns (problems, summary) for a model folder; no problems means loadable."""
    if not os.path.isdir(path):
        return [f"{path} is not a folder"], ""
    problems = [f"missing {name}" for name in REQUIRED_FILES if not os.path.isfile(os.path.join(path, name))]
    for name in ("source.spm", "target.spm"):
        p = os.path.join(path, name)
        if os.path.isfile(p):
            with open(p, "rb") as f:
                if f.read(1) != b"\x0a":
                    problems.append(f"{name} is not a SentencePiece model")
    cfg = None
    if os.path.isfile(os.path.join(path, "config.json")):
        cfg = _read_json(os.path.join(path, "config.json"), problems)
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
    separate = separate_vocabs(path)
    if os.path.isfile(os.path.join(path, "vocab.json")):
        # With separate vocabularies the config's special ids are the target side's.
        _check_vocab("vocab.json", _read_json(os.path.join(path, "vocab.json"), problems), cfg.get("vocab_size"),
                     "vocab_size", () if separate else special_ids, cfg, problems)
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
    summary = (f"marian, d_model {cfg.get('d_model')}, {cfg.get('encoder_layers')}+{cfg.get('decoder_layers')} layers, "
               f"{vocab}, {'/'.join(dtypes)} weights")
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
    if os.path.isdir(model):
        return os.path.join(model, name)
    from huggingface_hub import hf_hub_download
    return hf_hub_download(model, name, revision=revision)


def export(model, out, dtype, revision):
    try:
        import torch
        from transformers import MarianMTModel
    except ImportError as e:
        sys.exit(f"export needs torch and transformers ({e}); pip install torch transformers sentencepiece safetensors huggingface_hub")
    os.makedirs(out, exist_ok=True)
    m = MarianMTModel.from_pretrained(model, revision=revision)
    if dtype != "keep":
        m = m.to({"float16": torch.float16, "float32": torch.float32, "bfloat16": torch.bfloat16}[dtype])
    m.save_pretrained(out)  # config.json, model.safetensors, generation_config.json
    if not os.path.isfile(os.path.join(out, "generation_config.json")):
        m.generation_config.save_pretrained(out)
    for name in TOKENIZER_FILES:
        shutil.copyfile(_tokenizer_file(model, name, revision), os.path.join(out, name))
    if separate_vocabs(out) or m.config.share_encoder_decoder_embeddings is False:
        shutil.copyfile(_tokenizer_file(model, "target_vocab.json", revision), os.path.join(out, "target_vocab.json"))
    status = run_check(out)
    if status == 0:
        name = os.path.basename(os.path.normpath(out))
        print("add to the models list of your config (paths resolve against the config's folder):")
        print(f"  - name: {name}\n    path: {os.path.abspath(out)}\n    device: auto\n    precision: float16")
    return status


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", nargs="?", help="hub id (e.g. Helsinki-NLP/opus-mt-en-de) or local folder")
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
