#!/usr/bin/env bash
# `ringmaster run` of a step plan: whole training steps of the plan's model and layout on
# synthetic tokens (1 untimed + --iters timed), the measured mean step
# time printed beside the prediction, the step's records written (ring attention, FSDP
# collectives, linear, elementwise, optimizer, step) and fitted by calibrate --from into
# every whole-step term; validate compares a step plan with its run; --verify passes
# against a one-rank fp64 reference of the first step's loss and gradients; validate and
# run refuse a layer plan (exit 2).
# Usage: run_step.sh <ringmaster> <source-dir>.
set -u
bin=$1
src=$2
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.bash"
need mpirun "run starts MPI ranks"
step_plan() {  # model, output
  "$bin" plan --model "$1" --topology cpu-local --gpus 2 --cp 2 --seq 256 --batch-tokens 512 \
    --micro-batch 1 --sharding fsdp -o "$2" >/dev/null 2>&1 || fail "plan of a step of $1 failed"
}
step_plan tiny "$tmp/step.yaml"
grep -q "^workload: step" "$tmp/step.yaml" || fail "the plan is not a step plan"
sed 's/^workload: step/workload: layer/' "$tmp/step.yaml" >"$tmp/layer.yaml"
# The run whose records calibrate fits: tiny with a 16K vocabulary, so the embedding's and
# head's reduce-scatters (16 MiB) are 7x a block's. With tiny's 1K (1 MiB against 2.3 MiB)
# both took one scheduler time slice (5-13 ms) when another job shared the two cores, the
# medians came out in the wrong order half the time, and calibrate rightly fitted nothing.
sed 's/^name: tiny/name: tiny-16k-vocab/; s/^vocab: .*/vocab: 16384/' "$src/models/tiny.yaml" >"$tmp/wide.yaml"
step_plan "$tmp/wide.yaml" "$tmp/fit.yaml"
if out=$("$bin" run --plan "$tmp/fit.yaml" --iters 2 --measurements "$tmp/m.jsonl" 2>&1); then
  echo "$out"
  grep -q "# planner predicted [0-9.]* ms per step; measured [0-9.]* ms" <<<"$out" ||
    fail "no predicted-vs-measured line"
  [[ $(grep -c '^ *[0-9]\+  ' <<<"$out") -eq 3 ]] || fail "want 3 step rows (1 warm-up + 2)"
  for kind in attention_backward all_gather reduce_scatter linear elementwise optimizer step; do
    grep -q "\"kind\":\"$kind\"" "$tmp/m.jsonl" || fail "no $kind records in m.jsonl"
  done
else
  fail "run of a step plan exited non-zero: $out"
fi
# The records feed calibrate (attention, GEMM, elementwise, optimizer, collectives); validate
# runs the step plan and compares.
"$bin" calibrate --from "$tmp/m.jsonl" -o "$tmp/profile.yaml" >/dev/null 2>&1 ||
  fail "calibrate --from the step run's measurements failed"
for key in hbm_bytes_per_s optimizer_bytes_per_s; do
  grep -q "$key:" "$tmp/profile.yaml" || fail "the profile has no fitted $key"
done
grep -q "^  optimizer:" "$tmp/profile.yaml" || fail "the profile has no optimizer fit"
# The FSDP collectives get their own fit: two unit sizes (blocks, embedding/head) of
# blocking reduce-scatters, and the share of all of them hidden.
grep -qE "^  collectives: \{alpha_s: [0-9.e+-]+, beta_bytes_per_s: [0-9.e+-]+, overlap: [0-9.e+-]+\}" \
  "$tmp/profile.yaml" || fail "the profile has no fitted collectives: $(grep collectives "$tmp/profile.yaml")"
# A plan priced with the profile does not claim the shipped constants' published record.
out=$("$bin" plan --model tiny --topology cpu-local --gpus 2 --seq 1k --profile "$tmp/profile.yaml" 2>&1)
[[ $out == *"track record: calibrated (--profile); published runs check the shipped constants only"* ]] ||
  fail "plan --profile: no calibrated track record line: $out"
out=$("$bin" validate --profile "$tmp/profile.yaml" "$tmp/step.yaml" --iters 2 --format json 2>/dev/null)
rc=$?
[[ $rc -eq 0 && $out == *'"measured_s"'* ]] || fail "validate of a step plan: exit $rc: $out"
echo "$out"
out=$("$bin" validate --profile "$tmp/profile.yaml" "$tmp/layer.yaml" 2>&1)
rc=$?
[[ $rc -eq 2 && $out == *"layer.yaml: workload: validate compares attention and step plans"* ]] ||
  fail "validate of a layer plan: exit $rc: $out"
out=$("$bin" run --plan "$tmp/step.yaml" --iters 1 --verify 2>&1)
rc=$?
[[ $rc -eq 0 && $out == *"verification of step 1 against a one-rank fp64 reference: OK"* ]] ||
  fail "--verify of a step plan: exit $rc: $out"
grep -E "dlayers.1.feed_forward.w2|verification" <<<"$out"
out=$("$bin" run --plan "$tmp/layer.yaml" 2>&1)
rc=$?
[[ $rc -eq 2 && $out == *"layer.yaml: workload"* ]] || fail "layer plan: exit $rc: $out"
echo "run_step: $failures failed"
[[ $failures -eq 0 ]]
