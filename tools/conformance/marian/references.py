"""The Marian references: one chunk of sentences in a worker process, the meta.json fields
every Marian folder shares, and demo/."""
import os

from .model import load_model
from .variants import MAX_LENGTH_DEMO, generate_kwargs
from ..records import versions, write_json, write_jsonl
from ..search import (MIN_MARGIN, PERTURBATION, PERTURBATION_SEEDS, keep_decidable,
                     search_modes)


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
