"""The NLLB-200 / M2M-100 / mBART-50 variants (families/<variant>/) and their refused cases
(refused/<family>_<case>/): configs, language codes, tokenizer classes, the init candidates
the calibration tries, and generate()'s arguments."""


SEED = 51  # the issue number; every family generator derives its seed from it
SPM_SIZE = 600
TINY_SPM_SIZE = 200
BOS, PAD, EOS, UNK, MASK = "<s>", "<pad>", "</s>", "<unk>", "<mask>"
MAX_LENGTH = 40  # decoder start + at most 39 tokens (the language token, ..., </s>)
PERTURBATION = 3e-3  # as the Marian variants' (search.PERTURBATION)
# Init candidates (see calibrate), tried in this order: gains of the layers' output
# projections (fc2, attention out_proj) and the token embeddings' std. With pre-norm layers
# the residual stream carries the input token's embedding to the final norm, and with lm_head
# tied to the embeddings the model then keeps predicting the token it was fed ("under under
# under ..." with the Marian variants' gains and embeddings). Larger FFN branches make the
# next token a function of the current token and position (the FFN's input), smaller
# embeddings give the position more weight in it (the model then varies from step to step),
# and the cross-attention makes it depend on the source; attention branches much larger than
# the FFN's would make every step alike (the source is the same each step). The final norm's
# gain grows as the embeddings shrink (OUTPUT_GAIN * EMBEDDING_STD / std), keeping the logits
# as peaked.
RESIDUAL_GAINS = ((1.0, 1.0), (2.0, 1.0), (3.0, 1.0), (4.0, 1.0), (3.0, 2.0), (5.0, 1.5))
EMBEDDING_STDS = (0.1, 0.05, 0.025)
INIT_CANDIDATES = tuple((fc2, out_proj, std) for std in EMBEDDING_STDS
                        for fc2, out_proj in RESIDUAL_GAINS)
# </s> logit boosts tried with the chosen gains.
EOS_BOOSTS = (4.0, 8.0, 12.0, 16.0, 20.0, 24.0, 28.0)
END_TARGET = 0.6
CALIBRATION_RECORDS = 12
POSITION_STD = 0.5  # mBART's learned positions, at the scale of M2M-100's sinusoids

NLLB_CODES = ("eng_Latn", "deu_Latn", "fra_Latn", "spa_Latn", "ita_Latn", "por_Latn",
              "rus_Cyrl", "ell_Grek", "zho_Hans", "zho_Hant")
# Another subset in another order: the ids must come from the tokenizer files, not a table.
NLLB_LEGACY_CODES = ("deu_Latn", "eng_Latn", "fra_Latn", "ukr_Cyrl", "jpn_Jpan", "spa_Latn")

COMMON = dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
              decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
              scale_embedding=True, pad_token_id=1, bos_token_id=0, eos_token_id=2,
              decoder_start_token_id=2, dropout=0.1, attention_dropout=0.1,
              activation_dropout=0.0, encoder_layerdrop=0.0, decoder_layerdrop=0.0,
              init_std=0.02)
# mBART-50's config.json carries fairseq's architecture flags (transformers ignores them; the
# values here are those of facebook/mbart-large-50-many-to-many-mmt).
MBART_FLAGS = dict(add_final_layer_norm=True, normalize_before=True, normalize_embedding=True,
                   static_position_embeddings=False, add_bias_logits=False)

# name -> family, description, config changes, tokenizer options, source language, targets
VARIANTS = {
    "nllb": dict(
        family="nllb", desc="NLLB-200 layout: M2M100ForConditionalGeneration, relu, "
        "NllbTokenizer legacy_behaviour false ([src_lang] X </s>), 10 FLORES-200 codes",
        config=dict(activation_function="relu", max_position_embeddings=1024),
        codes=NLLB_CODES, legacy=False, source="eng_Latn",
        targets=("deu_Latn", "fra_Latn", "zho_Hans"), other_source="fra_Latn"),
    "nllb_legacy": dict(
        family="nllb", desc="NLLB-200 with legacy_behaviour true (X </s> [src_lang]), "
        "d_model 64 (head_dim 16), 2+1 layers, 6 codes in an order of their own",
        config=dict(activation_function="relu", max_position_embeddings=1024, d_model=64,
                    decoder_layers=1),
        codes=NLLB_LEGACY_CODES, legacy=True, source="eng_Latn",
        targets=("fra_Latn", "ukr_Cyrl", "spa_Latn"), other_source="deu_Latn"),
    "m2m100": dict(
        family="m2m100", desc="M2M-100 layout: M2M100ForConditionalGeneration, relu, "
        "M2M100Tokenizer (vocab.json in an order of its own, lacking 4 SentencePiece pieces; "
        "__xx__ codes; [__src__] X </s>)",
        config=dict(activation_function="relu", max_position_embeddings=1024),
        source="en", targets=("de", "fr", "ja"), other_source="fr"),
    "mbart50": dict(
        family="mbart50", desc="mBART-50 many-to-many layout: MBartForConditionalGeneration, "
        "gelu, learned positions, layernorm_embedding, MBart50Tokenizer (xx_XX codes; "
        "[src_lang] X </s>)",
        config=dict(activation_function="gelu", max_position_embeddings=256, **MBART_FLAGS),
        source="en_XX", targets=("de_DE", "fr_XX", "zh_CN"), other_source="fr_XX"),
}
# Tokenizer class, model and config classes, how a language code is spelled as a token, the
# pattern of the codes among the tokenizer's tokens, the SentencePiece model type.
FAMILIES = {
    "nllb": dict(tokenizer="NllbTokenizer", model="M2M100ForConditionalGeneration",
                 config="M2M100Config", token="{}", pattern=r"^[a-z]{3}_[A-Z][a-z]{3}$",
                 spm="bpe"),
    "m2m100": dict(tokenizer="M2M100Tokenizer", model="M2M100ForConditionalGeneration",
                   config="M2M100Config", token="__{}__", pattern=r"^__[a-z]{2,3}__$",
                   spm="bpe"),
    # mBART-50's "sentencepiece.bpe.model" is a unigram model (XLM-R's), and transformers
    # 5.17's MBart50Tokenizer rebuilds it as a Unigram tokenizer: a BPE model would come out
    # segmented differently from SentencePiece's.
    "mbart50": dict(tokenizer="MBart50Tokenizer", model="MBartForConditionalGeneration",
                    config="MBartConfig", token="{}", pattern=r"^[a-z]{2}_[A-Z]{2}$",
                    spm="unigram"),
}
TINY = dict(d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
            decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32)
# Models the loader must refuse: name -> (variant it is built like, field, value, why). A value
# of None with a file name as the field: that file is missing.
REFUSED = {
    "nllb_no_sentencepiece_model": (
        "nllb", "sentencepiece.bpe.model", None,
        "the tokenizer's SentencePiece model is missing (the engine tokenizes with it; "
        "tokenizer.json alone is not enough for it)"),
    "m2m100_no_vocab_json": (
        "m2m100", "vocab.json", None,
        "M2M-100's piece -> id table is missing"),
    "m2m100_activation_tanh": (
        "m2m100", "activation_function", "tanh",
        "an activation transformers has (ACT2FN) but no engine implements"),
    "m2m100_scale_embedding_string": (
        "m2m100", "scale_embedding", "true",
        "scale_embedding must be a JSON boolean (transformers takes any non-empty string as "
        "true)"),
    "mbart50_add_final_layer_norm_false": (
        "mbart50", "add_final_layer_norm", False,
        "fairseq's flag says there is no final layer norm, but the weights have "
        "model.encoder.layer_norm / model.decoder.layer_norm and MBartForConditionalGeneration "
        "applies them regardless: the folder contradicts itself"),
    "mbart50_static_position_embeddings": (
        "mbart50", "static_position_embeddings", True,
        "sinusoidal positions in an mBART config: MBartForConditionalGeneration ignores the "
        "flag and uses the learned model.*.embed_positions"),
}


def family_generate_kwargs(max_length):
    """generate()'s arguments for every record; each record adds forced_bos_token_id = its
    target language's token. forced_eos_token_id is passed (mBART-50's hub config has it,
    NLLB's and M2M-100's do not) so that every hypothesis ends with </s>, as the Marian
    references do."""
    return {
        "greedy": dict(num_beams=1, do_sample=False, max_length=max_length),
        "beam4": dict(num_beams=4, num_return_sequences=1, do_sample=False,
                      max_length=max_length, length_penalty=1.0, early_stopping=False),
        "nbest4": dict(num_beams=4, num_return_sequences=4, do_sample=False,
                       max_length=max_length, length_penalty=1.0, early_stopping=False),
        "common": dict(decoder_start_token_id=2, eos_token_id=2, forced_eos_token_id=2,
                       pad_token_id=1),
        "per_record": {"forced_bos_token_id": "the id of target_language's token"},
    }
