#!/usr/bin/env python3
"""Times whole training steps of a Llama-3-8B-shaped model cut to a few layers, on one GPU.

What a corpus entry of a training step composes (GEMMs, attention, norms, rotary, SwiGLU,
logits and cross-entropy over the 128,256-token vocabulary, AdamW), measured as plain
PyTorch runs it, so the planner's whole-step price for one GPU can be checked against it:
  model      Llama-3-8B's layer (hidden 4096, 32 query and 8 KV heads, head dim 128, SwiGLU
             14336, RMSNorm, rotary), `--layers` of them (default 4), untied embedding and
             output (vocab 128256); fp32 parameters, bf16 autocast (as torch DDP/FSDP users
             run it), SDPA's default backend (`--sdpa flash|cudnn` pins one), no activation
             checkpointing (`--checkpointing full`: each layer recomputed in the backward,
             torch.utils.checkpoint), eager (no compile)
  step       one sequence of `--seq` tokens (default 8192; several may be given), forward,
             backward, AdamW(fused=True) step, zero_grad(set_to_none=True)
Timing: CUDA events around each of `--steps` steps (default 10) after 3 warm-ups; prints
the median step, tokens/s and the peak memory torch allocated and reserved, one row per
length, then the rows as JSON lines (prefix 'json: ').
"""
import argparse
from contextlib import nullcontext
import json
import statistics
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.checkpoint import checkpoint

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB, THETA = 4096, 32, 8, 128, 14336, 128256, 500000.0


def rotary(x, cos, sin):  # x: (b, s, heads, d); the rotate-half form HF's Llama uses
    x1, x2 = x[..., : HEAD_DIM // 2], x[..., HEAD_DIM // 2:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_norm, self.ffn_norm = nn.RMSNorm(HIDDEN, eps=1e-5), nn.RMSNorm(HIDDEN, eps=1e-5)
        self.wq = nn.Linear(HIDDEN, HEADS * HEAD_DIM, bias=False)
        self.wk = nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=False)
        self.wv = nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=False)
        self.wo = nn.Linear(HEADS * HEAD_DIM, HIDDEN, bias=False)
        self.w1 = nn.Linear(HIDDEN, FFN, bias=False)
        self.w3 = nn.Linear(HIDDEN, FFN, bias=False)
        self.w2 = nn.Linear(FFN, HIDDEN, bias=False)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        h = self.attn_norm(x)
        q = rotary(self.wq(h).view(b, s, HEADS, HEAD_DIM), cos, sin)
        k = rotary(self.wk(h).view(b, s, KV_HEADS, HEAD_DIM), cos, sin)
        v = self.wv(h).view(b, s, KV_HEADS, HEAD_DIM)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           is_causal=True, enable_gqa=True)
        x = x + self.wo(o.transpose(1, 2).reshape(b, s, HIDDEN))
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Model(nn.Module):
    def __init__(self, layers, full_checkpointing):
        super().__init__()
        self.full_checkpointing = full_checkpointing
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList(Layer() for _ in range(layers))
        self.norm = nn.RMSNorm(HIDDEN, eps=1e-5)
        self.output = nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, tokens, targets, cos, sin):
        x = self.embed(tokens)
        for layer in self.layers:
            x = checkpoint(layer, x, cos, sin, use_reentrant=False) if self.full_checkpointing else layer(x, cos, sin)
        logits = self.output(self.norm(x))
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def measure(layers, seq, steps, checkpointing, sdpa):
    torch.manual_seed(0)
    model = Model(layers, checkpointing == "full").cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    inv = 1.0 / THETA ** (torch.arange(0, HEAD_DIM, 2, device="cuda").float() / HEAD_DIM)
    ang = torch.outer(torch.arange(seq, device="cuda").float(), inv)
    ang = torch.cat((ang, ang), dim=-1)[None, :, None, :]
    cos, sin = ang.cos().bfloat16(), ang.sin().bfloat16()
    tokens = torch.randint(0, VOCAB, (1, seq + 1), device="cuda")
    inputs, targets = tokens[:, :-1], tokens[:, 1:]

    backends = {"flash": [SDPBackend.FLASH_ATTENTION], "cudnn": [SDPBackend.CUDNN_ATTENTION]}.get(sdpa)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16), (sdpa_kernel(backends) if backends else nullcontext()):
            loss = model(inputs, targets, cos, sin)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    t = statistics.median(times)
    params = sum(p.numel() for p in model.parameters())
    row = {"model": f"llama3-8b, {layers} layers", "params": params, "seq": seq, "checkpointing": checkpointing,
           "sdpa": sdpa, "seconds": t,
           "tokens_per_s": seq / t, "min_s": min(times), "max_s": max(times),
           "peak_allocated_gib": torch.cuda.max_memory_allocated() / 2**30,
           "peak_reserved_gib": torch.cuda.max_memory_reserved() / 2**30}
    del model, opt
    torch.cuda.empty_cache()
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--seq", type=int, nargs="+", default=[8192])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--checkpointing", choices=["none", "full"], default="none")
    ap.add_argument("--sdpa", choices=["default", "flash", "cudnn"], default="default")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("skipped: no CUDA device")
        sys.exit(77)
    props = torch.cuda.get_device_properties(0)
    print(f"device: {props.name}, {props.multi_processor_count} SMs, {props.total_memory / 2**30:.0f} GiB; "
          f"torch {torch.__version__}, CUDA {torch.version.cuda}")
    rows = []
    for s in args.seq:
        try:
            rows.append(measure(args.layers, s, args.steps, args.checkpointing, args.sdpa))
        except torch.cuda.OutOfMemoryError:
            print(f"seq {s}: out of memory")
            torch.cuda.empty_cache()
    print(f"{'model':<22} {'params':>8} {'seq':>7} {'ckpt':>5} {'sdpa':>8} {'step ms':>9} {'tokens/s':>9} "
          f"{'alloc GiB':>10} {'reserved GiB':>13}")
    for r in rows:
        print(f"{r['model']:<22} {r['params'] / 1e9:>7.3f}B {r['seq']:>7} {r['checkpointing']:>5} {r['sdpa']:>8} "
              f"{r['seconds'] * 1e3:>9.2f} "
              f"{r['tokens_per_s']:>9.0f} {r['peak_allocated_gib']:>10.2f} {r['peak_reserved_gib']:>13.2f}")
    for r in rows:
        print("json: " + json.dumps(r))


if __name__ == "__main__":
    main()
