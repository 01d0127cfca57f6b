"""The families' models: seeded random init by the Marian variants' rules, the calibration
that chooses the init and the </s> boost, save_pretrained and the reload checks."""
import math
import os

from .tokenizers import set_source_language
from .variants import (CALIBRATION_RECORDS, END_TARGET, EOS_BOOSTS, FAMILIES,
                              INIT_CANDIDATES, MAX_LENGTH, POSITION_STD, VARIANTS,
                              family_generate_kwargs)
from ..marian.variants import ATTENTION_GAIN, EMBEDDING_STD, FFN_GAIN, OUTPUT_GAIN
from ..search import _strip


def model_classes(variant):
    import transformers

    fam = FAMILIES[VARIANTS[variant]["family"]]
    return getattr(transformers, fam["config"]), getattr(transformers, fam["model"])


def output_gain(init):
    return OUTPUT_GAIN * EMBEDDING_STD / init[2]


def init_family_weights(model, seed, init):
    """Random weights from a seeded generator, parameter by parameter in name order, by the
    Marian variants' rules (marian_model.init_weights: gain/sqrt(fan_in) linear layers,
    fc2 rows zero-mean, layer norms 1 +- 0.2), mBART's learned
    positions std POSITION_STD, and <pad>'s embedding row zero as in a fairseq-trained model
    (its padding_idx row gets no gradient); the output projections of attention and FFN
    init: (fc2 gain, out_proj gain, embedding std), see INIT_CANDIDATES; the final decoder
    norm scales by output_gain(init). Returns the final decoder norm's base parameters."""
    import torch

    gen = torch.Generator().manual_seed(seed)

    def randn(shape, std):
        return torch.randn(shape, generator=gen, dtype=torch.float32) * std

    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if name.endswith("embed_positions.weight"):
                p.copy_(randn(p.shape, POSITION_STD))  # mBART's learned positions
            elif name.endswith("embed_tokens.weight") or name.endswith("shared.weight") \
                    or name == "lm_head.weight":
                p.copy_(randn(p.shape, init[2]))
            elif "layer_norm" in name or "layernorm" in name:
                p.copy_((1.0 if name.endswith(".weight") else 0.0) + randn(p.shape, 0.2))
            elif name.endswith(".weight"):
                gain = FFN_GAIN if (".fc1." in name or ".fc2." in name) else ATTENTION_GAIN
                w = randn(p.shape, gain / math.sqrt(p.shape[1]))
                if ".fc2." in name:
                    w -= w.mean(dim=1, keepdim=True)
                if ".fc2." in name:
                    w *= init[0]
                elif ".out_proj." in name:
                    w *= init[1]
                p.copy_(w)
            elif name.endswith(".bias"):
                p.copy_(randn(p.shape, 0.1))
            else:
                raise RuntimeError(f"make_conformance: no init rule for parameter {name}")
        shared = model.model.shared.weight
        shared[model.config.pad_token_id].zero_()
        for emb in (model.model.encoder.embed_tokens, model.model.decoder.embed_tokens,
                    model.lm_head):
            if emb.weight.data_ptr() != shared.data_ptr():
                emb.weight.copy_(shared)
        norm = model.model.decoder.layer_norm
        norm.weight.mul_(output_gain(init))
        return norm.weight.clone(), norm.bias.clone()


def set_eos_boost(model, base_bias, boost):
    """The final decoder norm's bias adds boost to the </s> logit (the Marian variants' rule)."""
    import torch

    with torch.no_grad():
        w_eos = model.lm_head.weight[model.config.eos_token_id]
        model.model.decoder.layer_norm.bias.copy_(base_bias + boost * w_eos / w_eos.dot(w_eos))


def greedy_sample(model, tok, sample, codes):
    """Greedy ids of each (id, source language, target language, text) of sample."""
    import torch

    kw = family_generate_kwargs(MAX_LENGTH)
    found = []
    with torch.no_grad():
        for _, src, tgt, text in sample:
            set_source_language(tok, src)
            enc = tok(text, return_tensors="pt")
            out = model.generate(**enc, **kw["greedy"], **kw["common"],
                                 forced_bos_token_id=codes[tgt])
            found.append(_strip(out[0].tolist(), model.config.pad_token_id))
    return found


def calibrate(folder, variant, fields, seed, tok, records, codes):
    """Chooses the init and the </s> boost by greedy on CALIBRATION_RECORDS records spread
    over the list: first the init of INIT_CANDIDATES whose outputs are the most varied (mean
    share of distinct tokens between the language token and </s>, times the share of distinct
    outputs) with the smallest boost, where most outputs run long; then, with that init, the
    boost of EOS_BOOSTS whose fraction of outputs ending before max_length is closest to
    END_TARGET among those averaging >= 6 tokens (else the longest). Earlier in the lists on
    ties; deterministic (the CPU runs one thread). Returns (model with the chosen init, the
    init, the boost, the table of what each gave)."""
    sample = records[::max(1, len(records) // CALIBRATION_RECORDS)][:CALIBRATION_RECORDS]
    table = []

    def measure(model, init, boost):
        set_eos_boost(model, model._conformance_norm[2], boost)
        outs = greedy_sample(model, tok, sample, codes)
        bodies = [ids[1:-1] for ids in outs if len(ids) > 2]
        row = {"init": list(init), "eos_boost": boost,
               "ended_before_max_length": sum(len(i) < MAX_LENGTH - 1 for i in outs) / len(outs),
               "mean_length": sum(len(i) for i in outs) / len(outs),
               "distinct_token_share": sum(len(set(b)) / len(b) for b in bodies) / len(outs),
               "distinct_outputs": len({tuple(i) for i in outs}) / len(outs)}
        table.append(row)
        return row

    rows = [measure(build_family_model(folder, variant, fields, seed, init), init, EOS_BOOSTS[0])
            for init in INIT_CANDIDATES]
    init = INIT_CANDIDATES[rows.index(max(
        rows, key=lambda r: r["distinct_token_share"] * r["distinct_outputs"]))]
    model = build_family_model(folder, variant, fields, seed, init)
    rows = [measure(model, init, b) for b in EOS_BOOSTS]
    ok = [r for r in rows if r["mean_length"] >= 6]
    best = (min(ok, key=lambda r: abs(r["ended_before_max_length"] - END_TARGET)) if ok else
            max(rows, key=lambda r: r["mean_length"]))
    set_eos_boost(model, model._conformance_norm[2], best["eos_boost"])
    return model, init, best["eos_boost"], table


def build_family_model(folder, variant, fields, seed, init):
    """Builds and initialises the model (not yet saved); returns it."""
    import torch

    config_cls, model_cls = model_classes(variant)
    torch.manual_seed(seed)
    model = model_cls(config_cls(**fields)).eval()
    weight, bias = init_family_weights(model, seed, init)
    model._conformance_norm = (folder, weight, bias)
    return model


def save_family_model(model, folder):
    """save_pretrained (float32 safetensors) with the generation config the family's hub
    models have (+ forced_eos_token_id, see family_generate_kwargs); returns the tensors'
    names and shapes as saved."""
    from safetensors import safe_open

    gc = model.generation_config
    gc.forced_eos_token_id = model.config.eos_token_id
    gc.decoder_start_token_id = model.config.decoder_start_token_id
    del model._conformance_norm
    model.save_pretrained(folder)
    with safe_open(os.path.join(folder, "model.safetensors"), "pt") as f:
        return {k: list(f.get_slice(k).get_shape()) for k in sorted(f.keys())}


def load_family_model(variant, folder):
    import torch

    _, model_cls = model_classes(variant)
    return model_cls.from_pretrained(folder, dtype=torch.float32).float().eval()


def check_family_reload(variant, folder, fields, problems):
    """from_pretrained gives back every saved tensor and the config fields; lm_head is tied to
    the shared embedding."""
    import torch
    from safetensors.torch import load_file

    model = load_family_model(variant, folder)
    sd = model.state_dict()
    for k, v in load_file(os.path.join(folder, "model.safetensors")).items():
        if k not in sd or not torch.equal(sd[k], v):
            problems.append(f"{folder}: {k} differs after from_pretrained")
    for k, want in fields.items():
        got = getattr(model.config, k, None)
        if got != want:
            problems.append(f"{folder}: config {k} reloads as {got!r}, not {want!r}")
    if not torch.equal(model.lm_head.weight, model.model.shared.weight):
        problems.append(f"{folder}: lm_head differs from model.shared after reload")
    if not torch.equal(model.model.encoder.embed_tokens.weight, model.model.shared.weight):
        problems.append(f"{folder}: encoder embeddings differ from model.shared after reload")
