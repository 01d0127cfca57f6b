"""The Marian variants' vocab.json and tokenizer files, and the check that MarianTokenizer
agrees with the layout the README documents."""
import os

from .variants import EOS, PAD, UNK
from ..records import write_json


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
