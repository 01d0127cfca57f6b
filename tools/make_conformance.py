#!/usr/bin/env python3
"""Writes the conformance data under tests/conformance: small random-weight Marian models, one
per variant the engine must handle, and transformers' own translations of project-written
sentences with each of them and with the demo model.

    pip install torch transformers sentencepiece safetensors
    tools/make_conformance.py --out /tmp/conformance        # then copy into tests/conformance

Needs torch, transformers and sentencepiece (none of them is needed to run the tests). Writes
under OUT: models/<variant>/ (model + tokenizer files, references.jsonl, meta.json),
demo/ (references.jsonl, meta.json for models/m30k-en-de-small on all of sentences.en),
refused/<name>/ (models the loader must refuse, with meta.json naming the field), and
families/<variant>/ with the families' refused/ cases (NLLB-200, M2M-100, mBART-50: written by
tools/conformance_families.py; --only-families writes those alone, --skip-families leaves them
out). tests/conformance/README.md describes every file.

Everything is deterministic, so running it twice gives identical files: the SentencePiece
models are trained single-threaded from an in-memory corpus that this script writes itself
(sentences.en plus template sentences, and a made-up target language derived from them by
hashing words), the weights come from seeded torch generators, and transformers runs on the
CPU in float32 with one thread per process (CPU rather than GPU: the models are tiny, the CPU
is bit-reproducible, and many sentences can run in parallel processes).
"""
import argparse
import hashlib
import io
import json
import math
import multiprocessing
import os
import random
import re
import shutil
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # inherited by the workers too
SEED = 11  # the issue number; every generator below derives its seed from it

EOS, UNK, PAD = "</s>", "<unk>", "<pad>"
LANGUAGE_CODES = (">>fra<<", ">>spa<<", ">>ita<<", ">>por<<")
# Sentences for the variants: every 6th line (short, long, numbers, quotes, accents), plus
# the lines whose Cyrillic / Greek letters the variants' SentencePiece models never saw.
VARIANT_EXTRA_IDS = (91, 92, 269)
MAX_LENGTH_VARIANTS = 40  # transformers' max_length: decoder start + at most 39 tokens
MAX_LENGTH_DEMO = 256     # as the demo model's golden references
# A sentence is left out of the references when transformers' own margins are below this:
# a greedy step whose best two log-probs differ by less, or two 4-best hypotheses whose
# scores do. Float rounding decides such cases (another float32 GEMM differs by ~1e-6
# relative, log-probs of 10-30 by up to ~3e-5), so no engine can be asked to match them.
MIN_MARGIN = 1e-4
# Beam search also decides, at every step, which candidates stay among the running beams; a
# near-tie there changes a late hypothesis without showing in the final margins above. So
# beam 4 and 4-best run twice more with uniform noise of this size added to every step's
# log-probs (seeded), and a sentence whose ids move under it is left out too. The size is
# several times what another float32 engine's summation order moves a step's log-probs
# (measured: ~1e-6 on the demo model; on the random-gain variants, whose hypotheses often
# run to the maximum length, the engine's length-normalised scores moved by up to 2.3e-4,
# ~9e-3 summed over 39 steps: 5e-4 per step still kept a 4-best list that another float32
# engine decided differently).
PERTURBATION = {"demo": 2e-5, "variants": 3e-3}
PERTURBATION_SEEDS = (1, 2)

# Random init (see init_weights): gains chosen so that outputs are peaked (top-1/top-2
# log-prob gaps well above float32 noise), depend on the source, and end at varied lengths.
# Layer gains near 1 keep activations at the scale of a trained model's (attention logits of a
# few units): with gains of 6 the attention logits reached ~36 standard deviations, which
# float16 stores to 1/32, so the CUDA engine in float16 agreed with the float32 references on 2-74%
# of the sentences (the trained demo model: 99-100%); at 0.8, 97.8-100% pooled over the variants.
ATTENTION_GAIN = 0.8
FFN_GAIN = 0.8
EMBEDDING_STD = 0.1
OUTPUT_GAIN = 9.0
EOS_BOOST = 18.0  # set per variant below where few or all hypotheses ended before max_length

BASE = dict(
    d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
    decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
    activation_function="swish", scale_embedding=True, share_encoder_decoder_embeddings=True,
    tie_word_embeddings=True, max_position_embeddings=512,
)
# name -> (description, config changes, extra options)
VARIANTS = {
    "swish_tied": ("baseline: swish, shared vocabulary, output projection tied to the embeddings,"
                   " scale_embedding true", {}, {}),
    "relu_untied": ("relu, untied lm_head, non-zero final_logits_bias",
                    {"activation_function": "relu", "tie_word_embeddings": False},
                    {"final_logits_bias_std": 0.5, "eos_boost": 20.0}),
    "gelu_noscale": ("gelu, scale_embedding false",
                     {"activation_function": "gelu", "scale_embedding": False}, {}),
    "separate_vocab": ("separate source and target vocabularies: share_encoder_decoder_embeddings"
                       " false, target_vocab.json (other pieces in another order, same size),"
                       " separate encoder and decoder embeddings, untied lm_head",
                       {"share_encoder_decoder_embeddings": False, "tie_word_embeddings": False},
                       {"separate_vocabs": True}),
    "deep_enc_shallow_dec": ("3 encoder layers, 1 decoder layer",
                             {"encoder_layers": 3, "decoder_layers": 1}, {}),
    "big_shape": ("Transformer-big proportions (opus-mt-tc-big): 16 heads, ffn_dim = 4 * d_model,"
                  " head_dim 4",
                  {"d_model": 64, "encoder_attention_heads": 16, "decoder_attention_heads": 16,
                   "encoder_ffn_dim": 256, "decoder_ffn_dim": 256, "encoder_layers": 1,
                   "decoder_layers": 1}, {"eos_boost": 24.0}),
    "multilingual_target": ("multilingual target: the source starts with a language code"
                            " (>>fra<< ...) that is a whole token of vocab.json",
                            {}, {"language_codes": True, "eos_boost": 22.0}),
}
# Models the loader must refuse: name -> (field, value, why). Built from a tiny model.
REFUSED = {
    "normalize_before": ("normalize_before", True,
                         "pre-norm layers; Marian models are post-norm (transformers' MarianConfig"
                         " has no such field and would silently ignore it)"),
    "activation_silu_fancy": ("activation_function", "silu_fancy",
                              "an activation no engine implements (transformers cannot build it)"),
    "normalize_embedding": ("normalize_embedding", True,
                            "a layer norm on the embeddings, which convert_marian_to_pytorch.py"
                            " refuses to convert and MarianMTModel does not have"),
}
TINY = dict(BASE, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
            decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32)

# Equal sizes: the separate_vocab variant's vocab.json and target_vocab.json then have the
# same length, as in every converted OPUS-MT model (convert_marian_to_pytorch.py requires it,
# and transformers' beam search reshapes the decoder's logits with config.vocab_size).
SRC_SPM_SIZE = 400
TGT_SPM_SIZE = 400


# ---------------------------------------------------------------------------------------
# Text the project writes itself: template sentences and a made-up target language.

WORDS = dict(
    det=["a", "the", "one", "every", "this", "that", "my", "our", "her", "his"],
    adj=["small", "old", "young", "tall", "quiet", "happy", "red", "blue", "green", "yellow",
         "heavy", "bright", "tired", "busy", "wooden", "famous", "strange", "warm", "cold",
         "careful", "naïve", "little", "dark", "friendly"],
    noun=["man", "woman", "child", "dog", "cat", "teacher", "doctor", "baker", "farmer", "boy",
          "girl", "bird", "horse", "musician", "driver", "student", "neighbour", "fisherman",
          "painter", "cook", "waiter", "nurse", "climber", "tourist"],
    verb=["read", "carry", "paint", "find", "watch", "clean", "sell", "buy", "open", "close",
          "repair", "draw", "throw", "catch", "hold", "push", "follow", "build", "lose", "show"],
    obj=["a book", "the door", "a ball", "an umbrella", "the window", "a letter", "a basket",
         "the bicycle", "a map", "a cup of tea", "the newspaper", "a guitar", "a ladder",
         "the keys", "a crêpe", "a ticket", "the boat", "a photograph", "a kite", "the menu"],
    prep=["in", "near", "behind", "under", "beside", "in front of", "across", "along", "inside",
          "next to", "at"],
    place=["the park", "the station", "the market", "the river", "the garden", "a café",
           "the museum", "the beach", "the bridge", "the school", "the harbour", "the hotel",
           "the kitchen", "the library", "the square", "the forest", "a village", "the hill"],
    time=["today", "yesterday", "in the morning", "at night", "every Sunday", "after lunch",
          "before dinner", "in winter", "last summer", "at 7:30", "on Monday", "in 1998"],
    name=["Anna", "José", "Zoë", "Chloé", "Björn", "Müller", "Renée", "Tom", "Maria", "Noël"],
)


def english_corpus(rng, n):
    """n template sentences (statements, questions, quotes, numbers), deterministic in rng."""
    def pick(k):
        return rng.choice(WORDS[k])

    def verbs():  # third person singular
        v = pick("verb")
        return v[:-1] + "ies" if v.endswith("ry") else v + ("es" if v[-2:] in ("ch", "sh") else "s")

    lines = []
    for i in range(n):
        kind = i % 6
        subj = f"{pick('det')} {pick('adj')} {pick('noun')}"
        if kind == 0:
            s = f"{subj} {verbs()} {pick('obj')} {pick('prep')} {pick('place')} {pick('time')}."
        elif kind == 1:
            s = f"Why does {subj} {pick('verb')} {pick('obj')} {pick('prep')} {pick('place')}?"
        elif kind == 2:
            s = f"\"{pick('obj').capitalize()} is {pick('prep')} {pick('place')},\" said {pick('name')}."
        elif kind == 3:
            n1, n2 = rng.randint(2, 99), rng.randint(100, 5000)
            s = f"{pick('name')} paid {n1}.{rng.randint(10, 99)} € for {n2 % 7 + 2} tickets to {pick('place')}."
        elif kind == 4:
            s = (f"{subj} and {pick('det')} {pick('noun')} {pick('verb')} {pick('obj')}, "
                 f"while {pick('name')} {verbs()} {pick('obj')} {pick('time')}.")
        else:
            s = f"{pick('name')}'s {pick('noun')} {verbs()} {pick('obj')} - {pick('time')}!"
        lines.append(s[0].upper() + s[1:])
    return lines


SYLLABLES = ["ka", "lo", "mi", "ne", "sä", "tö", "ru", "bé", "gü", "ßa", "en", "ar", "ol",
             "ich", "ung", "sch", "ver", "de", "zu", "fa", "wi", "po", "lä", "nü", "tr", "sk",
             "an", "ei", "au", "ho"]
WORD_RE = re.compile(r"[^\W\d_]+|\d+|[^\w\s]|_", re.UNICODE)


def target_word(word):
    """A made-up target-language word: a hash of the lower-cased word picks 1-3 syllables."""
    h = hashlib.sha256(word.lower().encode("utf-8")).digest()
    out = "".join(SYLLABLES[b % len(SYLLABLES)] for b in h[1:2 + h[0] % 3])
    return out.capitalize() if word[:1].isupper() else out


def to_target(line):
    """Maps each word of an English line to target_word, keeping numbers and punctuation."""
    pieces = []
    pos = 0
    for m in WORD_RE.finditer(line):
        pieces.append(line[pos:m.start()])
        tok = m.group(0)
        pieces.append(target_word(tok) if tok[0].isalpha() else tok)
        pos = m.end()
    pieces.append(line[pos:])
    return "".join(pieces)


def non_latin(line):
    return re.search("[\u0370-\u03ff\u0400-\u04ff]", line) is not None


# ---------------------------------------------------------------------------------------
# SentencePiece models and Marian vocabularies.

MARIAN_SPM_IDS = dict(unk_id=1, eos_id=0, bos_id=-1, pad_id=-1)


def train_spm(lines, vocab_size, rule, log_path, model_type="unigram", ids=MARIAN_SPM_IDS,
              rule_tsv=None):
    """Trains a SentencePiece model on lines; returns the serialized model. Marian's
    convention by default: unigram, </s> = 0, <unk> = 1, no <s> (the families pass fairseq's:
    BPE, <unk> 0, <s> 1, </s> 2). Single-threaded and unshuffled, so the bytes are the same
    on every run; the corpus comes from memory, so no file path ends up in the model.
    rule: nmt_nfkc (OPUS-MT's, with its 240 KB normalization table) or identity; or None
    and rule_tsv, a rule file of the current directory (its name is stored in the model)."""
    import sentencepiece as spm

    buf = io.BytesIO()
    # The trainer logs to the process's stderr from C++: send it to a file.
    sys.stderr.flush()
    saved = os.dup(2)
    with open(log_path, "ab") as log:
        os.dup2(log.fileno(), 2)
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(lines), model_writer=buf, model_type=model_type,
                vocab_size=vocab_size, character_coverage=1.0, num_threads=1,
                input_sentence_size=0, shuffle_input_sentence=False, **ids,
                **({"normalization_rule_tsv": rule_tsv} if rule is None else
                   {"normalization_rule_name": rule}))
        finally:
            os.dup2(saved, 2)
            os.close(saved)
    return buf.getvalue()


def spm_pieces(model_bytes):
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_proto=model_bytes)
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())]


def marian_vocab(piece_lists, rng, extra_tokens=()):
    """vocab.json as OPUS-MT has it: </s> 0, <unk> 1, the pieces of every SentencePiece model
    (each once) in an order of their own (seeded shuffle: Marian's vocabulary order is not
    SentencePiece's, and the engine must map through vocab.json), extra whole tokens (language
    codes) among them, <pad> last."""
    seen, pieces = {EOS, UNK}, []
    for plist in piece_lists:
        for p in plist:
            if p not in seen:
                seen.add(p)
                pieces.append(p)
    rng.shuffle(pieces)
    for tok in extra_tokens:
        pieces.insert(rng.randrange(len(pieces) + 1), tok)
    order = [EOS, UNK] + pieces + [PAD]
    return {tok: i for i, tok in enumerate(order)}


def write_json(path, obj, indent=1, sort_keys=True):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=indent, sort_keys=sort_keys)
        f.write("\n")


def write_tokenizer(folder, src_spm, tgt_spm, vocab, target_vocab=None):
    with open(os.path.join(folder, "source.spm"), "wb") as f:
        f.write(src_spm)
    with open(os.path.join(folder, "target.spm"), "wb") as f:
        f.write(tgt_spm)
    write_json(os.path.join(folder, "vocab.json"), vocab, indent=None, sort_keys=False)
    if target_vocab is not None:
        write_json(os.path.join(folder, "target_vocab.json"), target_vocab, indent=None,
                   sort_keys=False)
    write_json(os.path.join(folder, "tokenizer_config.json"), {
        "source_lang": "en", "target_lang": "xx", "tokenizer_class": "MarianTokenizer",
        "unk_token": UNK, "eos_token": EOS, "pad_token": PAD, "model_max_length": 512,
        "separate_vocabs": target_vocab is not None}, indent=None)


# ---------------------------------------------------------------------------------------
# Models.

def init_weights(model, cfg, seed, final_logits_bias_std, eos_boost):
    """Random weights from a seeded generator, parameter by parameter in name order.
    Linear layers get gain/sqrt(fan_in) normal weights (fc2's rows made zero-mean so the
    activations' positive mean does not push every output one way); layer norms scale
    1 +- 0.2, bias +- 0.2; embeddings and lm_head std EMBEDDING_STD. The decoder's last layer
    norm then scales the output by OUTPUT_GAIN (peaked distributions) and adds eos_boost to
    the </s> logit through its bias, so that hypotheses end at varied lengths."""
    import torch

    gen = torch.Generator().manual_seed(seed)

    def randn(shape, std):
        return torch.randn(shape, generator=gen, dtype=torch.float32) * std

    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if "embed_positions" in name:
                continue  # sinusoidal, fixed by transformers, not saved
            if name.endswith("embed_tokens.weight") or name.endswith("shared.weight") \
                    or name == "lm_head.weight":
                p.copy_(randn(p.shape, EMBEDDING_STD))
            elif "layer_norm" in name:
                p.copy_((1.0 if name.endswith(".weight") else 0.0) + randn(p.shape, 0.2))
            elif name.endswith(".weight"):
                gain = FFN_GAIN if (".fc1." in name or ".fc2." in name) else ATTENTION_GAIN
                w = randn(p.shape, gain / math.sqrt(p.shape[1]))
                if ".fc2." in name:
                    w -= w.mean(dim=1, keepdim=True)
                p.copy_(w)
            elif name.endswith(".bias"):
                p.copy_(randn(p.shape, 0.1))
            else:
                raise SystemExit(f"make_conformance: no init rule for parameter {name}")
        if cfg.share_encoder_decoder_embeddings:
            # transformers 5 keeps separate encoder/decoder embedding tensors (and saves and
            # uses them) when tie_word_embeddings is false; a converted OPUS-MT model with an
            # untied output layer has one shared matrix, so make them equal.
            shared = model.model.shared.weight
            for emb in (model.model.encoder.embed_tokens, model.model.decoder.embed_tokens):
                if emb.weight.data_ptr() != shared.data_ptr():
                    emb.weight.copy_(shared)
        bias = model.final_logits_bias
        bias.copy_(randn(bias.shape, final_logits_bias_std) if final_logits_bias_std else
                   torch.zeros_like(bias))
        last = model.model.decoder.layers[-1].final_layer_norm
        w_eos = model.lm_head.weight[cfg.eos_token_id]
        last.weight.mul_(OUTPUT_GAIN)
        last.bias.add_(eos_boost * w_eos / w_eos.dot(w_eos))


def build_model(folder, fields, seed, final_logits_bias_std, eos_boost, pad_id):
    """Builds, initialises and saves a MarianMTModel (fp32 safetensors) with its generation
    config; returns the tensor names and shapes as saved."""
    import torch
    from transformers import MarianConfig, MarianMTModel

    torch.manual_seed(seed)
    cfg = MarianConfig(**fields)
    model = MarianMTModel(cfg).eval()
    if fields["tie_word_embeddings"]:
        model.tie_weights()  # lm_head shares the embedding's storage (check_reload checks it)
    init_weights(model, cfg, seed, final_logits_bias_std, eos_boost)
    # As OPUS-MT's generation_config.json: never generate <pad> (also the decoder start).
    model.generation_config.bad_words_ids = [[pad_id]]
    model.save_pretrained(folder)  # safetensors, float32
    from safetensors import safe_open

    with safe_open(os.path.join(folder, "model.safetensors"), "pt") as f:
        return {k: list(f.get_slice(k).get_shape()) for k in sorted(f.keys())}


def check_reload(folder, fields, problems):
    """from_pretrained gives back every saved tensor exactly, the architecture fields, and
    the tying the variant asks for; appends what differs to problems."""
    import torch
    from safetensors.torch import load_file

    model = load_model(folder)
    sd = model.state_dict()
    for k, v in load_file(os.path.join(folder, "model.safetensors")).items():
        if not torch.equal(sd[k], v):
            problems.append(f"{folder}: {k} differs after from_pretrained")
    for k in list(BASE) + ["vocab_size", "decoder_vocab_size", "pad_token_id",
                           "decoder_start_token_id", "eos_token_id"]:
        if getattr(model.config, k, None) != fields[k]:
            problems.append(f"{folder}: config {k} reloads as "
                            f"{getattr(model.config, k, None)!r}, not {fields[k]!r}")
    if fields["share_encoder_decoder_embeddings"]:
        for emb in (model.model.encoder.embed_tokens, model.model.decoder.embed_tokens):
            if not torch.equal(emb.weight, model.model.shared.weight):
                problems.append(f"{folder}: encoder/decoder embeddings differ from model.shared")
    tied = model.lm_head.weight.data_ptr() == \
        model.model.decoder.embed_tokens.weight.data_ptr()
    if tied != fields["tie_word_embeddings"]:
        problems.append(f"{folder}: lm_head tied={tied} after reload")


def load_model(folder):
    import torch
    from transformers import MarianMTModel

    try:
        model = MarianMTModel.from_pretrained(folder, dtype=torch.float32)
    except TypeError:  # transformers 4.x spells it torch_dtype
        model = MarianMTModel.from_pretrained(folder, torch_dtype=torch.float32)
    return model.float().eval()


# ---------------------------------------------------------------------------------------
# References (run in worker processes).

def generate_kwargs(cfg, max_length):
    return {
        "greedy": dict(num_beams=1, do_sample=False, max_length=max_length),
        "beam4": dict(num_beams=4, num_return_sequences=1, do_sample=False,
                      max_length=max_length, length_penalty=1.0, early_stopping=False),
        "nbest4": dict(num_beams=4, num_return_sequences=4, do_sample=False,
                       max_length=max_length, length_penalty=1.0, early_stopping=False),
        "common": dict(bad_words_ids=[[cfg["pad_token_id"]]],
                       decoder_start_token_id=cfg["decoder_start_token_id"],
                       eos_token_id=cfg["eos_token_id"],
                       forced_eos_token_id=cfg["eos_token_id"],
                       pad_token_id=cfg["pad_token_id"]),
    }


def _strip(ids, pad):
    """Generated ids without the decoder start token and without batch padding after </s>."""
    ids = list(ids[1:])
    while ids and ids[-1] == pad:
        ids.pop()
    return ids


def _worker_init():
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["TRANSFORMERS_VERBOSITY"] = "error"
    import warnings

    import torch

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def noise_processor(eps, seed):
    """A LogitsProcessor adding seeded uniform noise in [-eps, eps] to the step's scores."""
    import torch
    from transformers import LogitsProcessor, LogitsProcessorList

    class Noise(LogitsProcessor):
        def __init__(self):
            self.generator = torch.Generator().manual_seed(seed)

        def __call__(self, input_ids, scores):
            noise = (torch.rand(scores.shape, generator=self.generator, dtype=torch.float64) * 2 - 1) * eps
            return scores + noise.to(scores.dtype)

    return LogitsProcessorList([Noise()])


def search_modes(model, tok, enc, kw, pad, banned, eps, extra=None):
    """Greedy, beam 4 and 4-best for one encoded source (batch 1: no padding), plus the
    perturbed beam runs. kw: generate_kwargs' modes and "common"; extra: this source's own
    generate() arguments (the families' forced_bos_token_id); banned: ids generate() never
    picks (bad_words_ids), left out of the greedy margin. Returns the greedy / beam4 / nbest4
    results, the smallest greedy top-1/top-2 gap, the smallest adjacent 4-best score gap and
    whether the perturbation moved a hypothesis."""
    import torch

    common = dict(kw["common"], **(extra or {}))
    found = {}
    out = model.generate(**enc, **kw["greedy"], **common, output_scores=True,
                         output_logits=True, return_dict_in_generate=True)
    ids = _strip(out.sequences[0].tolist(), pad)
    raw = out.logits if getattr(out, "logits", None) is not None else out.scores
    total, greedy_gap = 0.0, math.inf
    for t, tid in enumerate(ids):
        lp = torch.log_softmax(raw[t][0].float(), dim=-1)
        processed = out.scores[t][0]
        if torch.isfinite(processed).sum().item() == 1:
            continue  # a forced token (</s> at max_length, a language) scores 0, as in beam search
        total += lp[tid].item()
        for b in banned:
            lp[b] = -math.inf  # never a candidate (bad_words_ids)
        top = torch.topk(lp, 2).values
        greedy_gap = min(greedy_gap, (top[0] - top[1]).item())
    found["greedy"] = {"ids": ids, "text": tok.decode(ids, skip_special_tokens=True),
                       "score": total / len(ids)}
    out = model.generate(**enc, **kw["beam4"], **common, output_scores=True,
                         return_dict_in_generate=True)
    ids = _strip(out.sequences[0].tolist(), pad)
    found["beam4"] = {"ids": ids, "text": tok.decode(ids, skip_special_tokens=True),
                      "score": out.sequences_scores[0].item()}
    out = model.generate(**enc, **kw["nbest4"], **common, output_scores=True,
                         return_dict_in_generate=True)
    nbest = []
    for seq, score in zip(out.sequences.tolist(), out.sequences_scores.tolist()):
        ids = _strip(seq, pad)
        nbest.append({"ids": ids, "text": tok.decode(ids, skip_special_tokens=True),
                      "score": score})
    nbest_gap = min(a["score"] - b["score"] for a, b in zip(nbest, nbest[1:]))
    found["nbest4"] = nbest
    # Does a perturbation of the beam steps' scores move any hypothesis?
    moved = False
    for seed in PERTURBATION_SEEDS:
        for mode, want in (("beam4", [found["beam4"]]), ("nbest4", nbest)):
            out = model.generate(**enc, **kw[mode], **common,
                                 logits_processor=noise_processor(eps, seed))
            got = [_strip(seq, pad) for seq in out.tolist()]
            moved |= got != [h["ids"] for h in want]
    return found, greedy_gap, nbest_gap, moved


def translate_chunk(task):
    """Runs greedy, beam 4 and 4-best for each (id, source) of one chunk, one sentence at a
    time (batch 1: no padding in the reference computation). Returns the records and the
    smallest margins seen."""
    folder, items, max_length, eps = task
    import torch
    from transformers import MarianTokenizer

    tok = MarianTokenizer.from_pretrained(folder)
    model = load_model(folder)
    cfg = model.config.to_dict()
    kw = generate_kwargs(cfg, max_length)
    pad, eos = cfg["pad_token_id"], cfg["eos_token_id"]
    records, greedy_gaps, nbest_gaps, problems, unstable = [], [], [], [], []
    beam_mismatch = 0
    with torch.no_grad():
        for sid, source in items:
            enc = tok(source, return_tensors="pt")
            rec = {"id": sid, "source": source, "source_ids": enc["input_ids"][0].tolist()}
            found, greedy_gap, nbest_gap, moved = search_modes(model, tok, enc, kw, pad, [pad],
                                                               eps)
            rec.update(found)
            greedy_gaps.append(greedy_gap)
            nbest_gaps.append(nbest_gap)
            beam_mismatch += rec["nbest4"][0]["ids"] != rec["beam4"]["ids"]
            unstable.append(moved)
            if any(h["ids"][-1:] != [eos] for h in rec["nbest4"] + [rec["greedy"], rec["beam4"]]):
                problems.append(f"{folder} id {sid}: a hypothesis does not end with </s>")
            records.append(rec)
    return records, dict(greedy_gaps=greedy_gaps, nbest_gaps=nbest_gaps, unstable=unstable,
                         beam_mismatch=beam_mismatch, problems=problems)


def check_tokenizer(folder, items, vocab, target_vocab, src_spm, problems):
    """MarianTokenizer agrees with the layout the README documents: ids = vocab.json of the
    source pieces (a leading >>xx<< code as one token), then </s>; and the pieces decode back
    to the text. Returns the number of sentences whose decoded text differs (NFKC, unknowns)."""
    import sentencepiece as spm
    from transformers import MarianTokenizer

    tok = MarianTokenizer.from_pretrained(folder)
    sp = spm.SentencePieceProcessor(model_proto=src_spm)
    inverse = {i: p for p, i in vocab.items()}
    changed = 0
    for sid, text in items:
        code = []
        rest = text
        if text.startswith(">>") and "<<" in text:
            end = text.index("<<") + 2
            code, rest = [text[:end]], text[end:]
        pieces = code + sp.encode(rest, out_type=str)
        want = [vocab.get(p, sp.piece_to_id(p)) for p in pieces] + [vocab[EOS]]
        got = tok(text)["input_ids"]
        if got != want:
            problems.append(f"{folder} id {sid}: MarianTokenizer gives {got}, the documented"
                            f" mapping {want}")
        back = "".join(inverse[i] for i in got[:-1]).replace("\u2581", " ").strip()
        if back != text.strip():
            changed += 1
    if target_vocab is not None:
        if tok.convert_ids_to_tokens([target_vocab[PAD]]) != [PAD]:
            problems.append(f"{folder}: target vocabulary not used for decoding")
    return changed


# ---------------------------------------------------------------------------------------

def versions():
    import sentencepiece
    import torch
    import transformers

    return {"transformers": transformers.__version__, "torch": torch.__version__,
            "sentencepiece": sentencepiece.__version__, "python": sys.version.split()[0]}


def keep_decidable(recs, stats_list, max_length):
    """Splits the records into those whose margins are >= MIN_MARGIN and the left-out ones;
    returns (kept records, summary of the margins and hypothesis lengths, left-out list)."""
    greedy = [x for s in stats_list for x in s["greedy_gaps"]]
    nbest = [x for s in stats_list for x in s["nbest_gaps"]]
    unstable = [x for s in stats_list for x in s["unstable"]]
    kept, left_out = [], []
    for r, g, n, u in zip(recs, greedy, nbest, unstable):
        if g >= MIN_MARGIN and n >= MIN_MARGIN and not u:
            kept.append((r, g, n))
        else:
            entry = {k: r[k] for k in ("id", "source_language", "target_language") if k in r}
            left_out.append(dict(entry, min_greedy_gap=g, min_nbest_gap=n,
                                 beam_steps_move_under_perturbation=u))
    hyps = [h for r, _, _ in kept for h in r["nbest4"]]
    return [r for r, _, _ in kept], {
        "min_greedy_top1_top2_logprob_gap": min((g for _, g, _ in kept), default=None),
        "min_nbest_adjacent_score_gap": min((n for _, _, n in kept), default=None),
        "min_greedy_gap_before_leaving_out": min(greedy),
        "min_nbest_gap_before_leaving_out": min(nbest),
        "sentences_kept": len(kept),
        "sentences_left_out": len(left_out),
        "sentences_moved_by_perturbation": sum(unstable),
        "nbest_hypotheses": len(hyps),
        "nbest_hypotheses_ending_before_max_length":
            sum(len(h["ids"]) < max_length - 1 for h in hyps),
        "beam4_differs_from_nbest4_first": sum(s["beam_mismatch"] for s in stats_list),
    }, left_out


def meta_common(cfg, max_length, ids):
    kw = generate_kwargs(cfg, max_length)
    return {
        "versions": versions(),
        "generate": kw,
        "max_decoding_length": max_length - 1,
        "precision": "float32 on the CPU, one thread per process, batch 1 (TF32 off)",
        "sentences": ids,
        "min_margin": MIN_MARGIN,
        "beam_step_perturbation": {"uniform_noise_per_step": PERTURBATION,
                                   "seeds": list(PERTURBATION_SEEDS)},
        "score_convention": {
            "beam4/nbest4": "transformers' sequences_scores: sum of the tokens' log-probs "
                            "(log-softmax over the whole vocabulary, before bad_words_ids) "
                            "divided by len(ids), length_penalty 1.0",
            "greedy": "the same sum for the greedy ids divided by len(ids); a </s> forced at "
                      "max_length scores 0, as in beam search",
            "ids": "generated ids without the decoder start token, ending with </s>",
            "text": "MarianTokenizer.decode(ids, skip_special_tokens=True)",
        },
    }


def chunks(items, n):
    size = max(1, math.ceil(len(items) / n))
    return [items[i:i + size] for i in range(0, len(items), size)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder to write (must not exist or be empty)")
    ap.add_argument("--sentences", default=os.path.join(REPO, "tests/conformance/sentences.en"))
    ap.add_argument("--demo-model", default=os.path.join(REPO, "models/m30k-en-de-small"))
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--limit", type=int, default=0,
                    help="only the first N sentences per model: a quick check of the setup, "
                         "not data to commit")
    ap.add_argument("--skip-demo", action="store_true",
                    help="write the variants and refused models only (demo/ takes most of the"
                         " time and does not depend on the variants' init)")
    ap.add_argument("--skip-families", action="store_true",
                    help="leave out families/ and the families' refused/ cases")
    ap.add_argument("--only-families", action="store_true",
                    help="write families/ and the families' refused/ cases only (NLLB-200,"
                         " M2M-100, mBART-50; tools/conformance_families.py)")
    args = ap.parse_args()
    if os.path.isdir(args.out) and os.listdir(args.out):
        ap.error(f"{args.out} is not empty")
    with open(args.sentences, encoding="utf-8") as f:
        sentences = f.read().split("\n")
    if sentences[-1] == "":
        sentences.pop()
    if not sentences or any(not s.strip() for s in sentences):
        ap.error(f"{args.sentences}: empty file or empty line")

    log_path = os.path.join(tempfile.mkdtemp(prefix="make_conformance."), "spm.log")
    variant_ids = sorted(set(range(0, len(sentences), 6)) | set(VARIANT_EXTRA_IDS))
    plain_items = [(i, sentences[i]) for i in variant_ids]
    out = os.path.abspath(args.out)
    if args.only_families:
        return finish(*write_families(out, sentences, plain_items, args))
    rng = random.Random(SEED)
    english = english_corpus(rng, 3000) + [s for s in sentences if not non_latin(s)]
    target = [to_target(s) for s in english]
    # The source model normalizes as OPUS-MT's do (nmt_nfkc). The target model is only ever
    # used to decode, which does not normalize: "identity" keeps it 5 KB instead of 240 KB
    # and checks that the loader takes a model without a normalization table.
    src_spm = train_spm(english, SRC_SPM_SIZE, "nmt_nfkc", log_path)
    tgt_spm = train_spm(target, TGT_SPM_SIZE, "identity", log_path)
    tiny_spm = train_spm(english, SRC_SPM_SIZE, "identity", log_path)
    src_pieces, tgt_pieces = spm_pieces(src_spm), spm_pieces(tgt_spm)

    # Language codes cycle over the sentences; three edge cases follow (no space after the
    # code, a code in mid-sentence, which is plain text, and a code absent from vocab.json).
    coded_items = [(i, f"{LANGUAGE_CODES[k % len(LANGUAGE_CODES)]} {s}")
                   for k, (i, s) in enumerate(plain_items)]
    coded_items += [(1, LANGUAGE_CODES[0] + sentences[1]),
                    (2, sentences[2][:-1] + " " + LANGUAGE_CODES[1] + "."),
                    (3, ">>xyz<< " + sentences[3])]

    family_items = plain_items
    if args.limit:
        plain_items, coded_items = plain_items[:args.limit], coded_items[-args.limit:]
    tasks, plan, problems = [], [], []
    for n, (name, (desc, changes, opts)) in enumerate(VARIANTS.items()):
        folder = os.path.join(out, "models", name)
        os.makedirs(folder)
        vrng = random.Random(SEED * 1000 + n)
        if opts.get("separate_vocabs"):
            vocab = marian_vocab([src_pieces], vrng)
            target_vocab = marian_vocab([tgt_pieces], vrng)
            pad_id = target_vocab[PAD]
            sizes = dict(vocab_size=len(vocab), decoder_vocab_size=len(target_vocab))
        else:
            codes = LANGUAGE_CODES if opts.get("language_codes") else ()
            vocab = marian_vocab([src_pieces, tgt_pieces], vrng, codes)
            target_vocab = None
            pad_id = vocab[PAD]
            sizes = dict(vocab_size=len(vocab), decoder_vocab_size=len(vocab))
        fields = dict(BASE, **changes, **sizes, pad_token_id=pad_id,
                      decoder_start_token_id=pad_id, eos_token_id=vocab[EOS],
                      forced_eos_token_id=vocab[EOS], bos_token_id=vocab[EOS])
        write_tokenizer(folder, src_spm, tgt_spm, vocab, target_vocab)
        seed = SEED * 1000 + n
        shapes = build_model(folder, fields, seed, opts.get("final_logits_bias_std", 0.0),
                             opts.get("eos_boost", EOS_BOOST), pad_id)
        check_reload(folder, fields, problems)
        items = coded_items if opts.get("language_codes") else plain_items
        changed = check_tokenizer(folder, items, vocab, target_vocab, src_spm, problems)
        plan.append((name, folder, desc, fields, seed, shapes, items, changed, MAX_LENGTH_VARIANTS,
                     opts))

    refused_base = None
    for name, (field, value, why) in REFUSED.items():
        folder = os.path.join(out, "refused", name)
        os.makedirs(folder)
        vocab = marian_vocab([spm_pieces(tiny_spm), tgt_pieces], random.Random(SEED))
        fields = dict(TINY, vocab_size=len(vocab), decoder_vocab_size=len(vocab),
                      pad_token_id=vocab[PAD], decoder_start_token_id=vocab[PAD],
                      eos_token_id=vocab[EOS], forced_eos_token_id=vocab[EOS],
                      bos_token_id=vocab[EOS])
        write_tokenizer(folder, tiny_spm, tgt_spm, vocab)
        cfg_path = os.path.join(folder, "config.json")
        if refused_base is None:
            build_model(folder, fields, SEED, 0.0, EOS_BOOST, vocab[PAD])
            refused_base = folder
            with open(cfg_path, encoding="utf-8") as f:
                base_cfg = json.load(f)  # before its own field: each folder differs in one
        else:
            for f in ("model.safetensors", "generation_config.json"):
                shutil.copyfile(os.path.join(refused_base, f), os.path.join(folder, f))
        cfg = dict(base_cfg)
        cfg[field] = value
        write_json(cfg_path, cfg, indent=2)
        try:
            load_model(folder)
            loads = "loads (the field is ignored)"
        except Exception as e:  # noqa: BLE001 - recorded, not handled
            msg = (str(e).splitlines() or [""])[0][:200].replace(folder, "<folder>")
            loads = f"refuses: {type(e).__name__}: {msg}"
        write_json(os.path.join(folder, "meta.json"), {
            "refuse_field": field, "value": value, "why": why, "transformers": loads,
            "versions": versions()})

    with open(os.path.join(args.demo_model, "config.json"), encoding="utf-8") as f:
        demo_cfg = json.load(f)
    demo_items = [] if args.skip_demo else list(enumerate(sentences))[:args.limit or None]
    # Tasks of a few dozen sentences keep every process busy; results come back in order.
    variant_chunks = []
    for name, folder, desc, fields, seed, shapes, items, changed, max_length, opts in plan:
        parts = chunks(items, 2)
        variant_chunks.append(len(parts))
        tasks += [(folder, c, max_length, PERTURBATION["variants"]) for c in parts]
    demo_chunks = chunks(demo_items, max(1, args.jobs))
    tasks += [(os.path.abspath(args.demo_model), c, MAX_LENGTH_DEMO, PERTURBATION["demo"])
              for c in demo_chunks]

    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(args.jobs, initializer=_worker_init) as pool:
        results = pool.map(translate_chunk, tasks, chunksize=1)

    summary = {}
    at = 0
    for (name, folder, desc, fields, seed, shapes, items, changed, max_length, opts), n in \
            zip(plan, variant_chunks):
        recs = [r for rs, _ in results[at:at + n] for r in rs]
        stats = [st for _, st in results[at:at + n]]
        at += n
        recs, margins, left_out = keep_decidable(recs, stats, max_length)
        write_jsonl(os.path.join(folder, "references.jsonl"), recs)
        meta = meta_common(fields, max_length, [r["id"] for r in recs])
        meta.update(description=desc, seed=seed, config=fields, tensors=shapes,
                    weights="float32 safetensors written by save_pretrained",
                    init=dict(attention_gain=ATTENTION_GAIN, ffn_gain=FFN_GAIN,
                              embedding_std=EMBEDDING_STD, output_gain=OUTPUT_GAIN,
                              eos_boost=opts.get("eos_boost", EOS_BOOST),
                              final_logits_bias_std=opts.get("final_logits_bias_std", 0.0)),
                    sources_not_reproduced_by_decoding=changed, margins=margins,
                    left_out=left_out)
        write_json(os.path.join(folder, "meta.json"), meta)
        summary[name] = meta["margins"]
    if not args.skip_demo:
        demo_recs = [r for recs, _ in results[at:] for r in recs]
        write_demo(out, demo_cfg, demo_recs, [st for _, st in results[at:]], summary)
    problems += [p for _, st in results for p in st["problems"]]
    if not args.skip_families:
        family_summary, family_problems = write_families(out, sentences, family_items, args)
        summary.update(family_summary)
        problems += family_problems
    finish(summary, problems)


def write_families(out, sentences, plain_items, args):
    """families/ and the families' refused/ cases (tools/conformance_families.py)."""
    import conformance_families

    log_path = os.path.join(tempfile.mkdtemp(prefix="make_conformance."), "spm.log")
    if args.limit:
        plain_items = plain_items[:args.limit]
    return conformance_families.write_families(out, sentences, plain_items, args.jobs, log_path)


def finish(summary, problems):
    print(json.dumps(summary, indent=1, sort_keys=True))
    for p in problems:
        print(f"make_conformance: {p}", file=sys.stderr)
    if problems:
        sys.exit(f"make_conformance: {len(problems)} problems (the files were written)")


def write_demo(out, demo_cfg, demo_recs, demo_stats, summary):
    """demo/: the references of the embedded demo model, less its undecidable sentences."""
    os.makedirs(os.path.join(out, "demo"))
    demo_recs, margins, left_out = keep_decidable(demo_recs, demo_stats, MAX_LENGTH_DEMO)
    write_jsonl(os.path.join(out, "demo", "references.jsonl"), demo_recs)
    meta = meta_common(demo_cfg, MAX_LENGTH_DEMO, [r["id"] for r in demo_recs])
    meta.update(description="the embedded demo model models/m30k-en-de-small (fp16 weights "
                            "upcast to float32)", margins=margins, left_out=left_out)
    write_json(os.path.join(out, "demo", "meta.json"), meta)
    summary["demo"] = meta["margins"]


def write_jsonl(path, records):
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
