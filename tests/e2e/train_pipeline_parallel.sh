#!/usr/bin/env bash
# Pipeline parallelism in `ringmaster train` and `run` (executor/pipeline_stage.h: Megatron-LM's
# 1F1B and interleaved 1F1B programs, planner/pipeline_schedule.h, each micro-batch's pass
# suspended between its forward and its backward, blocking exchanges between stages). For
# the same seed and data, the loss of each of 8 steps of a 4-layer model matches the 1-rank
# run within 1e-4 relative with pp 2 alone (FSDP over each stage's one rank), beside a
# zigzag ring of 2, beside DDP (full checkpointing), beside tp 2 (ZeRO-1), with
# micro-batches of 2 (ZeRO-2, selective checkpointing), and with pp 3 on the split that
# counts the embedding and the loss as layers (torchtitan's default); an 8-layer model's
# interleaved pp 4 x 2 virtual stages matches its 1-rank run the same way; a bf16 pass
# follows the 1-rank bf16 pass within 2e-3. The first stage stores what one rank without a pipeline stores. Each stage records
# one exchange per micro-batch and one more a step (pp 2), each
# message a micro-batch's activation or gradient; FSDP gathers nothing it does not use; the
# measured trace shows the exchanges and collectives.
# `run --verify` checks a pipelined step's
# gradients against the one-rank fp64 reference; a checkpoint written by 4 pipelined ranks
# resumes on one rank where the 1-rank run would be. A stage that sends another
# micro-batch's message than its neighbour expects (RINGMASTER_FAULT=pp-order) is named by
# the receiver's transport, and every rank exits non-zero. An interleaved plan of pp 2 is
# refused (priced, not run: one neighbour both ways), and so is an order that crosses stages.
# Usage: train_pipeline_parallel.sh <ringmaster> <source-dir>.
set -u
bin=$1
src=$2
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.bash"
source "$(dirname "${BASH_SOURCE[0]}")/lib/train.bash"
need mpirun "train runs MPI ranks"
need python3 "compares the JSON lines"
data=$src/data/public_domain.txt
steps=8
sed -e 's/^name: tiny/name: tiny-4-layers/' -e 's/^layers: 2/layers: 4/' "$src/models/tiny.yaml" >"$tmp/tiny4.yaml"

# Plans of the 4-layer model, 1F1B (plan: lib/train.bash).
model=$tmp/tiny4.yaml
one=(--virtual-stages 1)
plan one --gpus 1 --micro-batch 1 --tp 1 --pp 1
plan pp2 --gpus 2 --pp 2 "${one[@]}" --tp 1 --cp 1 --micro-batch 1 --sharding fsdp
plan pp2cp2 --gpus 4 --pp 2 "${one[@]}" --tp 1 --cp 2 --schedule flat --load-balance zigzag --micro-batch 1 \
  --sharding fsdp
plan pp2dp2 --gpus 4 --pp 2 "${one[@]}" --tp 1 --cp 1 --micro-batch 1 --sharding ddp --checkpointing full
plan pp2tp2 --gpus 4 --pp 2 "${one[@]}" --tp 2 --cp 1 --micro-batch 1 --sharding zero1 --no-tp-comm-overlap
plan pp2mb2 --gpus 2 --pp 2 "${one[@]}" --tp 1 --cp 1 --micro-batch 2 --sharding zero2 --checkpointing selective
plan pp3 --gpus 3 --pp 3 "${one[@]}" --tp 1 --cp 1 --micro-batch 1 --sharding fsdp \
  --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split
train one one
sed -e 's/^name: tiny/name: tiny-8-layers/' -e 's/^layers: 2/layers: 8/' "$src/models/tiny.yaml" >"$tmp/tiny8.yaml"
model=$tmp/tiny8.yaml
plan one8 --gpus 1 --tp 1 --pp 1 --micro-batch 1
plan pp4v2 --gpus 4 --pp 4 --virtual-stages 2 --tp 1 --cp 1 --micro-batch 1
plan interleaved --gpus 2 --pp 2 --virtual-stages 2 --tp 1 --cp 1 --micro-batch 1
model=$tmp/tiny4.yaml
train one8 one8
train pp4v2 pp4v2
train pp2 pp2 --measurements "$tmp/pp2.m.jsonl"
train pp2cp2 pp2cp2 --measurements "$tmp/pp2cp2.m.jsonl"
for name in pp2dp2 pp2tp2 pp2mb2 pp3; do train "$name" "$name"; done
train one_bf16 one --mixed-precision-param bfloat16
train pp2_bf16 pp2 --mixed-precision-param bfloat16

same_losses pp4v2:one8:1e-4 pp2:one:1e-4 pp2cp2:one:1e-4 pp2dp2:one:1e-4 pp2tp2:one:1e-4 pp2mb2:one:1e-4 pp3:one:1e-4 pp2_bf16:one_bf16:2e-3
for name in pp2 pp2cp2 pp2dp2 pp2tp2 pp2mb2; do
  grep -q "^  pp: 2$" "$tmp/$name.yaml" && grep -q "^  virtual_stages: 1$" "$tmp/$name.yaml" ||
    fail "the $name plan is not a 1F1B pipeline of 2 stages"
  grep -q "ranks = .*pp 2 (1F1B) x cp" "$tmp/$name.err" || fail "$name: the header does not say pp 2 (1F1B)"
done
grep -q "^  account_for_embedding_in_pipeline_split: true" "$tmp/pp3.yaml" || fail "the pp3 plan does not count the embedding"
grep -q "ranks = pp 4 (interleaved 1F1B, 2 virtual stages) x cp" "$tmp/pp4v2.err" || fail "pp4v2: the header does not say interleaved"
# 1F1B's first stage holds p micro-batches of its L/p layers: L layers' worth, as one rank
# without a pipeline holds (Korthikanti et al. 2022, Sec. 4.2.3; planner/pipeline_parallel.h).
echo "pp2: $(stored pp2); one rank: $(stored one)"
[[ -n $(stored pp2) && $(stored pp2) == "$(stored one)" ]] || fail "pp 2 stores other activations than one rank"

# The exchanges of pp 2 over 4 micro-batches, per step: the first stage sends each
# micro-batch's activation (with the next's gradient coming back in the steady state) and
# takes the last gradient; the last stage takes the first activation and sends each
# gradient: 5 exchanges on each, each message 128 tokens x 256 x 4 bytes.
python3 - "$tmp" $steps <<'PY' || fail "pipeline exchanges per step (above)"
import collections, json, sys
tmp, steps = sys.argv[1], int(sys.argv[2])
n, msgs = collections.Counter(), collections.Counter()
for line in open(f"{tmp}/pp2.m.jsonl"):
    r = json.loads(line)
    if r["kind"] == "pp_exchange":
        n[r["rank"]] += 1
        msgs[r["rank"]] += r["bytes"] / (128 * 256 * 4)
per = {rank: n[rank] / steps for rank in sorted(n)}
print(f"pp2: exchanges per step by rank {per}, messages per step {dict((k, v / steps) for k, v in sorted(msgs.items()))}")
sys.exit(0 if per == {0: 5, 1: 5} and msgs[0] / steps == 8 and msgs[1] / steps == 8 else 1)
PY
# FSDP over each stage's pair (pp2cp2): a micro-batch gathers each block for its forward and
# again for its backward, the embedding (first stage) or the head (last) once: 5 a
# micro-batch, 20 a step; no prefetch guessed across a chunk's end, where the next step is
# another micro-batch's.
python3 - "$tmp" $steps <<'PY' || fail "FSDP all-gathers of a pipeline stage (above)"
import collections, json, sys
tmp, steps = sys.argv[1], int(sys.argv[2])
n = collections.Counter(json.loads(l)["rank"] for l in open(f"{tmp}/pp2cp2.m.jsonl") if '"all_gather"' in l)
per = {rank: n[rank] / steps for rank in sorted(n)}
print(f"pp2cp2: FSDP all-gathers per step by rank {per} (want 20 each)")
sys.exit(0 if per == {0: 20, 1: 20, 2: 20, 3: 20} else 1)
PY

# The measured trace of a pipelined step shows each stage's exchanges and its FSDP
# collectives as the time blocked in them.
timeout 120 "$bin" run --plan "$tmp/pp2cp2.yaml" --iters 1 --trace "$tmp/pp.trace.json" --timeout-s 30 \
  >/dev/null 2>&1 || fail "run --trace of the pp2cp2 step plan"
for want in '"name":"pipeline exchange"' '"name":"all-gather"' '"name":"reduce-scatter"' '"name":"attention_forward"'; do
  grep -q "$want" "$tmp/pp.trace.json" || fail "the pipelined step's trace has no $want event"
done

# run --verify of a pipelined step (4 ranks: 2 stages x a ring of 2).
out=$(timeout 120 "$bin" run --plan "$tmp/pp2cp2.yaml" --verify --iters 1 --timeout-s 30 2>&1)
grep -q "verification of step 1 against a one-rank fp64 reference: OK" <<<"$out" ||
  fail "run --verify of the pp2cp2 step plan: $(tail -3 <<<"$out")"

# A checkpoint written by the pipelined ranks after 4 steps, resumed on one rank for the last 4.
resumes_on_one_rank pp2cp2 one

# A stage sending micro-batch 1's activation where micro-batch 0's belongs, in step 2.
RINGMASTER_FAULT=pp-order:rank=0,step=2 timeout 120 "$bin" train --plan "$tmp/pp2.yaml" --data "$data" --steps 3 \
  --seed 7 --format json >"$tmp/fault.jsonl" 2>"$tmp/fault.err"
rc=$?
echo "pp-order fault: exit $rc; $(grep -m1 'message contract broken' "$tmp/fault.err")"
[[ $rc -ne 0 && $rc -ne 124 ]] || fail "the run with a stage sending the wrong micro-batch exited $rc"
grep -q "message contract broken on link 0 -> 1, message 4: the sender posted tag 1 .*the receiver expects tag 0" \
  "$tmp/fault.err" || fail "no message naming the link and both tags: $(tail -3 "$tmp/fault.err")"
[[ $(grep -c '"step"' "$tmp/fault.jsonl") -eq 1 ]] || fail "the faulty run printed $(grep -c '"step"' "$tmp/fault.jsonl") steps, want 1"

# The interleaved schedule with pp 2 is priced, not run.
timeout 60 "$bin" train --plan "$tmp/interleaved.yaml" --data "$data" --steps 1 >"$tmp/out" 2>"$tmp/err"
rc=$?
[[ $rc -eq 2 ]] || fail "train of an interleaved pp 2 plan exited $rc, want 2"
grep -q "plan.virtual_stages: the interleaved 1F1B schedule (virtual_stages 2) is generated for pp > 2" "$tmp/err" ||
  fail "the refusal does not name plan.virtual_stages: $(cat "$tmp/err")"
# A pipeline whose order leaves a stage's GPUs (edited by hand) is bad input, named before
# any rank starts.
sed 's/^  order: \[0, 1, 2, 3\]/  order: [0, 2, 1, 3]/' "$tmp/pp2cp2.yaml" >"$tmp/bad-order.yaml"
timeout 60 "$bin" train --plan "$tmp/bad-order.yaml" --data "$data" --steps 1 >"$tmp/out" 2>"$tmp/err"
rc=$?
[[ $rc -eq 2 ]] || fail "train of a pipeline with a stage-crossing order exited $rc, want 2"
grep -q "bad-order.yaml: order: with pp > 1 the order must be the tp-cp-dp-pp rank order" "$tmp/err" ||
  fail "the refusal does not name the order: $(cat "$tmp/err")"
echo "train_pipeline_parallel: $failures failed"
[[ $failures -eq 0 ]]
