#!/usr/bin/env python3
"""transformers' generate() with the repetition controls (no_repeat_ngram_size,
repetition_penalty, and suppress_sequences as bad_words_ids) on committed conformance models,
greedy and beam 4, written as tests/conformance/controls/repetition/{references.jsonl,meta.json}.

    python3 tools/conformance/controls/repetition.py --out tests/conformance/controls/repetition

(NMT_REPO names the repository when the script runs from a copy elsewhere.)

Sources are the models' own reference sentences (their source_ids, already kept as decidable
without controls by tools/make_conformance.py); each record is one (model, sentence, search,
controls) with transformers' ids and the ids without the controls, so that the test can show
the controls changed something. The suppressed sequences are taken from the plain output (its
first token, and a bigram of it), so that they bite. Settings whose margins float rounding
could decide are left out as the other references do (tools/conformance/search.py): greedy
steps whose best two processed scores differ by less than MIN_MARGIN, beam runs that move
under the per-step noise. transformers runs on the CPU in float32, one thread per process.
"""
import argparse
import json
import math
import multiprocessing
import os
import sys

REPO = os.environ.get("NMT_REPO") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(REPO, "tools"))

from conformance.records import versions, write_json, write_jsonl  # noqa: E402
from conformance.search import MIN_MARGIN, PERTURBATION, PERTURBATION_SEEDS, _strip, _worker_init  # noqa: E402

# (name, model folder, references the sources come from, kind, perturbation of a beam step,
# sentences: the first N of its references). The demo model decodes up to 255 tokens, so it
# takes fewer sentences and no boosting penalty (p < 1 makes a trained model loop to the limit).
MODELS = (
    ("demo", "models/m30k-en-de-small", "tests/conformance/demo/references.jsonl", "marian",
     PERTURBATION["demo"], 4),
    ("swish_tied", "tests/conformance/models/swish_tied", None, "marian", PERTURBATION["variants"], 8),
    ("relu_untied", "tests/conformance/models/relu_untied", None, "marian", PERTURBATION["variants"], 8),
    ("nllb", "tests/conformance/families/nllb", None, "nllb", PERTURBATION["variants"], 8),
)
SEARCHES = {"greedy": 1, "beam4": 4}


def settings(plain, boost=True):
    """The control settings tried for one sentence, from its plain greedy ids (EOS last)."""
    body = plain[:-1]
    out = [{"no_repeat_ngram_size": 1}, {"no_repeat_ngram_size": 2}, {"no_repeat_ngram_size": 3},
           {"repetition_penalty": 1.5}] + ([{"repetition_penalty": 0.7}] if boost else [])
    if body:
        seqs = [[body[-1]]]
        if len(body) >= 3:
            seqs.append(body[1:3])
        out.append({"suppress_sequences": seqs})
        out.append({"no_repeat_ngram_size": 2, "repetition_penalty": 1.3, "suppress_sequences": seqs[:1]})
    return out


def generate_kwargs(kind, cfg, max_length, controls, beams):
    kw = dict(num_beams=beams, num_return_sequences=1, do_sample=False, max_length=max_length,
              length_penalty=1.0, early_stopping=False, eos_token_id=cfg["eos_token_id"],
              forced_eos_token_id=cfg["eos_token_id"], pad_token_id=cfg["pad_token_id"],
              decoder_start_token_id=cfg["decoder_start_token_id"])
    bad = [[cfg["pad_token_id"]]] if kind == "marian" else []
    bad += controls.get("suppress_sequences", [])
    if bad:
        kw["bad_words_ids"] = bad
    if controls.get("no_repeat_ngram_size"):
        kw["no_repeat_ngram_size"] = controls["no_repeat_ngram_size"]
    if "repetition_penalty" in controls:
        kw["repetition_penalty"] = controls["repetition_penalty"]
    return kw


def run_model(task):
    """One model's records, or its error (the other models' records are still written)."""
    try:
        return run_model_records(task) + (None,)
    except Exception as e:  # noqa: BLE001 - reported in meta.json and on stdout
        import traceback
        return [], [], 0, f"{task[0]}: {e!r}\n{traceback.format_exc()}"


def run_model_records(task):
    name, folder, refs, kind, eps, count = task
    _worker_init()
    import torch
    from conformance.search import noise_processor

    path = os.path.join(REPO, folder)
    if kind == "marian":
        from conformance.marian.model import load_model
        model = load_model(path)
    else:
        from conformance.families.models import load_family_model
        model = load_family_model(kind, path)
    cfg = model.config.to_dict()
    meta = json.load(open(os.path.join(path if refs is None else os.path.dirname(os.path.join(REPO, refs)),
                                       "meta.json")))
    max_length = meta["max_decoding_length"] + 1
    with open(os.path.join(REPO, refs) if refs else os.path.join(path, "references.jsonl")) as f:
        sources = [json.loads(line) for line in f][:count]
    records, left_out, unchanged = [], [], 0
    with torch.no_grad():
        for src in sources:
            enc = {"input_ids": torch.tensor([src["source_ids"]]),
                   "attention_mask": torch.ones(1, len(src["source_ids"]), dtype=torch.long)}
            extra = {}
            forced = -1
            if kind != "marian":
                forced = src["greedy"]["ids"][0]  # the target language's token
                extra["forced_bos_token_id"] = forced
            plain_of = {}
            for search, beams in SEARCHES.items():
                plain = model.generate(**enc, **generate_kwargs(kind, cfg, max_length, {}, beams), **extra)
                plain_of[search] = _strip(plain[0].tolist(), cfg["pad_token_id"])
            for controls in settings(src["greedy"]["ids"], boost=name != "demo"):
                for search, beams in SEARCHES.items():
                    kw = generate_kwargs(kind, cfg, max_length, controls, beams)
                    out = model.generate(**enc, **kw, **extra, output_scores=True, return_dict_in_generate=True)
                    ids = _strip(out.sequences[0].tolist(), cfg["pad_token_id"])
                    plain_ids = plain_of[search]
                    why = None
                    if beams == 1:  # the processed scores' top-2 margin at each unforced step
                        for s in out.scores:
                            row = s[0]
                            if torch.isfinite(row).sum().item() <= 1:
                                continue
                            top = torch.topk(row.float(), 2).values
                            if (top[0] - top[1]).item() < MIN_MARGIN:
                                why = f"greedy margin {(top[0] - top[1]).item():.2e}"
                                break
                    else:
                        for seed in PERTURBATION_SEEDS:
                            moved = model.generate(**enc, **kw, **extra, logits_processor=noise_processor(eps, seed))
                            if _strip(moved[0].tolist(), cfg["pad_token_id"]) != ids:
                                why = f"moved under noise {eps} (seed {seed})"
                                break
                    rec = {"model": name, "model_dir": folder, "id": src["id"], "source_ids": src["source_ids"],
                           "forced_bos_id": forced, "search": search, "beam_size": beams,
                           "max_decoding_length": max_length - 1, "controls": controls, "ids": ids,
                           "plain_ids": plain_ids}
                    if why:
                        left_out.append({"model": name, "id": src["id"], "search": search, "controls": controls,
                                         "why": why})
                        continue
                    unchanged += ids == plain_ids
                    records.append(rec)
    return records, left_out, unchanged


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--jobs", type=int, default=len(MODELS))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
        results = pool.map(run_model, MODELS)
    records = [r for rs, _, _, _ in results for r in rs]
    left_out = [x for _, lo, _, _ in results for x in lo]
    errors = [e for _, _, _, e in results if e]
    for e in errors:
        print("ERROR", e)
    write_jsonl(os.path.join(args.out, "references.jsonl"), records)
    changed = sum(r["ids"] != r["plain_ids"] for r in records)
    meta = {
        "versions": versions(),
        "description": "transformers generate() with no_repeat_ngram_size, repetition_penalty and "
                       "bad_words_ids (suppress_sequences, after the model's own [[pad]] for Marian), "
                       "greedy and beam 4 (length_penalty 1, early_stopping False, forced EOS at "
                       "max_length, the family's target language as forced_bos_token_id)",
        "generator": "tools/conformance/controls/repetition.py",
        "precision": "float32 on the CPU, one thread per process, batch 1 (TF32 off)",
        "models": {m[0]: m[1] for m in MODELS},
        "records": len(records),
        "changed_by_controls": changed,
        "min_margin": MIN_MARGIN,
        "beam_step_perturbation": {"uniform_noise_per_step": PERTURBATION, "seeds": list(PERTURBATION_SEEDS)},
        "left_out": left_out,
        "errors": errors,
        "ids": "generated ids without the decoder start token, ending with </s>",
    }
    write_json(os.path.join(args.out, "meta.json"), meta)
    print(f"{len(records)} records ({changed} changed by their controls), {len(left_out)} left out, "
          f"{len(errors)} models failed")
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
