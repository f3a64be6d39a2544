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
  ring       (--ring) the blocks a ring step of c tokens per GPU runs (ring-flash-attention's
             layouts): a causal c x c diagonal, a full c x c block, zigzag's c x c/2 and c/2 x c
             halves, for c in 4K, 8K, 16K; flash backend, the same heads, forward and
             forward + backward
  merge      (--ring) ring-flash-attention's per-step merge of (out, lse) (utils.py
             _update_out_and_lse, eager and scripted as it runs it) and the backward's dq
             accumulation on c tokens x 32 heads x d 128, in GB/s of the planner's
             merge_bytes (34 and 10 bytes per output element); and a 1 GiB bf16 copy,
             the HBM bandwidth a streaming kernel reaches (read + write)
Timing: CUDA events around `iters` calls after `warmup` calls; the median of `repeats` such
means. Usage: measure_torch_kernels.py [--quick] [--ring | --merge]. Prints one aligned table, then the same
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


def attention_rows(shapes, repeats, backends):
    """shapes: (q tokens, kv tokens, causal); a causal square keeps the label 's N'."""
    heads, kv_heads, d = 32, 8, 128
    rows = []
    for backend, name in backends:
        for sq, skv, causal in shapes:
            q = torch.randn(1, heads, sq, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            k = torch.randn(1, kv_heads, skv, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            v = torch.randn_like(k, requires_grad=True)
            dout = torch.randn_like(q)
            fwd_flops = 4 * sq * skv * d * heads / (2 if causal else 1)  # causal: half the scores
            label = f"s {sq}" if causal and sq == skv else f"q {sq} kv {skv} {'causal' if causal else 'full'}"
            for passes in ("forward", "forward_backward"):
                row = {"kernel": f"sdpa {name}", "shape": label, "passes": passes}
                t = None
                # GQA read in place where the backend takes it, else K, V expanded to 32 heads
                for gqa in (True, False):
                    kk, vv = (k, v) if gqa else (
                        k.detach().repeat_interleave(heads // kv_heads, 1).requires_grad_(),
                        v.detach().repeat_interleave(heads // kv_heads, 1).requires_grad_())

                    def step():
                        out = F.scaled_dot_product_attention(q, kk, vv, is_causal=causal, enable_gqa=gqa)
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


def _merge(out, lse, block_out, block_lse):
    """ring-flash-attention's utils.py _update_out_and_lse, as it is written."""
    block_out = block_out.to(torch.float32)
    block_lse = block_lse.transpose(-2, -1).unsqueeze(dim=-1)
    out = out - torch.sigmoid(block_lse - lse) * (out - block_out)
    lse = lse - F.logsigmoid(lse - block_lse)
    return out, lse


def merge_rows(seqs, repeats):
    """The merge eager and under @torch.jit.script (as ring-flash-attention runs it; the
    profiling executor fuses it after its first calls, inside the warm-ups), the backward's
    dq accumulation (fp32 += bf16), in GB/s of the planner's merge_bytes (34, dq 10)."""
    heads, d = 32, 128
    scripted = torch.jit.script(_merge)
    rows = []
    for s in seqs:
        out = torch.randn(1, s, heads, d, device="cuda", dtype=torch.float32)
        lse = torch.randn(1, s, heads, 1, device="cuda", dtype=torch.float32)
        block_out = torch.randn(1, s, heads, d, device="cuda", dtype=torch.bfloat16)
        block_lse = torch.randn(1, heads, s, device="cuda", dtype=torch.float32)
        elements = s * heads * d
        for name, fn, nbytes in (("merge out,lse", lambda: _merge(out, lse, block_out, block_lse), 34),
                                 ("merge scripted", lambda: scripted(out, lse, block_out, block_lse), 34),
                                 ("dq accumulate", lambda: out.add_(block_out), 10)):
            t = timed(fn, 5, 20, repeats)
            rows.append({"kernel": name, "shape": f"s {s} h {heads} d {d}", "passes": "forward", "seconds": t,
                         "iterations_per_s": 1 / t, "gb_per_s": nbytes * elements / t / 1e9})
    x = torch.empty(2**29, device="cuda", dtype=torch.bfloat16)  # 1 GiB
    y = torch.empty_like(x)
    t = timed(lambda: y.copy_(x), 3, 20, repeats)
    rows.append({"kernel": "hbm copy", "shape": "1 GiB bf16", "passes": "forward", "seconds": t,
                 "iterations_per_s": 1 / t, "gb_per_s": 2 * x.numel() * 2 / t / 1e9})
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
    flash, cudnn = (SDPBackend.FLASH_ATTENTION, "flash"), (SDPBackend.CUDNN_ATTENTION, "cudnn")
    if "--merge" in sys.argv[1:]:  # the merge rows alone
        rows = merge_rows([4096, 8192, 16384], repeats)
    else:
        rows = gemm_rows(repeats) + attention_rows([(s, s, True) for s in seqs], repeats, (flash, cudnn))
    if "--ring" in sys.argv[1:]:
        blocks = [(4096, 4096, True)]  # the other causal diagonals are rows above
        for c in (4096, 8192, 16384):
            blocks += [(c, c, False), (c, c // 2, False), (c // 2, c, False)]
        try:  # the published rows above print whatever happens here
            rows += attention_rows(blocks, repeats, (flash,)) + merge_rows([4096, 8192, 16384], repeats)
        except Exception as e:
            print(f"--ring stopped: {e}")
    print(f"{'kernel':<16} {'shape':<26} {'passes':<17} {'ms':>9} {'iter/s':>9} {'TFLOP/s':>8}")
    for r in rows:
        if "error" in r:
            print(f"{r['kernel']:<16} {r['shape']:<26} {r['passes']:<17} refused: {r['error']}")
        elif "gb_per_s" in r:
            print(f"{r['kernel']:<16} {r['shape']:<26} {r['passes']:<17} {r['seconds'] * 1e3:>9.3f} "
                  f"{r['iterations_per_s']:>9.2f} {r['gb_per_s']:>8.1f} GB/s")
        else:
            print(f"{r['kernel']:<16} {r['shape']:<26} {r['passes']:<17} {r['seconds'] * 1e3:>9.3f} "
                  f"{r['iterations_per_s']:>9.2f} {r['tflops']:>8.1f}")
    for r in rows:
        print("json: " + json.dumps(r))


if __name__ == "__main__":
    main()
