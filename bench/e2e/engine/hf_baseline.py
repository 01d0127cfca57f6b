#!/usr/bin/env python3
"""transformers' generate() baseline for run_e2e.sh, measured in the same run as nmt-bench-e2e.

  hf_baseline.py demo --model DIR --source FILE [--batches 64,128] [--precisions float32,float16]
      every line of FILE, tokenized outside the timing, sorted by length (longest first, as
      nmt-bench-e2e), beam 4, max_length 256; target tokens = generated ids up to and
      including the first EOS (the decoder start token not counted), as nmt-serve counts them.
  hf_baseline.py write-random --shape base|big --out DIR
      writes a random-weight Marian model of an OPUS-MT shape (swish, vocab 58101, 6+6 layers;
      base: d 512, 8 heads, ffn 2048; big, as opus-mt-tc-big: d 1024, 16 heads, ffn 4096) as
      config.json + model.safetensors for both benchmarks.
  hf_baseline.py random --model DIR [--batches 1,64] [--src-len 27] [--tgt-len 32]
      random source ids, exactly tgt-len new tokens (min_new_tokens = max_new_tokens), beam 4.
Prints one 'RESULT {json}' line per measurement.
"""
import argparse, json, statistics, sys, time
import torch
from transformers import MarianConfig, MarianMTModel

DT = {"float32": torch.float32, "float16": torch.float16}
SHAPES = {  # d_model, attention heads, ffn dim
    "base": (512, 8, 2048),
    "big": (1024, 16, 4096),
}


def report(d):
    print("RESULT " + json.dumps(d), flush=True)


def timed(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def count_tokens(seqs, eos):
    n = 0
    for s in seqs.tolist():
        s = s[1:]  # decoder start
        n += (s.index(eos) + 1) if eos in s else len(s)
    return n


def demo(a):
    from transformers import AutoTokenizer
    torch.backends.cuda.matmul.allow_tf32 = False
    tok = AutoTokenizer.from_pretrained(a.model)
    lines = [l.rstrip("\n") for l in open(a.source, encoding="utf-8")]
    ids = [tok(l)["input_ids"] for l in lines]
    order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
    ids = [ids[i] for i in order]
    for prec in a.precisions.split(","):
        model = MarianMTModel.from_pretrained(a.model, dtype=DT[prec]).cuda().eval()
        pad, eos = model.config.pad_token_id, model.config.eos_token_id
        for batch in [int(b) for b in a.batches.split(",")]:
            batches = []
            for i in range(0, len(ids), batch):
                chunk = ids[i:i + batch]
                L = max(len(x) for x in chunk)
                inp = torch.full((len(chunk), L), pad, dtype=torch.long)
                mask = torch.zeros((len(chunk), L), dtype=torch.long)
                for r, x in enumerate(chunk):
                    inp[r, :len(x)] = torch.tensor(x)
                    mask[r, :len(x)] = 1
                batches.append((inp.cuda(), mask.cuda()))

            def run():
                n = 0
                with torch.inference_mode():
                    for inp, mask in batches:
                        out = model.generate(input_ids=inp, attention_mask=mask, num_beams=4, max_length=256)
                        n += count_tokens(out, eos)
                return n

            run()  # warm-up
            best, tokens = None, 0
            for _ in range(a.repeat):
                secs, tokens = timed(run)
                best = secs if best is None else min(best, secs)
            report({"engine": "transformers", "model": a.model, "precision": prec, "beam": 4, "batch": batch,
                    "sentences": len(ids), "seconds": best, "target_tokens": tokens,
                    "tokens_per_s": tokens / best, "gpu_max_allocated_mib": torch.cuda.max_memory_allocated() >> 20})
        if a.latency > 0:
            ms = []
            with torch.inference_mode():
                for x in ids[:10]:
                    model.generate(input_ids=torch.tensor([x]).cuda(), num_beams=4, max_length=256)
                for x in ids[:a.latency]:
                    secs, _ = timed(lambda: model.generate(input_ids=torch.tensor([x]).cuda(), num_beams=4, max_length=256))
                    ms.append(secs * 1e3)
            report({"engine": "transformers", "model": a.model, "precision": prec, "beam": 4, "batch": 1,
                    "sentences": len(ms), "p50_ms": statistics.median(ms)})
        del model
        torch.cuda.empty_cache()


def write_random(a):
    torch.manual_seed(0)
    d, heads, ffn = SHAPES[a.shape]
    cfg = MarianConfig(vocab_size=58101, decoder_vocab_size=58101, d_model=d, encoder_layers=6, decoder_layers=6,
                       encoder_attention_heads=heads, decoder_attention_heads=heads, encoder_ffn_dim=ffn,
                       decoder_ffn_dim=ffn, activation_function="swish", max_position_embeddings=512,
                       pad_token_id=58100, eos_token_id=0, decoder_start_token_id=58100, forced_eos_token_id=0,
                       scale_embedding=True, share_encoder_decoder_embeddings=True, tie_word_embeddings=True)
    model = MarianMTModel(cfg).eval()
    model.save_pretrained(a.out, safe_serialization=True)
    print("wrote", a.out)


def random_model(a):
    model = MarianMTModel.from_pretrained(a.model, dtype=torch.float16).cuda().eval()
    cfg = model.config
    shape = next(k for k, (d, _, _) in SHAPES.items() if d == cfg.d_model)
    g = torch.Generator().manual_seed(1234)
    for batch in [int(b) for b in a.batches.split(",")]:
        n = batch if batch > 1 else 1
        src = torch.randint(1, cfg.vocab_size - 1, (n, a.src_len), generator=g)
        src[:, -1] = cfg.eos_token_id
        src = src.cuda()
        gen = lambda: model.generate(input_ids=src, num_beams=4, min_new_tokens=a.tgt_len,
                                     max_new_tokens=a.tgt_len)
        with torch.inference_mode():
            gen()
            times = []
            for _ in range(a.repeat):
                secs, out = timed(gen)
                times.append(secs)
        best = min(times)
        tokens = n * a.tgt_len
        report({"engine": "transformers", "model": f"transformer-{shape}-random", "precision": "float16", "beam": 4,
                "batch": batch, "src_len": a.src_len, "tgt_len": a.tgt_len, "seconds": best,
                "tokens_per_s": tokens / best, "ms_per_batch": best * 1e3,
                "generated_len": out.shape[1] - 1, "gpu_max_allocated_mib": torch.cuda.max_memory_allocated() >> 20})


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["demo", "write-random", "random"])
    p.add_argument("--shape", choices=sorted(SHAPES), default="base", help="for write-random")
    p.add_argument("--model")
    p.add_argument("--source")
    p.add_argument("--out")
    p.add_argument("--batches", default="64,128")
    p.add_argument("--precisions", default="float32,float16")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--latency", type=int, default=0)
    p.add_argument("--src-len", type=int, default=27)
    p.add_argument("--tgt-len", type=int, default=32)
    a = p.parse_args()
    {"demo": demo, "write-random": write_random, "random": random_model}[a.mode](a)


if __name__ == "__main__":
    main()
