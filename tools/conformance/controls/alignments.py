#!/usr/bin/env python3
"""Writes tests/conformance/controls/alignments/{references.jsonl,meta.json}: transformers'
cross-attention alignments of the greedy and beam-4 best hypotheses of committed conformance
models, the reference of return_alignments (docs/decoding.md, "Alignments").

    python3 tools/conformance/controls/alignments.py --out tests/conformance/controls/alignments

For each model and sentence (the source ids of the model's committed references) it runs
generate(output_attentions=True, return_dict_in_generate=True) with eager attention in
float32 and takes, for each generated token, the cross-attention of the penultimate decoder
layer (the only one of a one-layer decoder) averaged over its heads, in the row that produced
the token (greedy: row 0; beam search: beam_indices, the running beam the token extended),
and its argmax over the source positions (torch.argmax: the first of equal maxima). Each
alignment records the gap between the best and second-best averaged probability, so that a
test can count exact ties instead of failing on them. With --device cuda (TF32 off) it also
computes the references on the GPU and records in meta.json how many argmax indices differ.
"""
import argparse
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

# (name, model folder, committed references, sentences): the demo model (trained, Marian,
# 3 decoder layers), two Marian variants (2 decoder layers; 1 decoder layer: layer 0) and an
# NLLB-200 family model (pre-norm, a forced target-language token).
MODELS = [
    ("demo", "models/m30k-en-de-small", "tests/conformance/demo/references.jsonl", 24),
    ("relu_untied", "tests/conformance/models/relu_untied",
     "tests/conformance/models/relu_untied/references.jsonl", 12),
    ("deep_enc_shallow_dec", "tests/conformance/models/deep_enc_shallow_dec",
     "tests/conformance/models/deep_enc_shallow_dec/references.jsonl", 12),
    ("nllb", "tests/conformance/families/nllb", "tests/conformance/families/nllb/references.jsonl", 12),
]


def alignment_layer(decoder_layers):
    """The penultimate decoder layer (Garg et al. 2019), the only one of a 1-layer decoder."""
    return max(0, decoder_layers - 2)


def generate_with_alignments(model, input_ids, kwargs, device):
    import torch

    out = model.generate(input_ids=input_ids.to(device), output_attentions=True, output_scores=True,
                         return_dict_in_generate=True, **kwargs)
    layer = alignment_layer(model.config.decoder_layers)
    seq = out.sequences[0].tolist()[1:]  # without the decoder start token
    beams = kwargs.get("num_beams", 1)
    rows = out.beam_indices[0].tolist() if beams > 1 else [0] * len(seq)
    align, gaps = [], []
    for t in range(len(seq)):
        probs = out.cross_attentions[t][layer][rows[t], :, -1, :].double().mean(dim=0)  # [source]
        top = torch.topk(probs, min(2, probs.numel()))
        align.append(int(torch.argmax(probs)))
        gaps.append(float(top.values[0] - top.values[1]) if probs.numel() > 1 else 1.0)
    return seq, align, gaps, layer


def add_modes(rec, ref, meta, common, extra, model, gpu_model, name, problems, stats):
    """rec[mode] for greedy and beam 4: ids, alignments, gaps (and the GPU's comparison)."""
    import torch

    for mode in ("greedy", "beam4"):
        kw = dict(meta["generate"][mode], **common, **extra)
        ids = torch.tensor([ref["source_ids"]])
        with torch.no_grad():
            seq, align, gaps, _ = generate_with_alignments(model, ids, kw, "cpu")
            if gpu_model is not None:
                gseq, galign, _, _ = generate_with_alignments(gpu_model, ids, kw, "cuda")
                if gseq == seq:
                    stats["gpu_tokens"] += len(align)
                    stats["gpu_differences"] += sum(a != b for a, b in zip(align, galign))
                else:
                    problems.append(f"{name} id {ref['id']} {mode}: GPU ids differ from the CPU's")
        if seq != ref[mode]["ids"]:
            problems.append(f"{name} id {ref['id']} {mode}: ids differ from the committed references")
        rec[mode] = {"ids": seq, "alignments": align, "gaps": [round(g, 9) for g in gaps]}
        stats["min_gap"] = min([stats["min_gap"]] + gaps)


def write(out, records, models_meta, problems, stats, device):
    """references.jsonl and meta.json of what is done so far (after each model)."""
    import torch
    import transformers

    with open(os.path.join(out, "references.jsonl"), "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    meta = {
        "description": "return_alignments: per generated token (EOS included, no decoder start token), "
                       "the argmax source position of the cross-attention of the penultimate decoder "
                       "layer (layer 0 of a one-layer decoder) averaged over heads, in the row that "
                       "produced the token; gaps: best minus second-best averaged probability",
        "versions": {"transformers": transformers.__version__, "torch": torch.__version__,
                     "python": sys.version.split()[0]},
        "precision": "float32 on the CPU, eager attention, batch 1",
        "models": models_meta,
        "gpu_comparison": ({"device": torch.cuda.get_device_name(0), "tokens": stats["gpu_tokens"],
                            "argmax_differences": stats["gpu_differences"]} if device == "cuda" else None),
        "problems": problems,
    }
    with open(os.path.join(out, "meta.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1, sort_keys=True)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--repo", default=REPO, help="the repository whose models to read")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="cuda: also compare the argmax indices computed on the GPU")
    args = ap.parse_args()
    repo = args.repo
    import torch
    import transformers
    from transformers import AutoModelForSeq2SeqLM

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_num_threads(8)  # the argmax is compared with a tie margin (gaps)
    os.makedirs(args.out, exist_ok=True)
    records, models_meta, problems = [], {}, []
    stats = {"gpu_tokens": 0, "gpu_differences": 0}
    for name, folder, refs_path, count in MODELS:
        path = os.path.join(repo, folder)
        model = AutoModelForSeq2SeqLM.from_pretrained(path, dtype=torch.float32,
                                                      attn_implementation="eager").float().eval()
        meta = json.load(open(os.path.join(os.path.dirname(os.path.join(repo, refs_path)), "meta.json")))
        common = dict(meta["generate"]["common"])
        gpu_model = None
        if args.device == "cuda":
            gpu_model = AutoModelForSeq2SeqLM.from_pretrained(path, dtype=torch.float32,
                                                              attn_implementation="eager").float().eval().to("cuda")
        with open(os.path.join(repo, refs_path), encoding="utf-8") as f:
            refs = [json.loads(line) for line in f][:count]
        stats["min_gap"] = 1.0
        for ref in refs:
            rec = {"model": name, "id": ref["id"], "source": ref["source"], "source_ids": ref["source_ids"]}
            extra = {}
            if "target_language" in ref:
                rec["target_language"] = ref["target_language"]
                extra["forced_bos_token_id"] = ref["greedy"]["ids"][0]
            try:
                add_modes(rec, ref, meta, common, extra, model, gpu_model, name, problems, stats)
            except Exception as e:  # noqa: BLE001 -- one run on the GPU machine: report, go on
                problems.append(f"{name} id {ref['id']}: {type(e).__name__}: {e}")
                continue
            records.append(rec)
        models_meta[name] = {"folder": folder, "references": refs_path, "sentences": len(refs),
                             "decoder_layers": model.config.decoder_layers,
                             "alignment_layer": alignment_layer(model.config.decoder_layers),
                             "heads": model.config.decoder_attention_heads, "min_gap": stats["min_gap"]}
        write(args.out, records, models_meta, problems, stats, args.device)
    print(json.dumps({"models": models_meta, "problems": problems, "stats": stats}, indent=1))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
