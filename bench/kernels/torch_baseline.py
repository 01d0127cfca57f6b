#!/usr/bin/env python3
"""PyTorch baselines for the kernel benchmarks, joined with nmt-bench-kernels' CSV.

    nmt-bench-kernels > ours.csv
    python3 bench/kernels/torch_baseline.py --ours ours.csv [--quick] > tables.md

Times are medians of 7 repetitions of back-to-back calls between CUDA events, as in the C++
program. Effective bandwidth counts the bytes read plus written (2 x rows x C x 2 bytes).
"""
import argparse
import csv
import statistics

import torch


def time_us(fn, iters):
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    reps = []
    for _ in range(7):
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        reps.append(1000.0 * start.elapsed_time(end) / iters)
    return statistics.median(reps)


def load_ours(path):
    rows = {}
    with open(path) as f:
        for r in csv.DictReader(f):
            rows[(r["bench"], int(r["param"]), r["variant"])] = (float(r["us"]), float(r["GBps"]))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", required=True)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    ours = load_ours(args.ours)
    dev = torch.device("cuda")
    rows, max_cols = 49152, (4096 if args.quick else 32768)
    copy_gbps = next(v[1] for k, v in ours.items() if k[0] == "copy")
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"device-to-device copy (cudaMemcpyAsync, read + write): {copy_gbps:.0f} GB/s\n")

    x_full = torch.randn(rows * max_cols, device=dev, dtype=torch.float16)
    failures = []
    for name, bench, fn_of in [
        ("LayerNorm", "layernorm_fp16",
         lambda x, w, b: (lambda: torch.nn.functional.layer_norm(x, (x.shape[1],), w, b, 1e-5))),
        ("Softmax", "softmax_fp16", lambda x, w, b: (lambda: torch.softmax(x, -1))),
    ]:
        print(f"### {name}, fp16, shape (49152, C)\n")
        print("| C | ours us | ours GB/s | torch us | torch GB/s | ours/torch | ours/copy |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        cols = 32
        while cols <= max_cols:
            x = x_full[: rows * cols].view(rows, cols)
            w = torch.randn(cols, device=dev, dtype=torch.float16)
            b = torch.randn(cols, device=dev, dtype=torch.float16)
            nbytes = 2.0 * rows * cols * 2
            t_us = time_us(fn_of(x, w, b), 50 if cols <= 1024 else 10)
            o_us, o_gbps = ours[(bench, cols, "ours")]
            t_gbps = nbytes / t_us / 1e3
            speed = t_us / o_us
            frac = o_gbps / copy_gbps
            mark = ""
            if speed < 1.0:
                mark += " (slower than torch)"
                failures.append(f"{name} C={cols}: {speed:.2f}x torch")
            if 512 <= cols <= 8192 and frac < 0.8:
                mark += " (< 80% of copy)"
                failures.append(f"{name} C={cols}: {100 * frac:.0f}% of copy")
            print(f"| {cols} | {o_us:.1f} | {o_gbps:.0f} | {t_us:.1f} | {t_gbps:.0f} | "
                  f"{speed:.2f}x | {100 * frac:.0f}%{mark} |")
            cols *= 2
        print()
    del x_full

    print("### Decoder-step attention, fp16, 16 sentences x 4 beams x 8 heads, head_dim 64\n")
    print("| L | fused us | cuBLAS QK^T + softmax + cuBLAS PV us | speedup | torch matmul+softmax+matmul us |")
    print("|---:|---:|---:|---:|---:|")
    for L in (8, 17, 32, 64):
        q = torch.randn(512, 1, 64, device=dev, dtype=torch.float16)
        k = torch.randn(512, L, 64, device=dev, dtype=torch.float16)
        v = torch.randn(512, L, 64, device=dev, dtype=torch.float16)
        t_us = time_us(lambda: torch.softmax(q @ k.transpose(1, 2) * 0.125, -1) @ v, 200)
        f_us = ours[("decoder_step_fp16", L, "fused")][0]
        c_us = ours[("decoder_step_fp16", L, "cublas+softmax+cublas")][0]
        if c_us / f_us < 3.0:
            failures.append(f"decoder step L={L}: {c_us / f_us:.2f}x")
        print(f"| {L} | {f_us:.2f} | {c_us:.2f} | {c_us / f_us:.2f}x | {t_us:.2f} |")
    print()

    print("### Q.K^T, 512 = 64 x 8 heads products of 17 x 17, inputs [batch, len, heads, dim]\n")
    print("| case | ours us | cuBLAS GEMM us | cuBLAS + 2 transposes us | speedup | torch bmm + transposes us |")
    print("|---|---:|---:|---:|---:|---:|")
    for bench, d, dtype in (("qk_17x17_fp16", 64, torch.float16), ("qk_17x17_fp32", 128, torch.float32)):
        q = torch.randn(64, 17, 8, d, device=dev, dtype=dtype)
        k = torch.randn(64, 17, 8, d, device=dev, dtype=dtype)

        def torch_qk():
            qt = q.transpose(1, 2).reshape(512, 17, d)
            kt = k.transpose(1, 2).reshape(512, 17, d)
            return torch.bmm(qt, kt.transpose(1, 2))

        t_us = time_us(torch_qk, 200)
        o = ours[(bench, d, "ours")][0]
        g = ours[(bench, d, "cublas-gemm-only")][0]
        c = ours[(bench, d, "cublas+transposes")][0]
        if c / o < 1.0:
            failures.append(f"{bench}: {c / o:.2f}x")
        print(f"| {bench} d={d} | {o:.2f} | {g:.2f} | {c:.2f} | {c / o:.2f}x | {t_us:.2f} |")
    print()
    topk = ours.get(("beam_topk_fp16", 58101, "ours"))
    if topk:
        print(f"beam top-k (16 x 4 beams x 58101 vocab, k = 8, log-softmax + masks + top-k, fp16): "
              f"{topk[0]:.2f} us\n")
    print("bars not met: " + ("; ".join(failures) if failures else "none"))


if __name__ == "__main__":
    main()
