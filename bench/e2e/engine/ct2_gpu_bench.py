"""CTranslate2 on the GPU, measured the way nmt-bench-e2e measures the CUDA engine, for a
same-run comparison (float16, beam 4, RESULT lines in nmt-bench-e2e's format).

  python3 bench/e2e/engine/ct2_gpu_bench.py demo --model DIR --source FILE --batches 1,64,128
      Sentences of FILE as SentencePiece pieces + "</s>" (tokenized outside the timing),
      sorted by length (longest first); batch 1 reports p50/p90 per sentence over the first
      --latency-sentences, larger batches target tokens/s (best of --repeat passes after one
      warm-up pass).
  python3 bench/e2e/engine/ct2_gpu_bench.py random --model DIR --batches 1,64 [--sentences 256]
      The random-weight Marian model of hf_baseline.py write-random (no tokenizer: its ids
      become tokens "t<id>"): --src-len random source ids (the last one EOS) and exactly
      --tgt-len decode steps per sentence, as nmt-bench-e2e --ids-model.

Target tokens count the best hypothesis with its EOS (return_end_token), as nmt-bench-e2e
does. Needs the ctranslate2 module of ../shared/peers (see its README) and transformers.
"""
import argparse
import json
import os
import random
import statistics
import tempfile
import time

import ctranslate2
import ctranslate2.converters.transformers as ct2t


def report(d):
    print("RESULT " + json.dumps(d), flush=True)


class IdTokenizer:
    """The vocabulary of a model without a tokenizer: id i is the token "t<i>"."""

    def __init__(self, config):
        self.eos_token, self.unk_token, self.pad_token = "</s>", "<unk>", "<pad>"
        self.vocab = {f"t{i}": i for i in range(config.vocab_size)}
        for tok, i in ((self.eos_token, config.eos_token_id), (self.pad_token, config.pad_token_id)):
            del self.vocab[f"t{i}"]
            self.vocab[tok] = i
        unk = next(i for i in range(config.vocab_size) if i not in (config.eos_token_id, config.pad_token_id))
        del self.vocab[f"t{unk}"]
        self.vocab[self.unk_token] = unk

    def get_vocab(self):
        return self.vocab


def convert(model_dir, out, tokenizer=None):
    conv = ct2t.TransformersConverter(model_dir)
    if tokenizer is not None:
        conv.load_tokenizer = lambda *a, **k: tokenizer
    conv.convert(out, quantization="float16", force=True)


def best_pass(fn, repeat):
    fn()  # warm-up
    best = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        tokens = fn()
        secs = time.perf_counter() - t0
        if best is None or secs < best[0]:
            best = (secs, tokens)
    return best


def gpu_used_mib():
    try:
        import torch
        free, total = torch.cuda.mem_get_info()
        return (total - free) >> 20
    except Exception:  # torch without a GPU: not recorded
        return None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["demo", "random"])
    p.add_argument("--model", required=True)
    p.add_argument("--source")
    p.add_argument("--batches", default="1,64")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--latency-sentences", type=int, default=200)
    p.add_argument("--sentences", type=int, default=256)
    p.add_argument("--src-len", type=int, default=27)
    p.add_argument("--tgt-len", type=int, default=32)
    a = p.parse_args()
    import torch  # first, so that both use one cuBLAS (peers README)
    from transformers import MarianConfig

    work = tempfile.mkdtemp()
    ct2_dir = os.path.join(work, "ct2")
    opts = dict(beam_size=a.beam, batch_type="examples", return_end_token=True)
    if a.mode == "demo":
        import sentencepiece as spm
        convert(a.model, ct2_dir)
        sp = spm.SentencePieceProcessor(model_file=os.path.join(a.model, "source.spm"))
        lines = [l.rstrip("\n") for l in open(a.source, encoding="utf-8")]
        src = [sp.encode(l, out_type=str) + ["</s>"] for l in lines]
    else:
        cfg = MarianConfig.from_pretrained(a.model)
        tok = IdTokenizer(cfg)
        convert(a.model, ct2_dir, tok)
        names = {i: t for t, i in tok.vocab.items()}
        rng = random.Random(1234)
        ids = [i for i in range(1, cfg.vocab_size) if i not in (cfg.pad_token_id, cfg.eos_token_id)]
        src = [[names[rng.choice(ids)] for _ in range(a.src_len - 1)] + ["</s>"]
               for _ in range(a.sentences)]
        opts.update(min_decoding_length=a.tgt_len - 1, max_decoding_length=a.tgt_len)
    src.sort(key=len, reverse=True)
    tr = ctranslate2.Translator(ct2_dir, device="cuda", compute_type="float16")
    base = {"model": a.model, "engine": "ctranslate2", "version": ctranslate2.__version__,
            "device": torch.cuda.get_device_name(0), "precision": "float16", "beam": a.beam}
    for batch in [int(b) for b in a.batches.split(",")]:
        d = dict(base, batch=batch)
        if batch == 1:
            sents = src[:a.latency_sentences] if a.mode == "demo" else src[:20]
            tr.translate_batch(sents[:5], max_batch_size=1, **opts)  # warm-up
            times, tokens = [], 0
            for s in sents:
                t0 = time.perf_counter()
                r = tr.translate_batch([s], max_batch_size=1, **opts)
                times.append((time.perf_counter() - t0) * 1e3)
                tokens += len(r[0].hypotheses[0])
            times.sort()
            d.update(sentences=len(sents), p50_ms=statistics.median(times),
                     p90_ms=times[int(0.9 * len(times))], tokens_per_s=tokens / (sum(times) / 1e3))
        else:
            def run():
                res = tr.translate_batch(src, max_batch_size=batch, **opts)
                return sum(len(r.hypotheses[0]) for r in res)
            secs, tokens = best_pass(run, a.repeat)
            d.update(sentences=len(src), seconds=secs, target_tokens=tokens,
                     tokens_per_s=tokens / secs, sentences_per_s=len(src) / secs)
            if a.mode == "random":
                d.update(src_len=a.src_len, tgt_len=a.tgt_len,
                         ms_per_batch=secs * 1e3 * batch / len(src))
        d["gpu_used_mib"] = gpu_used_mib()
        report(d)


if __name__ == "__main__":
    main()
