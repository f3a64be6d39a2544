#!/usr/bin/env python3
"""Times ring-flash-attention's forward ring, rank by rank and step by step, on one GPU.

The corpus's ring-flash-attention rows (rfa-*) are whole rings of 8 GPUs; this script runs
on one GPU what each rank of such a ring computes, without the transfers, so a published
rate can be split into the ranks' own work and what the ring adds (transfers, the NCCL
kernels beside the attention, waits). Each rank runs the op sequence of
zhuzilin/ring-flash-attention's forward for its layout: ring_flash_attn.py (contiguous),
zigzag_ring_flash_attn.py and stripe_flash_attn.py, with utils.py's update_out_and_lse and
its @torch.jit.script _update_out_and_lse; attention is SDPA's flash backend (the
FlashAttention-2 kernels torch ships) where the library calls flash_attn's, on its layout
(batch, tokens, heads, head dim): 32 query and 8 KV heads, d 128, bf16, causal, `--c`
tokens per rank (default 8192: the README's 8 x 8K). The flash kernels' lse is not
returned by SDPA: the merge reads a stored one of the same shape (its cost does not depend
on the values).
Timing: CUDA events around every step of every rank, after 2 warm-up passes; the median of
5 passes. The lockstep ring (each step ends when its slowest rank's does, as the library's
per-step wait makes it) takes the sum over steps of the slowest rank's step; prints it in
iterations/s beside each layout's slowest and fastest rank, then JSON lines ('json: ').
Usage: measure_ring_steps.py [--c TOKENS] [--ranks P]
"""
import argparse
import json
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from measure_torch_kernels import _merge

HEADS, KV_HEADS, D = 32, 8, 128


# utils.py's @torch.jit.script _update_out_and_lse: the merge measure_torch_kernels.py times.
_update_out_and_lse = torch.jit.script(_merge)


def update_out_and_lse(out, lse, block_out, block_lse, slice_=None):
    if out is None:
        return block_out.to(torch.float32), block_lse.transpose(-2, -1).unsqueeze(dim=-1)
    if slice_ is not None:
        slice_out, slice_lse = _update_out_and_lse(out[slice_], lse[slice_], block_out, block_lse)
        out[slice_], lse[slice_] = slice_out, slice_lse
        return out, lse
    return _update_out_and_lse(out, lse, block_out, block_lse)


def forward(q, k, v, causal, lse_store):
    """flash_attn's forward on (batch, tokens, heads, d): out and an lse (batch, heads, tokens)."""
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                         is_causal=causal, enable_gqa=True).transpose(1, 2)
    return out, lse_store[:, :, : q.shape[1]]


def rank_steps(layout, rank, ranks, q, k, v, lse_store):
    """The rank's forward as a list of step closures sharing (out, lse)."""
    state = {"out": None, "lse": None}
    half = q.shape[1] // 2

    def merge(block_out, block_lse, slice_=None):
        state["out"], state["lse"] = update_out_and_lse(state["out"], state["lse"], block_out, block_lse, slice_)

    def step(s):
        if s == 0:  # a new pass
            state["out"] = state["lse"] = None
        if layout == "ring":
            if s <= rank:
                merge(*forward(q, k, v, s == 0, lse_store))
        elif layout == "zigzag":
            if s == 0:
                merge(*forward(q, k, v, True, lse_store))
            elif s <= rank:
                merge(*forward(q, k[:, :half], v[:, :half], False, lse_store))
            else:
                merge(*forward(q[:, half:], k, v, False, lse_store), slice_=(slice(None), slice(half, None)))
        else:  # stripe
            if s <= rank:
                merge(*forward(q, k, v, True, lse_store))
            else:
                merge(*forward(q[:, 1:], k[:, :-1], v[:, :-1], True, lse_store),
                      slice_=(slice(None), slice(1, None)))
        if s == ranks - 1:  # the library's last lines: out to bf16, lse to (batch, heads, tokens)
            state["out"] = state["out"].to(q.dtype)
            state["lse"] = state["lse"].squeeze(dim=-1).transpose(1, 2)
    return [lambda s=s: step(s) for s in range(ranks)]


def time_rank(steps, repeats):
    per_step = [[] for _ in steps]
    for rep in range(2 + repeats):
        events = [torch.cuda.Event(enable_timing=True) for _ in range(len(steps) + 1)]
        events[0].record()
        for i, fn in enumerate(steps):
            fn()
            events[i + 1].record()
        events[-1].synchronize()
        if rep >= 2:
            for i in range(len(steps)):
                per_step[i].append(events[i].elapsed_time(events[i + 1]) / 1e3)
    return [statistics.median(t) for t in per_step]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--c", type=int, default=8192)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("skipped: no CUDA device")
        sys.exit(77)
    props = torch.cuda.get_device_properties(0)
    print(f"device: {props.name}, {props.multi_processor_count} SMs; torch {torch.__version__}")
    c, P = args.c, args.ranks
    torch.manual_seed(0)
    q = torch.randn(1, c, HEADS, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, c, KV_HEADS, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    lse_store = torch.randn(1, HEADS, c, device="cuda", dtype=torch.float32)
    rows = []
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        for layout in ("ring", "zigzag", "stripe"):
            times = [time_rank(rank_steps(layout, r, P, q, k, v, lse_store), args.repeats) for r in range(P)]
            lockstep = sum(max(times[r][s] for r in range(P)) for s in range(P))
            totals = [sum(t) for t in times]
            rows.append({"layout": layout, "c": c, "ranks": P, "lockstep_s": lockstep,
                         "iterations_per_s": 1 / lockstep, "slowest_rank_s": max(totals),
                         "fastest_rank_s": min(totals), "step_s": times})
    print(f"{'layout':<8} {'c':>6} {'ranks':>5} {'lockstep ms':>12} {'iter/s':>8} {'slowest rank ms':>16} "
          f"{'fastest rank ms':>16}")
    for r in rows:
        print(f"{r['layout']:<8} {r['c']:>6} {r['ranks']:>5} {r['lockstep_s'] * 1e3:>12.3f} "
              f"{r['iterations_per_s']:>8.2f} {r['slowest_rank_s'] * 1e3:>16.3f} {r['fastest_rank_s'] * 1e3:>16.3f}")
    for r in rows:
        print("json: " + json.dumps(r))


if __name__ == "__main__":
    main()
