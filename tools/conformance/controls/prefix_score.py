"""target_prefix and Score references from transformers (docs/decoding.md, "Target prefix",
"Score"), for tests/conformance/controls/prefix_score/:

  references.jsonl  one record per case: {"model", "kind": "prefix" | "score", ...}
  meta.json         versions, models, conventions, what was left out

Run from the repository root: python3 -m tools.conformance.controls.prefix_score [--out DIR]

Prefix: generate() with decoder_input_ids = [decoder start] + [language token of the families]
+ prefix, greedy and beam 4, the model's committed generate kwargs (meta.json "generate");
its hypotheses (ids after the decoder start token: the language token, the prefix, the
continuation and </s>) and scores. transformers scores only the tokens after the prompt
(beam search's cur_len + 1 - decoder_prompt_len); the greedy score is the same convention
over output_logits' log-softmax (a forced token, one finite score, counts 0). Score: one
forward pass with labels = [language token] + target + [</s>], each label's log-softmax
(the forced language token 0, as translation forces it), the score their sum over their
count (length_penalty 1); the forced ones as a translation forces them: the language token
and an EOS at the maximum length (ForcedEOS) count 0. Float32 on the CPU, one thread, as the other references.
"""
import argparse
import json
import math
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))  # --root replaces it
MODELS = [  # (name, folder, references whose sources and hypotheses seed the cases, family)
    ("demo", "models/m30k-en-de-small", "tests/conformance/demo", False),
    ("relu_untied", "tests/conformance/models/relu_untied", "tests/conformance/models/relu_untied", False),
    ("nllb", "tests/conformance/families/nllb", "tests/conformance/families/nllb", True),
]
SENTENCES = 8      # records per model
MIN_MARGIN = 1e-4  # as tools/conformance/search.py: closer greedy choices are left out
NOISE = {"demo": 2e-5, "relu_untied": 3e-3, "nllb": 3e-3}  # beam perturbation (search.py)


def load(folder):
    import torch
    from transformers import AutoModelForSeq2SeqLM

    model = AutoModelForSeq2SeqLM.from_pretrained(os.path.join(ROOT, folder), dtype=torch.float32)
    return model.float().eval()  # the demo model's float16 weights upcast, as its references


def records(refs):
    out = []
    with open(os.path.join(ROOT, refs, "references.jsonl")) as f:
        for line in f:
            out.append(json.loads(line))
            if len(out) == SENTENCES:
                break
    return out


def prefixes(rec, others, lang):
    """Two prefixes per record: the start of its last 4-best hypothesis (a continuation the
    search did not prefer) and the start of another record's best (a forced detour)."""
    skip = 1 if lang is not None else 0
    body = lambda ids: [t for t in ids[skip:] if t != ids[-1]] if ids else []
    last = body(rec["nbest4"][-1]["ids"])[:2] if rec.get("nbest4") else []
    other = body(others["beam4"]["ids"])[:3]
    return [p for p in (last, other) if p]


def greedy(model, enc, start, kw, common):
    import torch

    out = model.generate(**enc, decoder_input_ids=start, **kw["greedy"], **common, output_scores=True,
                         output_logits=True, return_dict_in_generate=True)
    prompt = start.shape[1]
    seq = out.sequences[0].tolist()  # batch 1: no padding
    gen = seq[prompt:]
    total, gap, tokens = 0.0, math.inf, []
    banned = [b[0] for b in common.get("bad_words_ids", [])]
    for t, tid in enumerate(gen):
        lp = torch.log_softmax(out.logits[t][0].float(), dim=-1)
        if torch.isfinite(out.scores[t][0]).sum().item() == 1:
            tokens.append(0.0)  # forced (</s> at max_length)
            continue
        tokens.append(lp[tid].item())
        total += lp[tid].item()
        for b in banned:
            lp[b] = -math.inf
        top = torch.topk(lp, 2).values
        gap = min(gap, (top[0] - top[1]).item())
    ids = seq[1:prompt] + gen
    return {"ids": ids, "score": total / len(gen), "token_scores": [0.0] * (prompt - 1) + tokens}, gap


def beam(model, enc, start, kw, common, eps):
    import torch
    from tools.conformance.search import noise_processor

    out = model.generate(**enc, decoder_input_ids=start, **kw["beam4"], **common, output_scores=True,
                         return_dict_in_generate=True)
    strip = lambda s: s[1:]  # batch 1, one sequence: no padding
    ids = strip(out.sequences[0].tolist())
    moved = False
    for seed in (1, 2):
        o = model.generate(**enc, decoder_input_ids=start, **kw["beam4"], **common,
                           logits_processor=noise_processor(eps, seed))
        moved |= strip(o[0].tolist()) != ids
    return {"ids": ids, "score": out.sequences_scores[0].item()}, moved


def forced_as_translated(labels, tokens, lang, max_len, forced_eos):
    """The log-probs a translation forces: the language token's 0 (ForcedBOS), and the EOS
    at the maximum length 0 (ForcedEOS, where the model sets forced_eos_token_id), so that
    scoring a translation gives its score. Returns (token_scores, score)."""
    tokens = list(tokens)
    if lang is not None:
        tokens[0] = 0.0
    if forced_eos and len(labels) == max_len:
        tokens[-1] = 0.0
    return tokens, sum(tokens) / len(labels)


def score(model, enc, start_id, lang, target, eos, max_len, forced_eos):
    import torch

    labels = ([lang] if lang is not None else []) + target + [eos]
    dec = torch.tensor([[start_id] + labels[:-1]])
    logits = model(**enc, decoder_input_ids=dec).logits[0].float()
    lp = torch.log_softmax(logits, dim=-1)
    tokens, total = forced_as_translated(labels, [lp[i, t].item() for i, t in enumerate(labels)], lang,
                                         max_len, forced_eos)
    return {"ids": labels, "token_scores": tokens, "score": total}


def model_cases(task):
    """Every case of one model (in a worker process: one thread each, as the other
    references): (cases, left out)."""
    import traceback

    try:
        return _model_cases(task)
    except Exception:  # noqa: BLE001 - reported in meta.json, the run goes on with the others
        return [], [{"model": task[1][0], "error": traceback.format_exc()}]


def _model_cases(task):
    root, (name, folder, refs, family) = task
    global ROOT
    ROOT = root
    sys.path.insert(0, ROOT)
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["TRANSFORMERS_VERBOSITY"] = "error"
    import torch

    torch.set_num_threads(1)
    cases, left_out = [], []
    with torch.no_grad():
        meta = json.load(open(os.path.join(ROOT, refs, "meta.json")))
        kw = meta["generate"]
        common = dict(kw["common"])
        max_len = meta["max_decoding_length"]
        model = load(folder)
        recs = records(refs)
        for n, rec in enumerate(recs):
            lang = rec["beam4"]["ids"][0] if family else None
            enc = {"input_ids": torch.tensor([rec["source_ids"]])}
            enc["attention_mask"] = torch.ones_like(enc["input_ids"])
            base = {"model": name, "model_dir": folder, "max_decoding_length": max_len,
                    "source_ids": rec["source_ids"], "forced_bos_id": -1 if lang is None else lang}
            for prefix in prefixes(rec, recs[(n + 1) % len(recs)], lang):
                start = torch.tensor([[common["decoder_start_token_id"]] + ([lang] if family else []) + prefix])
                g, gap = greedy(model, enc, start, kw, common)
                b, moved = beam(model, enc, start, kw, common, NOISE[name])
                if gap < MIN_MARGIN or moved:
                    left_out.append({"model": name, "id": rec["id"], "prefix": prefix,
                                     "greedy_gap": gap, "beam_moved": moved})
                    continue
                cases.append(dict(base, kind="prefix", id=rec["id"], target_prefix=prefix, greedy=g, beam4=b))
            skip = 1 if family else 0
            eos = common["eos_token_id"]
            best = rec["beam4"]["ids"][skip:-1]
            second = rec["nbest4"][1]["ids"][skip:-1] if rec.get("nbest4") else []
            for target in (best, second, recs[(n + 2) % len(recs)]["beam4"]["ids"][skip:-1]):
                if not target:
                    continue
                s = score(model, enc, common["decoder_start_token_id"], lang, target, eos, max_len,
                          "forced_eos_token_id" in common)
                cases.append(dict(base, kind="score", id=rec["id"], target=target, **s,
                                  translation_score=rec["beam4"]["score"] if target == best else None))
    return cases, left_out


def main():
    global ROOT
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=ROOT, help="the repository (models, references)")
    ap.add_argument("--out", default=None, help="default: ROOT/tests/conformance/controls/prefix_score")
    args = ap.parse_args()
    ROOT = os.path.abspath(args.root)
    sys.path.insert(0, ROOT)
    args.out = args.out or os.path.join(ROOT, "tests/conformance/controls/prefix_score")
    import multiprocessing

    import torch
    import transformers

    os.makedirs(args.out, exist_ok=True)
    cases, left_out = [], []
    with multiprocessing.get_context("spawn").Pool(len(MODELS)) as pool:
        for c, l in pool.map(model_cases, [(ROOT, m) for m in MODELS]):
            cases += c
            left_out += l
    with open(os.path.join(args.out, "references.jsonl"), "w") as f:
        for c in cases:
            f.write(json.dumps(c) + "\n")
    meta = {"description": __doc__.split("\n\n")[0],
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                         "python": sys.version.split()[0]},
            "models": [m[:2] for m in MODELS], "sentences_per_model": SENTENCES, "min_margin": MIN_MARGIN,
            "beam_step_perturbation": NOISE,
            "conventions": {
                "prefix_ids": "hypotheses' ids include the language token (families) and the prefix",
                "prefix_score": "sum of the log-probs after the prompt / their count (beam search: "
                                "cur_len + 1 - decoder_prompt_len); prompt token_scores 0",
                "score": "labels = [language] + target + [</s>]; the language token's log-prob 0, and "
                         "</s> at max_decoding_length 0 (ForcedEOS), as a translation forces them; "
                         "score = sum / len(labels)"},
            "cases": {"prefix": sum(c["kind"] == "prefix" for c in cases),
                      "score": sum(c["kind"] == "score" for c in cases)},
            "left_out": left_out}
    with open(os.path.join(args.out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True)
    print(f"prefix_score: {meta['cases']} cases, {len(left_out)} left out -> {args.out}")
    for entry in left_out:
        if "error" in entry:
            print(f"{entry['model']}: {entry['error']}")


if __name__ == "__main__":
    main()
