#!/usr/bin/env bash
# Adam's states as Megatron-Core's precision-aware optimizer keeps them (plan.h
# OptimizerStates): `plan --store-param-remainders` (2 bytes of master a parameter, NeMo's
# apex optimizer under bf16 O2) and --exp-avg-dtype / --exp-avg-sq-dtype shrink the model
# states by the bytes saved over the optimizer's shard; the plan file keeps them, simulate
# replays them, Megatron's export spells them (--use-precision-aware-optimizer ...), and
# torchtitan, `run` of fp16 or fp8 states or of one bf16 moment (the executor runs both in
# fp32 or both in bf16: train_optimizer_states.sh), bad dtypes and an fp16 master with remainders are refused
# (exit 2); a plan that fits only with them says so.
# Usage: plan_optimizer_states.sh <ringmaster> <source-dir>.
set -u
bin=$1
src=$2
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.bash"
source "$(dirname "${BASH_SOURCE[0]}")/lib/expect_bad.bash"
need python3 "reads the JSON"
checked=0
# Pinned, so both plans are the same plan: zero1 over the 16 GPUs of each TP rank.
pinned=(--model llama3-8b --topology dgx-h100-superpod --gpus 16 --tp 1 --cp 1 --pp 1 --sharding zero1)
job=("${pinned[@]}" --seq 32k)

plain=$("$bin" plan "${job[@]}" --format json) || fail "plan (fp32 states) exited $?"
small=$("$bin" plan "${job[@]}" --store-param-remainders --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 --format json) ||
  fail "plan --store-param-remainders --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 exited $?"
saved=$(python3 -c '
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
keys = ("main_params_dtype", "store_param_remainders", "exp_avg_dtype", "exp_avg_sq_dtype")
assert [a[k] for k in keys] == ["fp32", False, "fp32", "fp32"], [a[k] for k in keys]
assert [b[k] for k in keys] == ["fp32", True, "bf16", "bf16"], [b[k] for k in keys]
# 12 -> 6 bytes a parameter over the 16 GPUs holding the optimizer shards: 6 / 16 bytes a parameter.
psi = 8.03e9
got = a["predicted"]["memory_gib"]["model_states"] - b["predicted"]["memory_gib"]["model_states"]
print(abs(got / (6 * psi / 16 / 2**30) - 1) < 0.01, got)' "$plain" "$small" 2>&1)
checked=$((checked + 1))
[[ $saved == True* ]] || fail "the model states did not shrink by 6 bytes a parameter over 16 GPUs: $saved"
out=$("$bin" plan "${job[@]}" --store-param-remainders) || fail "plan --store-param-remainders (table) exited $?"
checked=$((checked + 1))
[[ $out == *"optimizer states"*"master as the 16 bits its bf16 param lacks, fp32 exp_avg and exp_avg_sq: 10 bytes a parameter (precision-aware optimizer)"* ]] ||
  fail "the plan table does not state the optimizer states: $out"

# The plan file keeps them; simulate replays them; Megatron's export spells them.
"$bin" plan "${pinned[@]}" --seq 8k --target megatron --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 -o "$tmp/bf16.yaml" >/dev/null 2>&1 ||
  fail "plan --target megatron --exp-avg-dtype bf16 -o exited $?"
grep -qx "exp_avg_dtype: bf16" "$tmp/bf16.yaml" || fail "the plan file has no exp_avg_dtype: bf16"
expect_simulate_agrees "$tmp/bf16.yaml" "the plan"
mega=$("$bin" export --plan "$tmp/bf16.yaml" --to megatron) || fail "export --to megatron exited $?"
checked=$((checked + 1))
[[ $mega == *"--use-distributed-optimizer"*"--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 --no-store-param-remainders"* ]] ||
  fail "Megatron's line lacks the precision-aware optimizer's flags: $mega"

# A plan that does not fit with fp32 states says whether the precision-aware optimizer would
# make it fit, and that plan does; not where the states cannot go (torchtitan's AdamW, a ddp
# plan), nor when they are already reduced.
long=(--model llama3-70b --topology dgx-h100-ib --gpus 64 --seq 2600k)
pa=(--store-param-remainders --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16)
"$bin" plan "${long[@]}" >/dev/null 2>"$tmp/nofit.err"
rc=$?
checked=$((checked + 1))
[[ $rc -eq 1 ]] && grep -q "does not fit in GPU memory" "$tmp/nofit.err" &&
  grep -Eq "with Megatron-Core's precision-aware optimizer \(${pa[*]}: 6 bytes of Adam state a parameter, not 12\) it fits in [0-9.]+ GiB at [0-9]+ tokens/s" "$tmp/nofit.err" ||
  fail "a plan that fits only with reduced Adam states (rc $rc) did not say so: $(cat "$tmp/nofit.err")"
checked=$((checked + 1))
"$bin" plan "${long[@]}" --format json 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)
w = d["fits_with_precision_aware_optimizer"]
assert not d["predicted"]["fits"] and w["options"] == "--store-param-remainders --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16", w
assert 0 < w["memory_gib_per_gpu"] <= 79.6, w  # an 80 GB H100 holds 79.6 GiB (topologies/dgx-h100-ib.yaml)
assert w["tokens_per_s"] > 0, w' || fail "plan --format json of a plan that fits only with reduced states lacks fits_with_precision_aware_optimizer"
checked=$((checked + 1))
"$bin" plan "${long[@]}" "${pa[@]}" >"$tmp/fits.out" 2>&1 && grep -Eq "^fits +yes" "$tmp/fits.out" ||
  fail "the suggested plan does not fit: $(grep -E '^(fits|memory per GPU)' "$tmp/fits.out")"
checked=$((checked + 1))
"$bin" plan "${long[@]}" --target torchtitan >/dev/null 2>"$tmp/titan.err"
grep -q "precision-aware" "$tmp/titan.err" && fail "a torchtitan plan was offered Megatron's optimizer: $(cat "$tmp/titan.err")"
checked=$((checked + 1))
# The executor runs them (train_optimizer_states.sh), with any sharding: a plan for it
# (--target slurm: no TP or PP on the cuda backend) that fits only so says so in its words.
"$bin" plan --model llama3-70b --topology dgx-h100-ib --gpus 16 --seq 128k --target slurm >/dev/null 2>"$tmp/slurm.err"
grep -Eq "with the precision-aware optimizer's states, which ringmaster train keeps \(${pa[*]}: 6 bytes of Adam state a parameter, not 12\) it fits in [0-9.]+ GiB" "$tmp/slurm.err" ||
  fail "a plan for the executor that fits only with reduced states did not say so: $(cat "$tmp/slurm.err")"
checked=$((checked + 1))
# ddp keeps the optimizer whole, which Megatron's precision-aware optimizer does not run with
# (the same plan with reduced states would fit: 69.0 GiB).
"$bin" plan --gpus 64 --seq 8K --tp 1 --cp 1 --pp 1 --sharding ddp >/dev/null 2>"$tmp/ddp.err"
grep -q "does not fit" "$tmp/ddp.err" && ! grep -q "precision-aware" "$tmp/ddp.err" ||
  fail "a ddp plan that does not fit: $(cat "$tmp/ddp.err")"
checked=$((checked + 1))
"$bin" plan "${long[@]/2600k/4m}" "${pa[@]}" >/dev/null 2>"$tmp/still.err"
grep -q "does not fit" "$tmp/still.err" && ! grep -q "with Megatron-Core's precision-aware" "$tmp/still.err" ||
  fail "a plan with reduced states that does not fit: $(cat "$tmp/still.err")"

# Refusals.
expect_bad "torchtitan's AdamW keeps fp32 master params and moments" "--target" -- plan "${job[@]}" --store-param-remainders --target torchtitan
expect_bad "torchtitan's AdamW keeps fp32" "optimizer states" -- export --plan "$tmp/bf16.yaml" --to torchtitan
expect_bad "the executor's AdamW keeps fp32 master params (or their remainders) and both moments in fp32 or both in bf16 (the plan keeps master fp32, exp_avg fp8, exp_avg_sq fp32" "--target" -- plan "${job[@]}" --exp-avg-dtype fp8 --target slurm
expect_bad "both moments in fp32 or both in bf16 (the plan keeps master fp32, exp_avg bf16, exp_avg_sq fp32" "--target" -- plan "${job[@]}" --exp-avg-dtype bf16 --target slurm
checked=$((checked + 1))
"$bin" plan "${job[@]}" --store-param-remainders --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 --target slurm >/dev/null 2>"$tmp/slurm.err" ||
  fail "plan --target slurm with remainders and bf16 moments (which the executor runs) exited $?: $(tail -2 "$tmp/slurm.err")"
expect_bad "expected one of fp32, fp16, bf16, fp8 (got 'fp4')" "--exp-avg-dtype" -- plan "${job[@]}" --exp-avg-dtype fp4
expect_bad "expected one of fp32, fp16 (got 'bf16')" "--main-params-dtype" -- plan "${job[@]}" --main-params-dtype bf16
expect_bad "needs main_params_dtype fp32" "--store-param-remainders" -- plan "${job[@]}" --main-params-dtype fp16 --store-param-remainders
sed 's/^exp_avg_dtype: bf16$/exp_avg_dtype: int8/' "$tmp/bf16.yaml" >"$tmp/bad.yaml"
expect_bad "expected one of fp32, fp16, bf16, fp8 (got 'int8')" "exp_avg_dtype" -- simulate --plan "$tmp/bad.yaml"
sed 's/^exp_avg_sq_dtype: bf16$/exp_avg_sq_dtype: fp16/' "$tmp/bf16.yaml" >"$tmp/fp16.yaml"
expect_run_refusal "$tmp/fp16.yaml" "exp_avg_sq fp16; Transformer Engine scales fp16 and fp8 states per tensor" \
  "a plan with fp16 moments"

echo "plan_optimizer_states: $checked checks, $failures failed"
[[ $failures -eq 0 ]]
