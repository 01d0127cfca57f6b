"""transformers' generate() on one source (greedy, beam 4, 4-best and the perturbed beam runs),
the worker processes' setup, and which sentences are decidable enough to keep."""
import math
import os


# A sentence is left out of the references when transformers' own margins are below this:
# a greedy step whose best two log-probs differ by less, or two 4-best hypotheses whose
# scores do. Float rounding decides such cases (another float32 GEMM differs by ~1e-6
# relative, log-probs of 10-30 by up to ~3e-5), so no engine can be asked to match them.
MIN_MARGIN = 1e-4
# Beam search also decides, at every step, which candidates stay among the running beams; a
# near-tie there changes a late hypothesis without showing in the final margins above. So
# beam 4 and 4-best run twice more with uniform noise of this size added to every step's
# log-probs (seeded), and a sentence whose ids move under it is left out too. The size is
# several times what another float32 engine's summation order moves a step's log-probs
# (measured: ~1e-6 on the demo model; on the random-gain variants, whose hypotheses often
# run to the maximum length, the engine's length-normalised scores moved by up to 2.3e-4,
# ~9e-3 summed over 39 steps: 5e-4 per step still kept a 4-best list that another float32
# engine decided differently).
PERTURBATION = {"demo": 2e-5, "variants": 3e-3}
PERTURBATION_SEEDS = (1, 2)


def _strip(ids, pad):
    """Generated ids without the decoder start token and without batch padding after </s>."""
    ids = list(ids[1:])
    while ids and ids[-1] == pad:
        ids.pop()
    return ids


def _worker_init():
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["TRANSFORMERS_VERBOSITY"] = "error"
    import warnings

    import torch

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def noise_processor(eps, seed):
    """A LogitsProcessor adding seeded uniform noise in [-eps, eps] to the step's scores."""
    import torch
    from transformers import LogitsProcessor, LogitsProcessorList

    class Noise(LogitsProcessor):
        def __init__(self):
            self.generator = torch.Generator().manual_seed(seed)

        def __call__(self, input_ids, scores):
            noise = (torch.rand(scores.shape, generator=self.generator, dtype=torch.float64) * 2 - 1) * eps
            return scores + noise.to(scores.dtype)

    return LogitsProcessorList([Noise()])


def search_modes(model, tok, enc, kw, pad, banned, eps, extra=None):
    """Greedy, beam 4 and 4-best for one encoded source (batch 1: no padding), plus the
    perturbed beam runs. kw: generate_kwargs' modes and "common"; extra: this source's own
    generate() arguments (the families' forced_bos_token_id); banned: ids generate() never
    picks (bad_words_ids), left out of the greedy margin. Returns the greedy / beam4 / nbest4
    results, the smallest greedy top-1/top-2 gap, the smallest adjacent 4-best score gap and
    whether the perturbation moved a hypothesis."""
    import torch

    common = dict(kw["common"], **(extra or {}))
    found = {}
    out = model.generate(**enc, **kw["greedy"], **common, output_scores=True,
                         output_logits=True, return_dict_in_generate=True)
    ids = _strip(out.sequences[0].tolist(), pad)
    raw = out.logits if getattr(out, "logits", None) is not None else out.scores
    total, greedy_gap = 0.0, math.inf
    for t, tid in enumerate(ids):
        lp = torch.log_softmax(raw[t][0].float(), dim=-1)
        processed = out.scores[t][0]
        if torch.isfinite(processed).sum().item() == 1:
            continue  # a forced token (</s> at max_length, a language) scores 0, as in beam search
        total += lp[tid].item()
        for b in banned:
            lp[b] = -math.inf  # never a candidate (bad_words_ids)
        top = torch.topk(lp, 2).values
        greedy_gap = min(greedy_gap, (top[0] - top[1]).item())
    found["greedy"] = {"ids": ids, "text": tok.decode(ids, skip_special_tokens=True),
                       "score": total / len(ids)}
    out = model.generate(**enc, **kw["beam4"], **common, output_scores=True,
                         return_dict_in_generate=True)
    ids = _strip(out.sequences[0].tolist(), pad)
    found["beam4"] = {"ids": ids, "text": tok.decode(ids, skip_special_tokens=True),
                      "score": out.sequences_scores[0].item()}
    out = model.generate(**enc, **kw["nbest4"], **common, output_scores=True,
                         return_dict_in_generate=True)
    nbest = []
    for seq, score in zip(out.sequences.tolist(), out.sequences_scores.tolist()):
        ids = _strip(seq, pad)
        nbest.append({"ids": ids, "text": tok.decode(ids, skip_special_tokens=True),
                      "score": score})
    nbest_gap = min(a["score"] - b["score"] for a, b in zip(nbest, nbest[1:]))
    found["nbest4"] = nbest
    # Does a perturbation of the beam steps' scores move any hypothesis?
    moved = False
    for seed in PERTURBATION_SEEDS:
        for mode, want in (("beam4", [found["beam4"]]), ("nbest4", nbest)):
            out = model.generate(**enc, **kw[mode], **common,
                                 logits_processor=noise_processor(eps, seed))
            got = [_strip(seq, pad) for seq in out.tolist()]
            moved |= got != [h["ids"] for h in want]
    return found, greedy_gap, nbest_gap, moved


def keep_decidable(recs, stats_list, max_length):
    """Splits the records into those whose margins are >= MIN_MARGIN and the left-out ones;
    returns (kept records, summary of the margins and hypothesis lengths, left-out list)."""
    greedy = [x for s in stats_list for x in s["greedy_gaps"]]
    nbest = [x for s in stats_list for x in s["nbest_gaps"]]
    unstable = [x for s in stats_list for x in s["unstable"]]
    kept, left_out = [], []
    for r, g, n, u in zip(recs, greedy, nbest, unstable):
        if g >= MIN_MARGIN and n >= MIN_MARGIN and not u:
            kept.append((r, g, n))
        else:
            entry = {k: r[k] for k in ("id", "source_language", "target_language") if k in r}
            left_out.append(dict(entry, min_greedy_gap=g, min_nbest_gap=n,
                                 beam_steps_move_under_perturbation=u))
    hyps = [h for r, _, _ in kept for h in r["nbest4"]]
    return [r for r, _, _ in kept], {
        "min_greedy_top1_top2_logprob_gap": min((g for _, g, _ in kept), default=None),
        "min_nbest_adjacent_score_gap": min((n for _, _, n in kept), default=None),
        "min_greedy_gap_before_leaving_out": min(greedy),
        "min_nbest_gap_before_leaving_out": min(nbest),
        "sentences_kept": len(kept),
        "sentences_left_out": len(left_out),
        "sentences_moved_by_perturbation": sum(unstable),
        "nbest_hypotheses": len(hyps),
        "nbest_hypotheses_ending_before_max_length":
            sum(len(h["ids"]) < max_length - 1 for h in hyps),
        "beam4_differs_from_nbest4_first": sum(s["beam_mismatch"] for s in stats_list),
    }, left_out


def chunks(items, n):
    size = max(1, math.ceil(len(items) / n))
    return [items[i:i + size] for i in range(0, len(items), size)]
