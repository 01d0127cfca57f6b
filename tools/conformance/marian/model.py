"""The Marian variants' models: seeded random init, save_pretrained, and the reload checks."""
import math
import os

from .variants import ATTENTION_GAIN, BASE, EMBEDDING_STD, FFN_GAIN, OUTPUT_GAIN


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
