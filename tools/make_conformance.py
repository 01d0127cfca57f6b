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
tools/conformance/families/generate.py; --only-families writes those alone, --skip-families
leaves them out), and controls/<control>/ (the decoding controls' references, each written by
its generator in tools/conformance/controls/ from the committed models; --only-controls,
--skip-controls). tests/conformance/README.md describes every file; tools/conformance/__init__.py
lists the modules.

Everything is deterministic, so running it twice gives identical files: the SentencePiece
models are trained single-threaded from an in-memory corpus that this script writes itself
(sentences.en plus template sentences, and a made-up target language derived from them by
hashing words), the weights come from seeded torch generators, and transformers runs on the
CPU in float32 with one thread per process (CPU rather than GPU: the models are tiny, the CPU
is bit-reproducible, and many sentences can run in parallel processes).
"""
import argparse
import json
import multiprocessing
import os
import random
import shutil
import sys
import tempfile

from conformance.marian.model import build_model, check_reload, load_model
from conformance.marian.references import meta_common, translate_chunk, write_demo
from conformance.marian.tokenizer import check_tokenizer, marian_vocab, write_tokenizer
from conformance.marian.variants import (ATTENTION_GAIN, BASE, EMBEDDING_STD, EOS, EOS_BOOST,
                                         FFN_GAIN, LANGUAGE_CODES, MAX_LENGTH_DEMO,
                                         MAX_LENGTH_VARIANTS, OUTPUT_GAIN, PAD, REFUSED, SEED,
                                         SRC_SPM_SIZE, TGT_SPM_SIZE, TINY, VARIANT_EXTRA_IDS,
                                         VARIANTS)
from conformance.records import versions, write_json, write_jsonl
from conformance.search import PERTURBATION, _worker_init, chunks, keep_decidable
from conformance.sentencepiece_models import spm_pieces, train_spm
from conformance.text import english_corpus, non_latin, to_target

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # inherited by the workers too


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
    ap.add_argument("--only-controls", action="store_true",
                    help="write controls/ only: the decoding controls' references, each by its"
                         " own generator (tools/conformance/controls/), from the committed models")
    ap.add_argument("--skip-controls", action="store_true", help="leave out controls/")
    ap.add_argument("--only-families", action="store_true",
                    help="write families/ and the families' refused/ cases only (NLLB-200,"
                         " M2M-100, mBART-50; tools/conformance/families/generate.py)")
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
    if args.only_controls:
        return finish({"controls": write_controls(out)}, [])
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
    if not args.skip_controls:
        summary["controls"] = write_controls(out)
    finish(summary, problems)


def write_families(out, sentences, plain_items, args):
    """families/ and the families' refused/ cases (tools/conformance/families/generate.py)."""
    from conformance.families import generate as conformance_families

    log_path = os.path.join(tempfile.mkdtemp(prefix="make_conformance."), "spm.log")
    if args.limit:
        plain_items = plain_items[:args.limit]
    return conformance_families.write_families(out, sentences, plain_items, args.jobs, log_path)


CONTROLS = ("alignments", "prefix_score", "repetition")  # tools/conformance/controls/<name>.py


def write_controls(out):
    """Each control's standalone generator into OUT/controls/<name>/. They read the committed
    models (tests/conformance, models/), which the rest of this script reproduces byte for
    byte, so they run after it or alone (--only-controls)."""
    import subprocess
    here = os.path.join(REPO, "tools", "conformance", "controls")
    for name in CONTROLS:
        subprocess.run([sys.executable, os.path.join(here, name + ".py"),
                        "--out", os.path.join(out, "controls", name)], check=True)
    return list(CONTROLS)


def finish(summary, problems):
    print(json.dumps(summary, indent=1, sort_keys=True))
    for p in problems:
        print(f"make_conformance: {p}", file=sys.stderr)
    if problems:
        sys.exit(f"make_conformance: {len(problems)} problems (the files were written)")


if __name__ == "__main__":
    main()
