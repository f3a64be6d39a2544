#!/usr/bin/env python3
"""Planner against replay over a grid of step plans: for each plan, `ringmaster simulate
--format json` (the planner's prediction and SimGrid's replay of the same plan), the error
simulated / predicted - 1; with two binaries, both side by side (before, after). Figures:
BENCHMARKS.md ("Planner vs replay beside collectives on comm-bound rings").

Grids (the link sharing of data-parallel collectives beside context rings and TP transfers):
  comm  tpu-v4-torus (16, 32 chips; cp 8, 16), pcie-8gpu-box (cp 4, 8), llama3-h100-roce and
        dgx-a100-ib (32 GPUs; cp 16, 32) x fsdp, zero2, hsdp x Llama 2 13B, Llama 3 8B x 8K,
        32K x no and full recomputation; one sequence a micro-step, two a step (208 plans)
  tp    pcie-8gpu-box, h800-nvlink-box, a100-nvlink-box (8 GPUs), dgx-a100-ib (16) x tp 2, 4 x
        fsdp, zero2, zero1 x Llama 2 13B, MPT-7B x 8K, 32K x none, selective x 1, 4 sequences a
        micro-step x TP comm overlap on, off (768 plans; --every 4 for the 192 BENCHMARKS.md
        reports)
  pp    dgx-a100-ib (16 GPUs), dgx-h100-ib and llama3-h100-roce (32), tpu-v4-torus (16),
        pcie-8gpu-box (8) x pp 2, 4 x 1F1B, interleaved 2 chunks (pp 4) x fsdp, zero1, ddp,
        zero2 x 4, 8 micro-batches x Llama 3 8B, Llama 2 13B at 8K; cp fills half of a
        stage, one sequence a micro-batch (240 plans)
  drain pcie-8gpu-box (8 GPUs), dgx-a100-ib and tpu-v4-torus (16), tpu-v4-torus (32) x pp 2,
        4 x fsdp, zero1, ddp, zero2 x 1, 2 micro-batches x Llama 3 8B and its 4-layer shapes
        at 4K; cp fills half of a stage (128 plans)
  random  80 step plans drawn with --seed (default 7): 7 topologies, 7 models, 4K-32K, 1, 2
        or 4 sequences a step, and some of sharding, checkpointing, cp, tp pinned, the rest
        (pp among it) the planner's pick

Usage: bench/agreement_grid.py [--grid comm|tp|pp|drain|random] [--seed S] [--full] [--free] [--every N] [--jobs J] RINGMASTER [RINGMASTER2]
"""
import argparse
import itertools
import json
import random
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor


def comm_grid():
    for topo, gpus, cps in [("tpu-v4-torus", 16, [8, 16]), ("tpu-v4-torus", 32, [8, 16]),
                            ("pcie-8gpu-box", 8, [4, 8]), ("llama3-h100-roce", 32, [16, 32]),
                            ("dgx-a100-ib", 32, [16, 32])]:
        for cp, sharding, model, seq, ckpt in itertools.product(
                cps, ["fsdp", "zero2", "hsdp"], ["llama2-13b", "llama3-8b"], [8, 32], ["none", "full"]):
            if sharding == "hsdp" and cp == gpus:
                continue  # no replicas to replicate over
            yield ["--model", model, "--topology", topo, "--gpus", str(gpus), "--seq", f"{seq}K",
                   "--cp", str(cp), "--sharding", sharding, "--checkpointing", ckpt,
                   "--micro-batch", "1", "--batch-tokens", f"{2 * seq}K"]


def tp_grid():
    for topo, gpus in [("pcie-8gpu-box", 8), ("h800-nvlink-box", 8), ("a100-nvlink-box", 8), ("dgx-a100-ib", 16)]:
        for tp, sharding, model, seq, ckpt, mb, overlap in itertools.product(
                [2, 4], ["fsdp", "zero2", "zero1"], ["llama2-13b", "mpt-7b"], [8, 32], ["none", "selective"],
                [1, 4], ["--tp-comm-overlap", "--no-tp-comm-overlap"]):
            yield ["--model", model, "--topology", topo, "--gpus", str(gpus), "--seq", f"{seq}K",
                   "--workload", "step", "--tp", str(tp), "--sharding", sharding, "--checkpointing", ckpt,
                   "--micro-batch", str(mb), overlap, "--batch-tokens", f"{seq * mb * gpus // tp}K"]


def pp_grid():
    for topo, gpus in [("dgx-a100-ib", 16), ("dgx-h100-ib", 32), ("tpu-v4-torus", 16), ("pcie-8gpu-box", 8),
                       ("llama3-h100-roce", 32)]:
        for pp, v, sharding, micro_batches, model in itertools.product(
                [2, 4], [1, 2], ["fsdp", "zero1", "ddp", "zero2"], [4, 8], ["llama3-8b", "llama2-13b"]):
            if v > 1 and pp < 3:
                continue  # interleaving is generated for pp > 2
            cp = max(1, gpus // pp // 2)
            replicas = gpus // pp // cp
            yield ["--model", model, "--topology", topo, "--gpus", str(gpus), "--seq", "8K", "--pp", str(pp),
                   "--virtual-stages", str(v), "--sharding", sharding, "--cp", str(cp), "--micro-batch", "1",
                   "--batch-tokens", f"{8 * micro_batches * replicas}K"]


def drain_grid():
    # Pipelines of one or two micro-batches, where a step is its fill and drain: each
    # stage's first gathers and last gradients' collectives on the path, the head's and the
    # embedding's at the ends.
    for topo, gpus in [("tpu-v4-torus", 16), ("tpu-v4-torus", 32), ("dgx-a100-ib", 16), ("pcie-8gpu-box", 8)]:
        for pp, sharding, micro_batches, model in itertools.product(
                [2, 4], ["fsdp", "zero1", "ddp", "zero2"], [1, 2], ["llama3-8b-4layers", "llama3-8b"]):
            cp = max(1, gpus // pp // 2)
            replicas = gpus // pp // cp
            yield ["--model", model, "--topology", topo, "--gpus", str(gpus), "--seq", "4K", "--pp", str(pp),
                   "--sharding", sharding, "--cp", str(cp), "--micro-batch", "1",
                   "--batch-tokens", f"{4 * micro_batches * replicas}K"]


def random_grid(seed):
    rng = random.Random(seed)
    topologies = [("pcie-8gpu-box", [8]), ("tpu-v4-torus", [16, 32]), ("dgx-a100-ib", [16, 32]),
                  ("dgx-h100-ib", [16, 32]), ("llama3-h100-roce", [32]), ("h800-nvlink-box", [8]),
                  ("a100-nvlink-box", [8])]
    models = ["llama3-8b", "llama2-13b", "mpt-7b", "llama2-7b", "mistral-7b", "gpt3-xl", "llama3-8b-4layers"]
    for _ in range(80):
        topo, counts = rng.choice(topologies)
        gpus, model, seq = rng.choice(counts), rng.choice(models), rng.choice([4, 8, 16, 32])
        plan = ["--model", model, "--topology", topo, "--gpus", str(gpus), "--seq", f"{seq}K",
                "--batch-tokens", f"{seq * rng.choice([1, 2, 4])}K"]
        if rng.random() < 0.6:
            plan += ["--sharding", rng.choice(["fsdp", "zero2", "zero1", "hsdp", "ddp"])]
        if rng.random() < 0.5:
            plan += ["--checkpointing", rng.choice(["none", "full", "selective"])]
        if rng.random() < 0.5:
            plan += ["--cp", str(rng.choice([1, 2, 4, 8]))]
        if rng.random() < 0.3:
            plan += ["--tp", str(rng.choice([1, 2]))]
        yield plan


def error_pct(binary, args, free=False):
    """simulated / predicted - 1 in %, or None where the plan is refused; `free`: of the
    free-communication step (predicted: step time x scaling efficiency)."""
    r = subprocess.run([binary, "simulate", "--format", "json"] + args, capture_output=True, text=True)
    if r.returncode != 0:
        return None
    d = json.loads(r.stdout)
    if free:
        predicted = d["predicted"]["step_time_s"] * d["predicted"]["scaling_efficiency"]
        return 100 * (d["simulated"]["free_comm_step_time_s"] / predicted - 1)
    return 100 * (d["simulated"]["step_time_s"] / d["predicted"]["step_time_s"] - 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", choices=["comm", "tp", "pp", "drain", "random"], default="comm")
    ap.add_argument("--seed", type=int, default=7, help="the random grid's draw")
    ap.add_argument("--full", action="store_true", help="replay every op (simulate --full)")
    ap.add_argument("--free", action="store_true", help="compare the free-communication steps")
    ap.add_argument("--every", type=int, default=1, help="keep one plan in N")
    ap.add_argument("--jobs", type=int, default=2, help="plans run at once")
    ap.add_argument("binaries", nargs="+", metavar="RINGMASTER")
    o = ap.parse_args()
    if len(o.binaries) > 2 or o.every < 1 or o.jobs < 1:
        ap.error("one or two binaries; --every and --jobs at least 1")
    grids = {"comm": comm_grid, "tp": tp_grid, "pp": pp_grid, "drain": drain_grid, "random": lambda: random_grid(o.seed)}
    plans = list(grids[o.grid]())[::o.every]
    if o.full:
        plans = [p + ["--full"] for p in plans]

    def run(plan):
        return [error_pct(b, plan, o.free) for b in o.binaries], plan

    rows = []
    with ThreadPoolExecutor(o.jobs) as pool:
        for i, (errs, plan) in enumerate(pool.map(run, plans), 1):
            print(f"{i}/{len(plans)}", file=sys.stderr, end="\r")
            if None in errs:
                print("refused  " + " ".join(plan))
                continue
            rows.append(errs)
            print(" ".join(f"{e:+7.2f}" for e in errs) + "  " + " ".join(plan))
    print(f"{len(rows)} of {len(plans)} plans replayed (error: simulated / predicted - 1, %)")
    for k, b in enumerate(o.binaries):
        abs_err = [abs(r[k]) for r in rows]
        if abs_err:
            print(f"{b}: mean |error| {sum(abs_err) / len(abs_err):.2f} %, worst {max(abs_err):.2f} %, "
                  f"over 2 %: {sum(e > 2 for e in abs_err)}")


if __name__ == "__main__":
    main()
