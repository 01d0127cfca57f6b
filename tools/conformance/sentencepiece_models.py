"""SentencePiece training: Marian's convention (unigram, </s> 0, <unk> 1) and fairseq's (the
families': <unk> 0, <s> 1, </s> 2) with the families' own normalization rule table."""
import io
import os
import sys


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


FAIRSEQ_SPM_IDS = dict(unk_id=0, bos_id=1, eos_id=2, pad_id=-1)  # as fairseq's models


# The SentencePiece models' normalization: a rule table of the project's own in the format of
# sentencepiece's built-in ones (compiled into the model's precompiled_charsmap, which
# tokenizer.json carries too), a few entries of NFKC's kind: full-width ASCII, ligatures, a
# fraction, no-break and ideographic spaces, tab/newline/CR to a space, the ellipsis, two
# combining sequences. nmt_nfkc's own table would add 240 KB to each model and ~320 KB to
# each tokenizer.json; "identity" (no table) is refused by transformers 5.17's tokenizers-backed
# classes ("Cannot parse precompiled_charsmap").
# The name is stored in every model and meta.json: it keeps the generator's former file name.
NORMALIZATION_TSV = "conformance_families_normalization.tsv"
NORMALIZATION_RULES = tuple((f"{c:X}", f"{c - 0xFEE0:X}") for c in range(0xFF01, 0xFF5F)) + (
    ("FB00", "66 66"), ("FB01", "66 69"), ("FB02", "66 6C"), ("BD", "31 2044 32"),
    ("A0", "20"), ("3000", "20"), ("9", "20"), ("A", "20"), ("D", "20"),
    ("2026", "2E 2E 2E"), ("65 301", "E9"), ("61 300", "E0"))


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
        custom = train_spm(lines, size, None, log_path, model_type, FAIRSEQ_SPM_IDS,
                              rule_tsv=NORMALIZATION_TSV)
    finally:
        os.chdir(cwd)
    return [("rules:" + NORMALIZATION_TSV, custom),
            ("nmt_nfkc", train_spm(lines, size, "nmt_nfkc", log_path, model_type,
                                      FAIRSEQ_SPM_IDS))]
