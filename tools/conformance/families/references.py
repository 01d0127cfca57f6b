"""The families' references: which (sentence, source language, target language) items a variant
has, one chunk of them in a worker process, and how varied the hypotheses are."""
from .models import load_family_model
from .tokenizers import language_ids, load_tokenizer, set_source_language
from .variants import MAX_LENGTH, VARIANTS, family_generate_kwargs
from ..search import search_modes
from ..text import to_target


def translate_family_chunk(task):
    """greedy, beam 4, 4-best (search.search_modes) for each (id, source language,
    target language, source) of one chunk, one at a time. Returns the records and margins."""
    variant, folder, items, eps = task
    import torch

    tok = load_tokenizer(variant, folder)
    model = load_family_model(variant, folder)
    codes = language_ids(variant, tok)
    kw = family_generate_kwargs(MAX_LENGTH)
    records, greedy_gaps, nbest_gaps, problems, unstable = [], [], [], [], []
    beam_mismatch = 0
    with torch.no_grad():
        for sid, src, tgt, source in items:
            set_source_language(tok, src)
            enc = tok(source, return_tensors="pt")
            rec = {"id": sid, "source_language": src, "target_language": tgt,
                   "source": source, "source_ids": enc["input_ids"][0].tolist()}
            found, g, n, moved = search_modes(model, tok, enc, kw, 1, [], eps,
                                                 {"forced_bos_token_id": codes[tgt]})
            rec.update(found)
            greedy_gaps.append(g)
            nbest_gaps.append(n)
            unstable.append(moved)
            beam_mismatch += rec["nbest4"][0]["ids"] != rec["beam4"]["ids"]
            for h in rec["nbest4"] + [rec["greedy"], rec["beam4"]]:
                if h["ids"][-1:] != [2] or h["ids"][:1] != [codes[tgt]]:
                    problems.append(f"{folder} id {sid} {tgt}: a hypothesis does not start "
                                    f"with the language token and end with </s>")
            records.append(rec)
    return records, dict(greedy_gaps=greedy_gaps, nbest_gaps=nbest_gaps, unstable=unstable,
                         beam_mismatch=beam_mismatch, problems=problems)


def reference_items(variant, plain_items):
    """(id, source language, target language, source text): each sentence once, the target
    cycling over the variant's three; the first six sentences also into the other two targets
    (one source, three languages); every seventh also in the made-up language
    (text.to_target) from other_source."""
    v = VARIANTS[variant]
    items = []
    for k, (sid, s) in enumerate(plain_items):
        targets = v["targets"] if k < 6 else (v["targets"][k % 3],)
        items += [(sid, v["source"], t, s) for t in targets]
        if k % 7 == 3:
            items.append((sid, v["other_source"], v["targets"][(k + 1) % 3], to_target(s)))
    return items


def distinct_summary(records):
    """How varied the 4-best hypotheses are: a random model that repeats one token tests
    little."""
    hyps = [h["ids"][1:-1] for r in records for h in r["nbest4"]]
    one_token = sum(1 for h in hyps if len(set(h)) <= 1)
    distinct = [len(set(h)) / len(h) for h in hyps if h]
    return {"hypotheses_of_one_repeated_token_or_empty": one_token,
            "mean_distinct_token_ratio": sum(distinct) / max(1, len(distinct)),
            "distinct_texts_beam4": len({r["beam4"]["text"] for r in records})}
