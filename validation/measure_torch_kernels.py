#!/usr/bin/env python3
"""Times the kernels a PyTorch training step runs on the GPU at hand, in the corpus's units.

The corpus (published.yaml) holds what others measured; this script is how ringmaster's own
measurements on a lent GPU were taken, so each entry citing it can be reproduced:
  attention  torch.nn.functional.scaled_dot_product_attention under each backend (flash: the
             FlashAttention-2 kernels PyTorch ships; cudnn), bf16, causal, batch 1, Llama-3-8B's
             heads (32 query heads, 8 KV heads, head dim 128) as ring-flash-attention benchmarks
             them; forward alone and forward + backward, in iterations/s and TFLOP/s with the
             FlashAttention papers' FLOPs (4 * s^2 * d * heads forward, halved when causal;
             backward 2.5 x forward)
  gemm       torch.mm in bf16 on Llama-3-8B's projection shapes at 8192 tokens, and 8192^3
Timing: CUDA events around `iters` calls after `warmup` calls; the median of `repeats` such
means. Usage: measure_torch_kernels.py [--quick]. Prints one aligned table, then the same
rows as JSON lines (prefix 'json: ').
"""
import json
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def timed(fn, warmup, iters, repeats):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    means = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        means.append(start.elapsed_time(end) / 1e3 / iters)
    return statistics.median(means)


def attention_rows(seqs, repeats):
    heads, kv_heads, d = 32, 8, 128
    rows = []
    for backend, name in ((SDPBackend.FLASH_ATTENTION, "flash"), (SDPBackend.CUDNN_ATTENTION, "cudnn")):
        for s in seqs:
            q = torch.randn(1, heads, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            k = torch.randn(1, kv_heads, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            v = torch.randn_like(k, requires_grad=True)
            dout = torch.randn_like(q)
            fwd_flops = 4 * s * s * d * heads / 2  # causal: half the score matrix
            for passes in ("forward", "forward_backward"):
                row = {"kernel": f"sdpa {name}", "shape": f"s {s}", "passes": passes}
                t = None
                # GQA read in place where the backend takes it, else K, V expanded to 32 heads
                for gqa in (True, False):
                    kk, vv = (k, v) if gqa else (
                        k.detach().repeat_interleave(heads // kv_heads, 1).requires_grad_(),
                        v.detach().repeat_interleave(heads // kv_heads, 1).requires_grad_())

                    def step():
                        out = F.scaled_dot_product_attention(q, kk, vv, is_causal=True, enable_gqa=gqa)
                        if passes == "forward_backward":  # no .grad accumulation timed
                            torch.autograd.grad(out, (q, kk, vv), dout)
                    try:
                        with sdpa_kernel([backend]):
                            t = timed(step, 3, max(2, min(50, int(2e13 / fwd_flops))), repeats)
                        break
                    except RuntimeError as e:  # a backend that refuses the shape: say so
                        row["error"] = str(e).strip().splitlines()[-1][:80]
                if t is None:
                    rows.append(row)
                    continue
                row.pop("error", None)
                if not gqa:
                    row["shape"] += " kv expanded"
                flops = fwd_flops * (1 if passes == "forward" else 3.5)
                row.update({"seconds": t, "iterations_per_s": 1 / t, "tflops": flops / t / 1e12})
                rows.append(row)
            del q, k, v, dout
    return rows


def gemm_rows(repeats):
    tokens = 8192
    shapes = [("qkv", tokens, 4096, 6144), ("attn out", tokens, 4096, 4096),
              ("gate+up", tokens, 4096, 28672), ("down", tokens, 14336, 4096),
              ("square", 8192, 8192, 8192)]
    rows = []
    for name, m, k, n in shapes:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        t = timed(lambda: torch.mm(a, b), 3, 20, repeats)
        rows.append({"kernel": f"gemm {name}", "shape": f"{m}x{k}x{n}", "passes": "forward",
                     "seconds": t, "iterations_per_s": 1 / t, "tflops": 2 * m * k * n / t / 1e12})
    return rows


def main():
    quick = "--quick" in sys.argv[1:]
    if not torch.cuda.is_available():
        print("skipped: no CUDA device")
        sys.exit(77)
    props = torch.cuda.get_device_properties(0)
    print(f"device: {props.name}, {props.multi_processor_count} SMs, "
          f"{props.total_memory / 2**30:.0f} GiB; torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"cuDNN {torch.backends.cudnn.version()}")
    repeats = 3 if quick else 5
    seqs = [8192, 32768] if quick else [8192, 16384, 32768, 65536]
    rows = gemm_rows(repeats) + attention_rows(seqs, repeats)
    print(f"{'kernel':<16} {'shape':<20} {'passes':<17} {'ms':>9} {'iter/s':>9} {'TFLOP/s':>8}")
    for r in rows:
        if "error" in r:
            print(f"{r['kernel']:<16} {r['shape']:<20} {r['passes']:<17} refused: {r['error']}")
        else:
            print(f"{r['kernel']:<16} {r['shape']:<20} {r['passes']:<17} {r['seconds'] * 1e3:>9.3f} "
                  f"{r['iterations_per_s']:>9.2f} {r['tflops']:>8.1f}")
    for r in rows:
        print("json: " + json.dumps(r))


if __name__ == "__main__":
    main()
