"""The NLLB-200 / M2M-100 / mBART-50 part of the conformance generator: called by
tools/make_conformance.py and writes, under OUT,

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
import multiprocessing
import os
import random
import traceback

from .models import (build_family_model, calibrate, check_family_reload,
                            load_family_model, output_gain, save_family_model)
from .references import distinct_summary, reference_items, translate_family_chunk
from .tokenizers import (load_tokenizer, tokenizer_kwargs, tokenizer_records,
                                tokenizer_with_fallback, vocab_size_of)
from .variants import (COMMON, FAMILIES, INIT_CANDIDATES, MASK, MAX_LENGTH, PERTURBATION,
                              POSITION_STD, REFUSED, SEED, SPM_SIZE, TINY, TINY_SPM_SIZE,
                              VARIANTS, family_generate_kwargs)
from ..marian.variants import ATTENTION_GAIN, FFN_GAIN
from ..records import versions, write_json, write_jsonl
from ..search import MIN_MARGIN, PERTURBATION_SEEDS, _worker_init, chunks, keep_decidable
from ..sentencepiece_models import family_spms
from ..text import english_corpus, non_latin, to_target


def family_corpus():
    """The SentencePiece training text: template sentences, sentences.en's Latin lines and
    the made-up language of both (text.english_corpus / to_target)."""
    rng = random.Random(SEED)
    english = english_corpus(rng, 3000)
    return english, [to_target(s) for s in english]


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
    extra.append(("made_up_language", to_target(plain_items[1][1])))
    tok_records, differs = tokenizer_records(variant, tok, spm_bytes, vocab, codes, extra)
    write_jsonl(os.path.join(folder, "tokenizer.jsonl"), tok_records)
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
                init=dict(attention_gain=ATTENTION_GAIN, ffn_gain=FFN_GAIN,
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
        write_json(cfg_path, cfg, indent=2)
    try:
        load_family_model(variant, folder)
        load_tokenizer(variant, folder)
        loads = "loads (model and tokenizer)"
    except Exception as e:  # noqa: BLE001 - recorded, not handled
        msg = (str(e).splitlines() or [""])[0][:200].replace(folder, "<folder>")
        loads = f"refuses: {type(e).__name__}: {msg}"
    write_json(os.path.join(folder, "meta.json"), {
        "refuse_field": field, "value": value, "why": why, "transformers": loads,
        "built_like": variant, "versions": versions()})


def write_families(out, sentences, plain_items, jobs, log_path):
    """Writes families/ and the families' refused/ cases under out; returns (summary,
    problems)."""
    import sentencepiece  # noqa: F401 - fail early where it is missing

    english, target = family_corpus()
    latin = [s for s in sentences if not non_latin(s)]
    corpus = english + latin + target + [to_target(s) for s in latin]
    spms = {t: family_spms(corpus, SPM_SIZE, t, log_path) for t in ("bpe", "unigram")}
    tiny_spms = {t: family_spms(english, TINY_SPM_SIZE, t, log_path) for t in ("bpe", "unigram")}
    problems, plans = [], []
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(min(jobs, len(VARIANTS)), initializer=_worker_init) as pool:
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
        parts = chunks(p["items"], max(1, jobs // len(plans)))
        counts.append(len(parts))
        tasks += [(p["variant"], p["folder"], c, PERTURBATION) for c in parts]
    with ctx.Pool(jobs, initializer=_worker_init) as pool:
        results = pool.map(translate_family_chunk, tasks, chunksize=1)

    summary, at = {}, 0
    for p, n in zip(plans, counts):
        recs = [r for rs, _ in results[at:at + n] for r in rs]
        stats = [st for _, st in results[at:at + n]]
        at += n
        problems += [x for st in stats for x in st["problems"]]
        recs, margins, left_out = keep_decidable(recs, stats, MAX_LENGTH)
        write_jsonl(os.path.join(p["folder"], "references.jsonl"), recs)
        kw = family_generate_kwargs(MAX_LENGTH)
        meta = {
            "versions": versions(),
            "generate": kw,
            "max_decoding_length": MAX_LENGTH - 1,
            "precision": "float32 on the CPU, one thread per process, batch 1 (TF32 off)",
            "records": [[r["id"], r["source_language"], r["target_language"]] for r in recs],
            "min_margin": MIN_MARGIN,
            "beam_step_perturbation": {"uniform_noise_per_step": PERTURBATION,
                                       "seeds": list(PERTURBATION_SEEDS)},
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
        write_json(os.path.join(p["folder"], "meta.json"), meta)
        summary[p["variant"]] = dict(margins, **meta["variety"],
                                     eos_boost=p["info"]["init"]["eos_boost"])
    return summary, problems
