#!/usr/bin/env bash
# `ringmaster run` of a step plan: whole training steps of the plan's model and layout on
# synthetic tokens (1 untimed + --iters timed), the measured mean step
# time printed beside the prediction, the ring attention's records written (and accepted
# by calibrate --from); --verify passes against a one-rank fp64 reference of the first
# step's loss and gradients; validate refuses step plans and run a layer plan (exit 2).
# Usage: run_step.sh <ringmaster> <source-dir>.
set -u
bin=$1
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.bash"
need mpirun "run starts MPI ranks"
"$bin" plan --model tiny --topology cpu-local --gpus 2 --cp 2 --seq 256 --batch-tokens 512 \
  --micro-batch 1 -o "$tmp/step.yaml" >/dev/null 2>&1 || fail "plan of a step failed"
grep -q "^workload: step" "$tmp/step.yaml" || fail "the plan is not a step plan"
if out=$("$bin" run --plan "$tmp/step.yaml" --iters 2 --measurements "$tmp/m.jsonl" 2>&1); then
  echo "$out"
  grep -q "# planner predicted [0-9.]* ms per step; measured [0-9.]* ms" <<<"$out" ||
    fail "no predicted-vs-measured line"
  [[ $(grep -c '^ *[0-9]\+  ' <<<"$out") -eq 3 ]] || fail "want 3 step rows (1 warm-up + 2)"
  grep -q '"kind":"attention_backward"' "$tmp/m.jsonl" || fail "no attention records in m.jsonl"
else
  fail "run of a step plan exited non-zero: $out"
fi
# The records feed calibrate (its attention terms); validate refuses step plans.
"$bin" calibrate --from "$tmp/m.jsonl" -o "$tmp/profile.yaml" >/dev/null 2>&1 ||
  fail "calibrate --from the step run's measurements failed"
out=$("$bin" validate --profile "$tmp/profile.yaml" "$tmp/step.yaml" 2>&1)
rc=$?
[[ $rc -eq 2 && $out == *"step.yaml: workload: validate compares attention plans only"* ]] ||
  fail "validate of a step plan: exit $rc: $out"
out=$("$bin" run --plan "$tmp/step.yaml" --iters 1 --verify 2>&1)
rc=$?
[[ $rc -eq 0 && $out == *"verification of step 1 against a one-rank fp64 reference: OK"* ]] ||
  fail "--verify of a step plan: exit $rc: $out"
grep -E "dlayers.1.feed_forward.w2|verification" <<<"$out"
sed 's/^workload: step/workload: layer/' "$tmp/step.yaml" >"$tmp/layer.yaml"
out=$("$bin" run --plan "$tmp/layer.yaml" 2>&1)
rc=$?
[[ $rc -eq 2 && $out == *"layer.yaml: workload"* ]] || fail "layer plan: exit $rc: $out"
echo "run_step: $failures failed"
[[ $failures -eq 0 ]]
