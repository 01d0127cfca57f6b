#!/usr/bin/env python3
"""Score throughput (issue 54): target tokens a second, scoring given translations at batch 64,
nmt-server's Score RPC beside CTranslate2's Translator.score_batch, in one device run.

  score_bench.py served --target HOST:PORT --source EN --reference DE [--batch 64]
                 [--in-flight 1] [--seconds 10] [--model NAME]
      ScoreRequests of --batch pairs (the source and reference lines in turn), --in-flight of
      them outstanding (1: the server's decode loops hold exactly --batch pairs), for --seconds
      after a 2 s warm-up; target tokens from ScoreResponse.output_tokens (</s> included).
  score_bench.py ct2 --model HF_MARIAN_DIR --source EN --reference DE [--batch 64] [--repeat 3]
                 [--device cuda|cpu] [--converted CT2_DIR]
      The model converted (float16), the pairs as SentencePiece pieces (source + "</s>"),
      score_batch over chunks of --batch in order (max_batch_size --batch), best of --repeat
      passes after a warm-up; target tokens = the log-probs returned (</s> included).
A RESULT line (JSON) per figure on stdout. Requests are encoded by hand (no generated stubs),
as soak_mixed.py does: only grpcio is needed.
"""
import argparse
import gzip
import json
import os
import tempfile
import threading
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from protowire import field, read_varint  # noqa: E402  (bench/protowire.py)


def lines(path):
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        return [l.rstrip("\n") for l in f if l.strip()]


def report(d):
    print("RESULT " + json.dumps(d), flush=True)




def score_request(model, sources, targets):
    msg = field(1, model.encode())
    for s in sources:
        msg += field(2, s.encode())
    for t in targets:
        msg += field(3, t.encode())
    return msg


def output_tokens(msg):
    """ScoreResponse.output_tokens (field 5, varint) from the encoded message."""
    i, tokens = 0, None
    while i < len(msg):
        tag, i = read_varint(msg, i)
        num, wire = tag >> 3, tag & 7
        if wire == 0:
            v, i = read_varint(msg, i)
            if num == 5:
                tokens = v
        elif wire == 2:
            length, i = read_varint(msg, i)
            i += length
        elif wire == 5:
            i += 4
        elif wire == 1:
            i += 8
        else:
            raise ValueError(f"wire type {wire} in a ScoreResponse")
    if tokens is None:
        raise ValueError("ScoreResponse without output_tokens")
    return tokens


def served(a, src, ref):
    import grpc
    channel = grpc.insecure_channel(a.target)
    call = channel.unary_unary("/nmt.v1.TranslationService/Score")
    n = len(src)
    requests = [score_request(a.model, [src[(i + j) % n] for j in range(a.batch)],
                              [ref[(i + j) % n] for j in range(a.batch)]) for i in range(0, n, a.batch)]
    lock = threading.Lock()
    totals = {"tokens": 0, "pairs": 0, "requests": 0, "errors": 0}
    state = {"measuring": False, "stop": False}

    def worker(k):
        r = k
        while not state["stop"]:
            try:
                tokens = output_tokens(call(requests[r % len(requests)], timeout=60))
                ok = True
            except grpc.RpcError as e:
                ok = False
                print(f"Score failed: {e.code()} {e.details()}", flush=True)
            r += a.in_flight
            if state["measuring"]:
                with lock:
                    if ok:
                        totals["tokens"] += tokens
                        totals["pairs"] += a.batch
                        totals["requests"] += 1
                    else:
                        totals["errors"] += 1

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(a.in_flight)]
    for t in threads:
        t.start()
    time.sleep(2)
    state["measuring"] = True
    t0 = time.perf_counter()
    time.sleep(a.seconds)
    state["measuring"] = False
    secs = time.perf_counter() - t0
    state["stop"] = True
    for t in threads:
        t.join()
    report(dict(engine="nmt-server", name="score", batch=a.batch, in_flight=a.in_flight, seconds=round(secs, 2),
                requests=totals["requests"], errors=totals["errors"], pairs_per_s=totals["pairs"] / secs,
                target_tokens_per_s=totals["tokens"] / secs))


def ct2(a, src, ref):
    try:
        import torch  # noqa: F401  first, so that both use one cuBLAS (../shared/peers README)
    except ImportError:  # the CPU try-out
        pass
    import ctranslate2
    if not a.converted:
        import ctranslate2.converters.transformers as ct2t
    import sentencepiece as spm
    out = a.converted
    if not out:
        out = os.path.join(tempfile.mkdtemp(), "ct2")
        ct2t.TransformersConverter(a.model).convert(out, quantization="float16", force=True)
    sp_src = spm.SentencePieceProcessor(model_file=os.path.join(a.model, "source.spm"))
    sp_tgt = spm.SentencePieceProcessor(model_file=os.path.join(a.model, "target.spm"))
    s_tok = [sp_src.encode(s, out_type=str) + ["</s>"] for s in src]
    t_tok = [sp_tgt.encode(t, out_type=str) for t in ref]
    tr = ctranslate2.Translator(out, device=a.device, compute_type="float16" if a.device == "cuda" else "float32")

    def one_pass():
        tokens = 0
        for i in range(0, len(s_tok), a.batch):
            res = tr.score_batch(s_tok[i:i + a.batch], t_tok[i:i + a.batch], max_batch_size=a.batch,
                                 batch_type="examples")
            tokens += sum(len(r.log_probs) for r in res)
        return tokens

    one_pass()
    best = None
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        tokens = one_pass()
        secs = time.perf_counter() - t0
        if best is None or secs < best[0]:
            best = (secs, tokens)
    secs, tokens = best
    report(dict(engine=f"ctranslate2-{ctranslate2.__version__}", name="score_batch", batch=a.batch,
                pairs=len(s_tok), seconds=round(secs, 4), pairs_per_s=len(s_tok) / secs,
                target_tokens_per_s=tokens / secs, target_tokens=tokens))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["served", "ct2"])
    p.add_argument("--source", required=True)
    p.add_argument("--reference", required=True)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--target", default="127.0.0.1:50051")
    p.add_argument("--model", default="")
    p.add_argument("--in-flight", type=int, default=1)
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--device", default="cuda", help="ct2: cuda, or cpu to try the script")
    p.add_argument("--converted", help="ct2: an already converted model of --model (its .spm files from --model)")
    a = p.parse_args()
    src, ref = lines(a.source), lines(a.reference)
    if len(src) != len(ref):
        raise SystemExit(f"--source has {len(src)} lines, --reference {len(ref)}: pairs need as many")
    if a.batch < 1 or a.in_flight < 1:
        raise SystemExit("--batch and --in-flight must be at least 1")
    (served if a.mode == "served" else ct2)(a, src, ref)


if __name__ == "__main__":
    main()
