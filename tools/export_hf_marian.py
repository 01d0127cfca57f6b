#!/usr/bin/env python3
"""Exports a Hugging Face Marian (OPUS-MT) model into the folder layout nmt-server loads.

    pip install torch transformers sentencepiece safetensors huggingface_hub
    tools/export_hf_marian.py Helsinki-NLP/opus-mt-en-de models/opus-mt-en-de [--dtype float16]
    tools/export_hf_marian.py --check models/opus-mt-en-de

The export loads the model with transformers' from_pretrained and writes it back with
save_pretrained (config.json, model.safetensors, generation_config.json); the tokenizer files
(source.spm, target.spm, vocab.json, tokenizer_config.json) are copied byte for byte from the
hub (or from MODEL when it is a local folder). Then the folder is checked.

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
ACTIVATIONS = ("swish", "silu", "relu", "gelu")
DTYPES = ("F32", "F16", "BF16")
EMBEDDING_NAMES = ("model.shared.weight", "model.encoder.embed_tokens.weight")
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
    d, h = cfg.get("d_model"), cfg.get("encoder_attention_heads")
    if isinstance(d, int) and isinstance(h, int) and h > 0 and d % h:
        problems.append(f"config.json: d_model {d} is not a multiple of encoder_attention_heads {h}")


def _check_weights(cfg, tensors, problems):
    emb = next((n for n in EMBEDDING_NAMES if n in tensors), None)
    if emb is None:
        problems.append(f"model.safetensors: no embedding matrix ({' or '.join(EMBEDDING_NAMES)})")
    else:
        want = [cfg.get("vocab_size"), cfg.get("d_model")]
        if tensors[emb].get("shape") != want:
            problems.append(f"model.safetensors: {emb} has shape {tensors[emb].get('shape')}, config.json says {want}")
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


def _check_vocab(cfg, vocab, problems):
    if not isinstance(vocab, dict) or not vocab:
        problems.append("vocab.json must map pieces to ids")
        return
    size = cfg.get("vocab_size")
    if isinstance(size, int) and max(vocab.values()) >= size:
        problems.append(f"vocab.json: id {max(vocab.values())} is not below vocab_size {size}")
    for piece, field in (("</s>", "eos_token_id"), ("<pad>", "pad_token_id")):
        if vocab.get(piece) != cfg.get(field):
            problems.append(f"vocab.json: {piece} has id {vocab.get(piece)}, config.json {field} is {cfg.get(field)}")
    if "<unk>" not in vocab:
        problems.append("vocab.json: no <unk> piece")


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
    if os.path.isfile(os.path.join(path, "vocab.json")):
        _check_vocab(cfg, _read_json(os.path.join(path, "vocab.json"), problems), problems)
    if os.path.isfile(os.path.join(path, "tokenizer_config.json")):
        tok = _read_json(os.path.join(path, "tokenizer_config.json"), problems)
        if isinstance(tok, dict) and tok.get("separate_vocabs"):
            problems.append("tokenizer_config.json: separate_vocabs is true; the server reads one shared vocab.json")
    if os.path.isfile(os.path.join(path, "generation_config.json")):
        _read_json(os.path.join(path, "generation_config.json"), problems)
    dtypes = sorted({t.get("dtype") for t in (tensors or {}).values()})
    summary = (f"marian, d_model {cfg.get('d_model')}, {cfg.get('encoder_layers')}+{cfg.get('decoder_layers')} layers, "
               f"vocab {cfg.get('vocab_size')}, {'/'.join(dtypes)} weights")
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
