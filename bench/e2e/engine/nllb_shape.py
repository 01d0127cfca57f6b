#!/usr/bin/env python3
"""The NLLB-200 benchmark's model side and CTranslate2 baseline (GPU machine; the coordinator
runs nmt-bench-e2e on the same folder in the same run).

  nllb_shape.py write --out DIR [--shape 600m|1.3b]
      a random-weight NLLB-200-distilled-600M-shaped model (M2M100ForConditionalGeneration:
      d_model 1024, 12+12 layers, 16 heads, ffn 4096, vocabulary 256,206, relu, pre-norm,
      max_position_embeddings 1024; 1.3b: 24+24 layers, ffn 8192, as NLLB-200-1.3B) saved in
      float16 with save_pretrained, and a tokenizer in NLLB's layout (see below).
  nllb_shape.py ct2 --model DIR [--batches 1,16,64,256] [--src-len 27] [--tgt-len 32]
      converts DIR with ctranslate2.converters.TransformersConverter and times CTranslate2
      float16, beam 4, exactly --tgt-len tokens after the forced target language token
      (min = max decoding length): batch 1 per sentence (p50, and ms a decode step),
      larger batches target tokens/s (best of --repeat passes after a warm-up pass).
  nllb_shape.py all --out DIR [...]: write, then ct2.

Each measurement prints one 'RESULT {json}' line (bench/results/*.jsonl's format).

The tokenizer: the project's own SentencePiece model of tests/conformance/families/nllb
(600 BPE pieces, fairseq ids) with NllbTokenizer's full FLORES-200 code list (202 codes), built
by NllbTokenizer.from_pretrained and written with save_pretrained (tokenizer.json,
tokenizer_config.json) beside sentencepiece.bpe.model. Its 804 ids are a prefix of the model's
256,206 rows: the model's vocabulary is the real one's size (the output projection and the
softmax cost what they cost with NLLB), while the tokenizer has the minimum the server needs
(the SentencePiece model, the specials, every FLORES-200 code). Ids the random model generates
above 803 have no piece (CTranslate2's converter names them madeupword<i>). Sources are random
pieces of that tokenizer: [eng_Latn] pieces </s>, --src-len ids in all.

Needs torch and transformers (write), and the ctranslate2 module of ../shared/peers (ct2; see
its README).
"""
import argparse
import json
import os
import random
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SPM = os.path.join(REPO, "tests", "conformance", "families", "nllb", "sentencepiece.bpe.model")
VOCAB_SIZE = 256206  # facebook/nllb-200-distilled-600M's config.json
SHAPES = {  # layers (encoder = decoder), ffn dim; d_model 1024 and 16 heads for both
    "600m": (12, 4096),
    "1.3b": (24, 8192),
}
SOURCE_LANGUAGE, TARGET_LANGUAGE = "eng_Latn", "fra_Latn"


def report(d):
    print("RESULT " + json.dumps(d), flush=True)


def model_config(shape):
    """config.json's fields for a shape, as facebook/nllb-200-distilled-600M's (or -1.3B's)."""
    layers, ffn = SHAPES[shape]
    return dict(vocab_size=VOCAB_SIZE, d_model=1024, encoder_layers=layers, decoder_layers=layers,
                encoder_attention_heads=16, decoder_attention_heads=16, encoder_ffn_dim=ffn,
                decoder_ffn_dim=ffn, activation_function="relu", max_position_embeddings=1024,
                scale_embedding=True, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                decoder_start_token_id=2, dropout=0.1, attention_dropout=0.1, activation_dropout=0.0,
                encoder_layerdrop=0.0, decoder_layerdrop=0.0, init_std=0.02, tokenizer_class="NllbTokenizer")


def parameter_count(cfg):
    """Parameters of M2M100ForConditionalGeneration with cfg (lm_head tied to the embeddings)."""
    d, v = cfg["d_model"], cfg["vocab_size"]
    attn = 4 * (d * d + d)
    norm = 2 * d
    ffn = 2 * d * cfg["encoder_ffn_dim"] + cfg["encoder_ffn_dim"] + d
    enc = cfg["encoder_layers"] * (attn + ffn + 2 * norm)
    dec = cfg["decoder_layers"] * (2 * attn + ffn + 3 * norm)
    return v * d + enc + dec + 2 * norm


def random_sources(pieces, n, src_len, seed=1234):
    """n sources of src_len tokens in NLLB's layout: [source language] pieces </s>."""
    rng = random.Random(seed)
    return [[SOURCE_LANGUAGE] + [rng.choice(pieces) for _ in range(src_len - 2)] + ["</s>"] for _ in range(n)]


def throughput(sentences, tgt_len, seconds):
    """Target tokens (the tgt_len after the language token) per second."""
    return sentences * tgt_len / seconds


def write(out, shape, seed):
    import torch
    from transformers import M2M100Config, M2M100ForConditionalGeneration, NllbTokenizer

    os.makedirs(out, exist_ok=True)
    tok_inputs = os.path.join(out, "sentencepiece.bpe.model")
    with open(SPM, "rb") as f, open(tok_inputs, "wb") as g:
        g.write(f.read())
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"tokenizer_class": "NllbTokenizer", "src_lang": SOURCE_LANGUAGE, "tgt_lang": TARGET_LANGUAGE,
                   "model_max_length": 1024}, f)
    tok = NllbTokenizer.from_pretrained(out)  # every FLORES-200 code (additional_special_tokens unset)
    tok.save_pretrained(out)
    cfg = model_config(shape)
    torch.manual_seed(seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    t0 = time.perf_counter()
    with torch.device(device):
        model = M2M100ForConditionalGeneration(M2M100Config(**cfg)).half().eval()
    # config.json, generation_config.json and one model.safetensors (float16; the server reads
    # no sharded checkpoints, and the 1.3B shape's 2.7 GB is over some versions' default shard)
    model.save_pretrained(out, max_shard_size="50GB")
    codes = [c for c in tok.get_vocab() if len(c) == 8 and c[3] == "_"]
    print(f"wrote {out}: NLLB-200 {shape} shape, {sum(p.numel() for p in model.parameters()):,} parameters "
          f"(float16), tokenizer of {len(tok.get_vocab())} ids ({len(codes)} language codes) "
          f"in {time.perf_counter() - t0:.1f} s", flush=True)


def ct2(model_dir, batches, beam, repeat, sentences, src_len, tgt_len, latency_sentences):
    import torch  # first, so that both use one cuBLAS (peers README)
    import ctranslate2
    from transformers import AutoTokenizer

    ct2_dir = os.path.join(model_dir, "ct2-float16")
    t0 = time.perf_counter()
    ctranslate2.converters.TransformersConverter(model_dir, load_as_float16=True).convert(
        ct2_dir, quantization="float16", force=True)
    print(f"converted {model_dir} -> {ct2_dir} in {time.perf_counter() - t0:.1f} s", flush=True)
    tok = AutoTokenizer.from_pretrained(model_dir)
    specials = set(getattr(tok, "all_special_tokens", []))
    pieces = [t for t, i in sorted(tok.get_vocab().items(), key=lambda kv: kv[1]) if t not in specials and i > 3]
    src = random_sources(pieces, sentences, src_len)
    tr = ctranslate2.Translator(ct2_dir, device="cuda", compute_type="float16")
    opts = dict(beam_size=beam, batch_type="examples", return_end_token=False)
    # CTranslate2 counts the target prefix (the language token) in the decoding length on
    # some versions and not on others: find the length that gives exactly language + tgt_len.
    length = None
    for candidate in (tgt_len + 1, tgt_len):
        r = tr.translate_batch(src[:1], target_prefix=[[TARGET_LANGUAGE]], max_batch_size=1,
                               min_decoding_length=candidate, max_decoding_length=candidate, **opts)
        if len(r[0].hypotheses[0]) == tgt_len + 1:
            length = candidate
            break
    if length is None:
        sys.exit(f"no decoding length gives {TARGET_LANGUAGE} + {tgt_len} tokens (got {r[0].hypotheses[0][:3]}...)")
    opts.update(min_decoding_length=length, max_decoding_length=length)
    prefix = [[TARGET_LANGUAGE]]
    base = {"model": model_dir, "shape": "nllb-200", "engine": "ctranslate2", "version": ctranslate2.__version__,
            "device": torch.cuda.get_device_name(0), "precision": "float16", "beam": beam, "src_len": src_len,
            "tgt_len": tgt_len, "decode_steps": tgt_len + 1, "decoding_length_option": length}
    for batch in batches:
        d = dict(base, batch=batch)
        if batch == 1:
            sents = src[:latency_sentences]
            tr.translate_batch(sents[:5], target_prefix=prefix * 5, max_batch_size=1, **opts)  # warm-up
            times = []
            for s in sents:
                t0 = time.perf_counter()
                tr.translate_batch([s], target_prefix=prefix, max_batch_size=1, **opts)
                times.append((time.perf_counter() - t0) * 1e3)
            times.sort()
            p50 = statistics.median(times)
            d.update(sentences=len(sents), p50_ms=p50, p90_ms=times[int(0.9 * len(times))],
                     ms_per_step=p50 / (tgt_len + 1), tokens_per_s=throughput(len(sents), tgt_len, sum(times) / 1e3))
        else:
            def run():
                tr.translate_batch(src, target_prefix=prefix * len(src), max_batch_size=batch, **opts)
            run()  # warm-up
            secs = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                run()
                secs.append(time.perf_counter() - t0)
            best = min(secs)
            d.update(sentences=len(src), seconds=best, target_tokens=len(src) * tgt_len,
                     tokens_per_s=throughput(len(src), tgt_len, best), sentences_per_s=len(src) / best,
                     ms_per_batch=best * 1e3 * batch / len(src))
        free, total = torch.cuda.mem_get_info()
        d["gpu_used_mib"] = (total - free) >> 20
        report(d)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("mode", choices=["write", "ct2", "all"])
    p.add_argument("--out", help="model folder to write (write, all)")
    p.add_argument("--model", help="model folder to time (ct2; all: --out)")
    p.add_argument("--shape", choices=sorted(SHAPES), default="600m")
    p.add_argument("--seed", type=int, default=51)
    p.add_argument("--batches", default="1,16,64,256")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--sentences", type=int, default=512, help="sources per throughput pass")
    p.add_argument("--latency-sentences", type=int, default=50)
    p.add_argument("--src-len", type=int, default=27, help="source ids: language, pieces, </s>")
    p.add_argument("--tgt-len", type=int, default=32, help="tokens after the target language token")
    a = p.parse_args(argv)
    if a.mode in ("write", "all") and not a.out:
        p.error(f"{a.mode} needs --out")
    if a.mode == "ct2" and not a.model:
        p.error("ct2 needs --model")
    if a.mode == "all":
        a.model = a.out
    try:
        a.batches = [int(b) for b in a.batches.split(",")]
    except ValueError:
        p.error(f"--batches {a.batches!r}: comma-separated integers expected")
    if any(b <= 0 for b in a.batches) or a.src_len < 3 or a.tgt_len < 1 or a.beam < 1:
        p.error("--batches, --beam and --tgt-len must be positive, --src-len at least 3")
    return a


def main(argv=None):
    a = parse_args(argv)
    if a.mode in ("write", "all"):
        write(a.out, a.shape, a.seed)
    if a.mode in ("ct2", "all"):
        ct2(a.model, a.batches, a.beam, a.repeat, a.sentences, a.src_len, a.tgt_len, a.latency_sentences)


if __name__ == "__main__":
    main()
