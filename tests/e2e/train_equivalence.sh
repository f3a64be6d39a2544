#!/usr/bin/env bash
# `ringmaster train`: for the same seed and data, the loss of every step of the first 8
# with 2 and 4 ranks matches the 1-rank run within 1e-4 relative, for each ring schedule
# (flat, bidirectional), all-gather CP (--cp-comm-type all_gather: K,V gathered around the
# ring, dK,dV reduce-scattered), all-to-all CP (--cp-comm-type a2a: each layer's head-sharded
# view kept from its forward to its backward, or recomputed), a2a+p2p (groups of 2 around
# rings of 2: the ring runs on the view), load balance (zigzag, striped, contiguous), data parallelism,
# micro-batches and gradient accumulation, with the model state sharded (FSDP, the
# default), replicated (--sharding ddp) and both (an hsdp plan on a topology of 2-rank
# nodes: FSDP over each node's pair, the gradient shards all-reduced across the two), with
# zero2 and zero1 plans (each unit's parameters gathered once a step and held; zero2
# reduce-scatters every micro-step, zero1 once, in the last: the measurements count them),
# and under each activation checkpointing
# policy, and with a sliding window (p2p, all_gather, a2a against 1 rank of the windowed
# model): the ranks' ring attention, collectives, recomputation and batch split change
# nothing but fp32 rounding. Every run takes 4 sequences of 128 tokens per step
# (--batch-tokens 512).
# Usage: train_equivalence.sh <ringmaster> <source-dir>.
set -u
bin=$1
src=$2
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.bash"
need mpirun "train runs MPI ranks"
need python3 "compares the JSON lines"
data=$src/data/public_domain.txt
# 8 steps: the 1-rank loss falls by over 3 nats in them (6.9 to 3.7); each further step
# costs every run about 0.12 s (of about 1 s for its start).
steps=8

# train_losses <name> <plan options...>: plans tiny on $topology with $sharding, trains
# (with $train_opts), keeps the JSON lines.
train_opts=""
topology=cpu-local
sharding=fsdp
model=tiny
train_losses() {
  local name=$1
  shift
  # --tp 1: tensor parallelism has its own test (train_tensor_parallel.sh).
  if ! "$bin" plan --model "$model" --topology "$topology" --seq 128 --batch-tokens 512 --tp 1 --sharding "$sharding" "$@" \
      -o "$tmp/$name.yaml" >/dev/null 2>"$tmp/$name.plan.err"; then
    fail "$name: plan $* failed: $(cat "$tmp/$name.plan.err")"
    return
  fi
  # shellcheck disable=SC2086  # train_opts is a list of words
  if ! "$bin" train --plan "$tmp/$name.yaml" --data "$data" --steps $steps --seed 7 $train_opts \
      --format json >"$tmp/$name.jsonl" 2>"$tmp/$name.err"; then
    fail "$name: train exited non-zero: $(tail -3 "$tmp/$name.err")"
  fi
}

train_losses one --gpus 1 --micro-batch 2
train_losses zigzag2 --gpus 2 --cp 2 --schedule flat --load-balance zigzag --micro-batch 1
train_losses dp2 --gpus 2 --cp 1 --micro-batch 2
train_losses zigzag4 --gpus 4 --cp 4 --schedule flat --load-balance zigzag --micro-batch 1
train_losses bidir4 --gpus 4 --cp 4 --schedule bidirectional --load-balance striped --micro-batch 2
train_losses cp2dp2 --gpus 4 --cp 2 --schedule flat --load-balance contiguous --micro-batch 1
train_losses allgather4 --gpus 4 --cp 4 --cp-comm-type all_gather --micro-batch 1
train_losses allgather2dp2 --gpus 4 --cp 2 --cp-comm-type all_gather --micro-batch 1 \
  --checkpointing full
train_losses a2a2 --gpus 2 --cp 2 --cp-comm-type a2a --micro-batch 2 --checkpointing none
train_losses a2a2dp2 --gpus 4 --cp 2 --cp-comm-type a2a --micro-batch 1 --checkpointing full
train_losses usp4 --gpus 4 --cp 4 --hierarchical-context-parallel-sizes 2 2 --micro-batch 2 --checkpointing none
train_losses usp4full --gpus 4 --cp 4 --hierarchical-context-parallel-sizes 2 2 --micro-batch 1 --checkpointing full
train_losses full2 --gpus 2 --cp 2 --schedule flat --load-balance zigzag --micro-batch 1 --checkpointing full
train_losses selective4 --gpus 4 --cp 2 --schedule flat --load-balance zigzag --micro-batch 2 --checkpointing selective
train_opts="--sharding ddp"
train_losses ddp4 --gpus 4 --cp 2 --schedule flat --load-balance zigzag --micro-batch 1
train_opts=""
# cpu-local with nodes of 2 ranks: hsdp shards inside a node and replicates across.
sed -e 's/^name: cpu-local/name: cpu-2-per-node/' -e 's/^gpus_per_node: 64.*/gpus_per_node: 2/' \
  -e 's/^max_nodes: 1/max_nodes: 2/' "$src/topologies/cpu-local.yaml" >"$tmp/cpu-2-per-node.yaml"
cat >>"$tmp/cpu-2-per-node.yaml" <<'YAML'
inter:
  kind: fat-tree
  latency_us: 0.25
  nics_per_node: 1
  nic_gb_per_s: 5
  rail_optimized: false
  nodes_per_leaf: 2
  oversubscription: 1
YAML
topology=$tmp/cpu-2-per-node.yaml sharding=hsdp
train_losses hsdp4 --gpus 4 --cp 2 --schedule flat --load-balance zigzag --micro-batch 1
topology=cpu-local sharding=fsdp
for level in zero2 zero1; do
  sharding=$level train_opts="--measurements $tmp/$level.m.jsonl"
  train_losses "$level" --gpus 4 --cp 2 --schedule flat --load-balance zigzag --micro-batch 1
done
sharding=fsdp train_opts=""
# A sliding window of 40 of the 128 tokens: the ring of 4 runs 3 of its 4 steps on contiguous
# chunks of 32, all_gather gathers 3 blocks, a2a masks the band; compared with 1 rank of the
# same model (swa_one).
sed -e 's/^name: tiny/name: tiny-swa/' "$src/models/tiny.yaml" >"$tmp/tiny-swa.yaml"
echo "sliding_window: 40" >>"$tmp/tiny-swa.yaml"
model=$tmp/tiny-swa.yaml
train_losses swa_one --gpus 1 --micro-batch 2
train_losses swa_ring4 --gpus 4 --cp 4 --schedule flat --load-balance contiguous --micro-batch 1
train_losses swa_allgather4 --gpus 4 --cp 4 --cp-comm-type all_gather --micro-batch 1
train_losses swa_a2a2 --gpus 2 --cp 2 --cp-comm-type a2a --micro-batch 2
model=tiny

python3 - "$tmp" $steps <<'PY' || fail "losses differ (above)"
import json, sys
tmp, steps = sys.argv[1], int(sys.argv[2])
def losses(name):
    try:
        rows = [json.loads(l) for l in open(f"{tmp}/{name}.jsonl") if l.strip()]
    except (OSError, ValueError) as e:
        print(f"{name}: no JSON lines ({e})"); return None
    assert all(set(r) >= {"step", "loss", "tokens_per_s", "step_time_s"} for r in rows), f"{name}: keys"
    return [r["loss"] for r in rows]
ref = losses("one")
bad = ref is None or len(ref) != steps
if not bad:
    print(f"1 rank: loss {ref[0]:.4f} at step 1 -> {ref[-1]:.4f} at step {steps}")
    bad = not ref[-1] < ref[0] - 0.5
    if bad: print("the 1-rank loss did not fall by 0.5 nats")
swa = losses("swa_one")
if swa is None or len(swa) != steps or swa == ref:
    print("swa_one: missing, short, or the same losses as without the window"); bad = True
one = ref
for name in ["zigzag2", "dp2", "zigzag4", "bidir4", "cp2dp2", "allgather4", "allgather2dp2", "a2a2", "a2a2dp2", "usp4", "usp4full", "full2", "selective4",
             "ddp4", "hsdp4", "zero2", "zero1", "swa_ring4", "swa_allgather4", "swa_a2a2"]:
    got = losses(name)
    ref = swa if name.startswith("swa_") else one
    if ref is None or got is None or len(got) != steps:
        print(f"{name}: {0 if got is None else len(got)} steps, want {steps}"); bad = True; continue
    worst = max(abs(a - b) / abs(b) for a, b in zip(got, ref)) if ref else 1.0
    print(f"{name}: largest relative loss difference to 1 rank{' (window)' if name.startswith('swa_') else ''} over {steps} steps {worst:.2e}")
    if worst > 1e-4: bad = True
sys.exit(1 if bad else 0)
PY
# The plans really differ in what the equivalence is about.
grep -q "grad_accum: 4" "$tmp/zigzag2.yaml" 2>/dev/null || fail "zigzag2 plan has no gradient accumulation"
grep -q "micro_batch: 2" "$tmp/dp2.yaml" 2>/dev/null || fail "dp2 plan has no micro-batch of 2"
grep -q "checkpointing: full" "$tmp/full2.yaml" 2>/dev/null || fail "full2 plan has no full checkpointing"
for name in allgather4 allgather2dp2; do
  grep -q "cp_comm_type: all_gather" "$tmp/$name.yaml" 2>/dev/null || fail "the $name plan is not all_gather"
  grep -q "all_gather (K,V gathered around the ring" "$tmp/$name.err" || fail "train did not say it runs $name as all_gather"
done
for name in a2a2 a2a2dp2; do
  grep -q "cp_comm_type: a2a$" "$tmp/$name.yaml" 2>/dev/null || fail "the $name plan is not a2a"
done
for name in usp4 usp4full; do
  grep -q "cp_comm_type: a2a+p2p$" "$tmp/$name.yaml" 2>/dev/null || fail "the $name plan is not a2a+p2p"
done
grep -q "micro_batch: 2" "$tmp/a2a2.yaml" 2>/dev/null || fail "the a2a2 plan has no micro-batch of 2 (two views kept per layer)"
grep -q "checkpointing: full" "$tmp/a2a2dp2.yaml" 2>/dev/null || fail "the a2a2dp2 plan has no full checkpointing"
grep -q "cp_comm_type: all_gather" "$tmp/swa_allgather4.yaml" 2>/dev/null || fail "the swa_allgather4 plan is not all_gather"
grep -q "cp_comm_type: a2a$" "$tmp/swa_a2a2.yaml" 2>/dev/null || fail "the swa_a2a2 plan is not a2a"
grep -q "model state sharded over all 4 ranks (FSDP" "$tmp/cp2dp2.err" || fail "cp2dp2 did not shard (FSDP)"
grep -q "model state replicated on every rank (DDP" "$tmp/ddp4.err" || fail "ddp4 did not replicate"
grep -q "model state sharded over groups of 2 ranks, replicated 2x (HSDP" "$tmp/hsdp4.err" || fail "hsdp4 did not run HSDP"
grep -q "grad_accum: 2" "$tmp/zero1.yaml" 2>/dev/null || fail "the zero1 plan has no gradient accumulation"
# The 4 units (embedding, 2 blocks, head) of tiny: zero2 and zero1 gather each once a step;
# zero2 reduce-scatters each in both micro-steps, zero1 once.
python3 - "$tmp" $steps <<'PY' || fail "zero2 / zero1 collectives per step (above)"
import collections, json, sys
tmp, steps = sys.argv[1], int(sys.argv[2])
want = {"zero2": (4, 8), "zero1": (4, 4)}
bad = False
for level, (gathers, scatters) in want.items():
    n = collections.Counter()
    for line in open(f"{tmp}/{level}.m.jsonl"):
        r = json.loads(line)
        if r["rank"] == 0: n[r["kind"]] += 1
    got = (n["all_gather"] / steps, n["reduce_scatter"] / steps)
    print(f"{level}: {got[0]:g} all-gathers and {got[1]:g} reduce-scatters a step on rank 0 (want {gathers}, {scatters})")
    bad |= got != (gathers, scatters)
sys.exit(1 if bad else 0)
PY
# FSDP holds a quarter of the model state on each of 4 ranks (units padded to 4 shards).
python3 - "$tmp" <<'PY' || fail "memory per rank (above)"
import re, sys
def state(name):
    m = re.search(r"per rank: model state ([0-9.]+) MiB \(replicated: ([0-9.]+) MiB\)", open(f"{sys.argv[1]}/{name}.err").read())
    return float(m.group(1)), float(m.group(2))
fsdp, whole = state("cp2dp2")
ddp, _ = state("ddp4")
hsdp, _ = state("hsdp4")
print(f"model state per rank: FSDP over 4 ranks {fsdp:.2f} MiB, HSDP over 2 {hsdp:.2f} MiB, DDP {ddp:.2f} MiB "
      f"(whole model {whole:.2f} MiB)")
sys.exit(0 if abs(ddp - whole) < 0.01 and fsdp < whole / 4 * 1.01 and whole / 2 <= hsdp < whole / 2 * 1.01 else 1)
PY
echo "train_equivalence: $failures failed"
[[ $failures -eq 0 ]]
