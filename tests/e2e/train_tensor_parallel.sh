#!/usr/bin/env bash
# Tensor parallelism in `ringmaster train` and `run` (executor/transformer.h: Megatron-LM's
# tensor + sequence parallelism, the TP group's collectives over MPI,
# executor/tensor_parallel_group.h). For the same seed and data, the loss of each of 8
# steps with tp 2 matches the 1-rank run within 1e-4 relative: alone, beside a zigzag ring
# of 2 (selective checkpointing), beside data parallelism (DDP, full checkpointing) and
# beside all_gather CP (ZeRO-1), and beside a2a CP (a model of 8 heads: 2 a member, 4 after
# the all-to-all); a bf16 pass follows the 1-rank bf16 pass within 2e-3.
# The measurements count the TP collectives the planner prices for a layer (2 all-gathers
# and 2 reduce-scatters forward, as many backward, 4 more under full recomputation), the
# norm outputs' re-gathers (stored split: a rank stores what the memory model counts), plus
# the embedding's and the head's and the norm gains' all-reduces, and a member's GEMM
# records count its share of the work (half the 1-rank FLOPs). `run --verify` checks a
# TP step plan's gradients against the one-rank fp64 reference, and both TP rings of an
# attention plan; a checkpoint written with tp 2 resumes on one rank where the 1-rank run
# would be. A plan that overlaps its TP collectives (tp_comm_overlap) is refused: the
# executor waits for each, so it could not measure what the plan priced.
# Usage: train_tensor_parallel.sh <ringmaster> <source-dir>.
set -u
bin=$1
src=$2
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.bash"
source "$(dirname "${BASH_SOURCE[0]}")/lib/train.bash"
need mpirun "train runs MPI ranks"
need python3 "compares the JSON lines"
data=$src/data/public_domain.txt
steps=8

# Plans of the tiny model (plan: lib/train.bash).
model=tiny
plan one --gpus 1 --micro-batch 2 --tp 1
plan tp2 --gpus 2 --tp 2 --cp 1 --micro-batch 2 --sharding fsdp --no-tp-comm-overlap
plan cp2 --gpus 2 --tp 1 --cp 2 --micro-batch 2 --sharding fsdp
plan tp2cp2 --gpus 4 --tp 2 --cp 2 --schedule flat --load-balance zigzag --micro-batch 1 --sharding fsdp \
  --checkpointing selective --no-tp-comm-overlap
plan tp2dp2 --gpus 4 --tp 2 --cp 1 --micro-batch 1 --sharding ddp --checkpointing full --no-tp-comm-overlap
plan tp2ag --gpus 4 --tp 2 --cp 2 --cp-comm-type all_gather --micro-batch 1 --sharding zero1 --no-tp-comm-overlap
sed -e 's/^name: tiny/name: tiny-8-heads/' -e 's/^heads: 4/heads: 8/' -e 's/^kv_heads: 2/kv_heads: 4/' \
  -e 's/^head_dim: 64/head_dim: 32/' "$src/models/tiny.yaml" >"$tmp/tiny8.yaml"
model=$tmp/tiny8.yaml
plan one8 --gpus 1 --micro-batch 1 --tp 1
plan tp2a2a --gpus 4 --tp 2 --cp 2 --cp-comm-type a2a --micro-batch 1 --sharding fsdp --no-tp-comm-overlap
model=tiny
train one one --measurements "$tmp/one.m.jsonl"
train tp2 tp2 --measurements "$tmp/tp2.m.jsonl"
train cp2 cp2
train tp2cp2 tp2cp2
train tp2dp2 tp2dp2 --measurements "$tmp/tp2dp2.m.jsonl"
train tp2ag tp2ag
train one8 one8
train tp2a2a tp2a2a
train one_bf16 one --mixed-precision-param bfloat16
train tp2_bf16 tp2 --mixed-precision-param bfloat16

same_losses tp2:one:1e-4 tp2cp2:one:1e-4 tp2dp2:one:1e-4 tp2ag:one:1e-4 tp2a2a:one8:1e-4 tp2_bf16:one_bf16:2e-3
for name in tp2 tp2cp2 tp2dp2 tp2ag tp2a2a; do
  grep -q "^  tp: 2$" "$tmp/$name.yaml" || fail "the $name plan is not tp 2"
  grep -q "ranks = tp 2 (sequence parallel) x cp" "$tmp/$name.err" || fail "$name: the header does not say tp 2"
done
grep -q "model state replicated on every rank (DDP" "$tmp/tp2dp2.err" || fail "tp2dp2 did not replicate"
# Sequence parallelism stores a member's rows only: tp 2 holds what cp 2 holds for the same
# tokens per rank (2 x 128 rows split 2 ways; 2 x 64 tokens).
echo "tp2: $(stored tp2); cp2: $(stored cp2)"
[[ -n $(stored tp2) && $(stored tp2) == "$(stored cp2)" ]] || fail "tp 2 stores other activations than cp 2"
grep -q "cp_comm_type: all_gather" "$tmp/tp2ag.yaml" || fail "the tp2ag plan is not all_gather"
grep -q "cp_comm_type: a2a$" "$tmp/tp2a2a.yaml" || fail "the tp2a2a plan is not a2a"

# TP collectives of one micro-step on rank 0, from the measurements: per layer 2 all-gathers
# and 2 reduce-scatters forward and backward (planner/tensor_parallel.h), 2 and 2 more under
# full recomputation, the 2 norm outputs gathered again for the weight gradients, and 2
# all-reduces of norm gains' gradients; the embedding's
# reduce-scatter (forward) and all-gather (backward), the head's all-gather, reduce-scatter,
# 2 all-to-alls and the final norm's all-reduce.
python3 - "$tmp" $steps <<'PY' || fail "TP collectives per micro-step (above)"
import collections, json, sys
tmp, steps = sys.argv[1], int(sys.argv[2])
layers = 2
bad = False
for name, micro_steps, full in [("tp2", 2, False), ("tp2dp2", 2, True)]:
    n = collections.Counter()
    for line in open(f"{tmp}/{name}.m.jsonl"):
        r = json.loads(line)
        if r["rank"] == 0 and r["kind"].startswith("tp_"): n[r["kind"]] += 1
    per = {k: v / steps / micro_steps for k, v in n.items()}
    scatters = layers * (4 + (2 if full else 0)) + 2
    want = {"tp_all_gather": scatters + 2 * layers, "tp_reduce_scatter": scatters, "tp_all_reduce": 2 * layers + 1,
            "tp_all_to_all": 2}
    print(f"{name}: per micro-step {dict(sorted(per.items()))}, want {dict(sorted(want.items()))}")
    bad |= per != want
# A member's GEMM records count its own share of the work (the cost model's tp_shard), so
# calibration fits the rate it ran at: half the 1-rank FLOPs for the same rows.
def linear_flops(name):
    return sum(r["flops"] for r in map(json.loads, open(f"{tmp}/{name}.m.jsonl")) if r["rank"] == 0 and r["kind"] == "linear")
ratio = linear_flops("tp2") / linear_flops("one")
print(f"tp2: linear FLOPs recorded on rank 0 = {ratio:.6f} x the 1-rank run's (want 0.5)")
bad |= abs(ratio - 0.5) > 1e-9
sys.exit(1 if bad else 0)
PY

# The measured trace of a TP step shows the group's collectives.
timeout 120 "$bin" run --plan "$tmp/tp2.yaml" --iters 1 --trace "$tmp/tp.trace.json" --timeout-s 30 >/dev/null 2>&1 ||
  fail "run --trace of the tp2 step plan"
for want in '"name":"TP all-gather"' '"name":"TP reduce-scatter"' '"name":"TP all-to-all"' '"name":"TP all-reduce"'; do
  grep -q "$want" "$tmp/tp.trace.json" || fail "the TP step's trace has no $want event"
done

# run --verify: a TP step plan's gradients, and both TP rings of an attention plan.
out=$(timeout 120 "$bin" run --plan "$tmp/tp2cp2.yaml" --verify --iters 1 --timeout-s 30 2>&1)
grep -q "verification of step 1 against a one-rank fp64 reference: OK" <<<"$out" ||
  fail "run --verify of the tp2cp2 step plan: $(tail -3 <<<"$out")"
plan attn --gpus 4 --tp 2 --cp 2 --workload attention --micro-batch 1 --no-tp-comm-overlap
out=$(timeout 120 "$bin" run --plan "$tmp/attn.yaml" --verify --iters 1 --timeout-s 30 2>&1)
grep -q "^# verification: OK" <<<"$out" || fail "run --verify of a tp 2 attention plan: $(tail -3 <<<"$out")"
grep -q "4 ranks = tp 2 x cp 2 x dp 1" <<<"$out" || fail "run does not say the attention plan is tp 2"
[[ $(grep -cE "^ +1  dv " <<<"$out") -ge 1 ]] || fail "run --verify did not check TP rank 1's ring: $out"

# A checkpoint written by the tp 2 ranks after 4 steps, resumed on one rank for the last 4.
resumes_on_one_rank tp2cp2 one

# Overlapped TP collectives are priced, not run.
plan overlap --gpus 2 --tp 2 --cp 1 --micro-batch 2 --tp-comm-overlap
timeout 60 "$bin" train --plan "$tmp/overlap.yaml" --data "$data" --steps 1 >"$tmp/out" 2>"$tmp/err"
rc=$?
[[ $rc -eq 2 ]] || fail "train of a tp_comm_overlap plan exited $rc, want 2"
grep -q "plan.tp_comm_overlap: the executor waits for each TP collective" "$tmp/err" ||
  fail "the refusal does not name plan.tp_comm_overlap: $(cat "$tmp/err")"
echo "train_tensor_parallel: $failures failed"
[[ $failures -eq 0 ]]
