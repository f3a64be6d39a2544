#!/usr/bin/env bash
# `ringmaster train` of a plan with Megatron-Core's precision-aware optimizer's bf16 moments
# (plan --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16; executor/fsdp.h): the header says so,
# each rank's model state is 12 bytes a parameter instead of 16 (fp32 params and grads, bf16
# moments), every AdamW moment in the checkpoint is a bf16 value (its low 16 bits zero, as
# Transformer Engine's FusedAdam stores it), where the fp32 plan's are not, the two runs'
# weights differ while their losses stay within 1 % of each other, and resuming from the
# checkpoint follows the uninterrupted run's losses exactly.
# Usage: train_optimizer_states.sh <ringmaster> <source-dir>.
set -u
bin=$1
src=$2
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.bash"
need mpirun "train runs MPI ranks"
need python3 "reads the checkpoints"
data=$src/data/public_domain.txt
job=(--model tiny --topology cpu-local --seq 128 --batch-tokens 256 --gpus 2 --cp 2 --micro-batch 1 --sharding fsdp)
"$bin" plan "${job[@]}" -o "$tmp/fp32.yaml" >/dev/null || fail "plan (fp32 states) failed"
"$bin" plan "${job[@]}" --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 -o "$tmp/bf16.yaml" >/dev/null ||
  fail "plan --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 failed"
train() { timeout 300 "$bin" train --data "$data" --seed 3 --format json "$@"; }

for s in fp32 bf16; do
  train --plan "$tmp/$s.yaml" --steps 6 --checkpoint-dir "$tmp/ck-$s" --checkpoint-every 3 >"$tmp/$s.jsonl" \
    2>"$tmp/$s.err" || fail "train of the $s plan failed: $(tail -2 "$tmp/$s.err")"
done
grep -q "AdamW's exp_avg and exp_avg_sq kept in bf16" "$tmp/bf16.err" ||
  fail "the header does not say the moments are kept in bf16: $(grep '^#' "$tmp/bf16.err")"
grep -q "kept in bf16" "$tmp/fp32.err" && fail "the fp32 plan's header says its moments are bf16"

cp -r "$tmp/ck-bf16" "$tmp/ck-resume"
rm -rf "$tmp/ck-resume/step-00000006"
train --plan "$tmp/bf16.yaml" --steps 6 --checkpoint-dir "$tmp/ck-resume" --resume >"$tmp/resumed.jsonl" \
  2>"$tmp/resumed.err" || fail "resuming the bf16 plan from step 3 failed: $(tail -2 "$tmp/resumed.err")"

python3 - "$tmp" <<'PY' || fail "(above)"
import json, re, struct, sys
tmp = sys.argv[1]
def state_mib(s):
    return float(re.search(r"# per rank: model state ([0-9.]+) MiB", open(f"{tmp}/{s}.err").read()).group(1))
ratio = state_mib("bf16") / state_mib("fp32")
print(f"model state per rank: {state_mib('fp32')} MiB with fp32 moments, {state_mib('bf16')} MiB with bf16: {ratio:.4f}")
assert abs(ratio - 0.75) < 0.001, "bf16 moments should hold 12 bytes a parameter where fp32 ones hold 16"
def moments(s):
    raw = open(f"{tmp}/ck-{s}/step-00000006/optimizer.bin", "rb").read()
    return struct.unpack(f"<{len(raw) // 4}I", raw)
def losses(name):
    return {r["step"]: r["loss"] for r in (json.loads(l) for l in open(f"{tmp}/{name}.jsonl") if l.strip())}
half = moments("bf16")
full = moments("fp32")
not_bf16 = sum(1 for x in half if x & 0xFFFF)
print(f"moments: {len(half)} values, {not_bf16} not bf16 (bf16 plan); "
      f"{sum(1 for x in full if x & 0xFFFF)} not bf16 (fp32 plan)")
assert not_bf16 == 0, "the bf16 plan's checkpoint holds moments that are not bf16 values"
assert sum(1 for x in full if x & 0xFFFF) > len(full) // 2, "the fp32 plan's moments look rounded too"
a = open(f"{tmp}/ck-bf16/step-00000006/model.bin", "rb").read()
b = open(f"{tmp}/ck-fp32/step-00000006/model.bin", "rb").read()
assert a != b, "the two plans trained the same weights: the moments were not rounded"
lb, lf = losses("bf16"), losses("fp32")
worst = max(abs(lb[k] / lf[k] - 1) for k in lf)
print(f"losses over 6 steps: worst relative difference bf16 vs fp32 moments {worst:.2e}")
assert worst < 0.01, "bf16 moments moved the loss by more than 1 %"
resumed = losses("resumed")
assert sorted(resumed) == [4, 5, 6], sorted(resumed)
assert all(resumed[k] == lb[k] for k in resumed), (resumed, lb)
PY
echo "train_optimizer_states: $failures failed"
[[ $failures -eq 0 ]]
