#!/usr/bin/env bash
# `plan --fp8 RECIPE`: float8 linear layers priced at the GPU's fp8 rate (planner/
# linear_precision.h, as `validate --published` prices the corpus's fp8 runs). On H100 each
# recipe makes the linear layers, and the step, faster than bf16; the plan file keeps the
# recipe and `simulate` replays it within 2 %; export writes it as each framework spells it
# (torchtitan's float8 converter, Megatron-LM's --fp8-format hybrid --fp8-recipe) and Megatron
# refuses torchao's recipe, as plan --target does each framework's other recipes; a GPU
# without fp8 tensor cores, an unknown recipe, a calibrated profile and `run` refuse it (exit
# 2, naming --fp8 or fp8_recipe).
# Usage: plan_fp8.sh <ringmaster> <source-dir>.
set -u
bin=$1
src=$2
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.bash"
source "$(dirname "${BASH_SOURCE[0]}")/lib/expect_bad.bash"
need python3 "reads the JSON"
checked=0
job=(--model llama3-8b --topology dgx-h100-superpod --gpus 16 --seq 32k)

field() {  # field <json> <python expression over d>
  python3 -c "import json, sys; d = json.load(sys.stdin); print($2)" <<<"$1"
}
bf16=$("$bin" plan "${job[@]}" --format json) || fail "plan (bf16) exited $?"
[[ $(field "$bf16" 'd["fp8_recipe"]') == none ]] || fail "a bf16 plan's fp8_recipe is not none"
for recipe in tensorwise delayed current; do
  fp8=$("$bin" plan "${job[@]}" --fp8 $recipe --format json) || { fail "plan --fp8 $recipe exited $?"; continue; }
  checked=$((checked + 1))
  [[ $(field "$fp8" 'd["fp8_recipe"]') == "$recipe" ]] || fail "plan --fp8 $recipe: fp8_recipe not $recipe"
  faster=$(python3 -c '
import json, sys
a, b = json.loads(sys.argv[1])["predicted"], json.loads(sys.argv[2])["predicted"]
print(b["linear_compute_s"] < a["linear_compute_s"] and b["tokens_per_s"] > a["tokens_per_s"])' "$bf16" "$fp8")
  [[ $faster == True ]] || fail "plan --fp8 $recipe: linear layers or step not faster than bf16"
done
out=$("$bin" plan "${job[@]}" --fp8 delayed) || fail "plan --fp8 delayed (table) exited $?"
[[ $out == *"attention flash_attn_2, fp8 linear layers (delayed)"* ]] || fail "plan's header does not name fp8: $out"

# The plan file keeps it; simulate replays the fp8 step; export spells it per framework.
"$bin" plan "${job[@]}" --fp8 delayed -o "$tmp/delayed.yaml" >/dev/null 2>&1 || fail "plan --fp8 delayed -o exited $?"
grep -qx "fp8_recipe: delayed" "$tmp/delayed.yaml" || fail "the plan file has no fp8_recipe: delayed"
expect_simulate_agrees "$tmp/delayed.yaml" "an fp8 plan"
mega=$("$bin" export --plan "$tmp/delayed.yaml" --to megatron) || fail "export --to megatron exited $?"
[[ $mega == *"--bf16 --fp8-format hybrid --fp8-recipe delayed"* ]] || fail "Megatron's line lacks the fp8 flags: $mega"
"$bin" plan "${job[@]}" --fp8 current --target megatron -o "$tmp/current.yaml" >/dev/null 2>&1 ||
  fail "plan --fp8 current --target megatron exited $?"
[[ $("$bin" export --plan "$tmp/current.yaml" --to megatron) == *"--fp8-format hybrid --fp8-recipe tensorwise"* ]] ||
  fail "TE's current scaling is not Megatron-LM's --fp8-recipe tensorwise"
"$bin" plan "${job[@]}" --fp8 tensorwise --target torchtitan -o "$tmp/tensorwise.yaml" >/dev/null 2>&1 ||
  fail "plan --fp8 tensorwise --target torchtitan exited $?"
titan=$("$bin" export --plan "$tmp/tensorwise.yaml" --to torchtitan) || fail "export --to torchtitan exited $?"
[[ $titan == *$'[model]\nconverters = ["float8"]'* ]] || fail "torchtitan's config lacks the float8 converter: $titan"
expect_bad "Megatron-LM's fp8 is Transformer Engine's" "fp8_recipe" -- export --plan "$tmp/tensorwise.yaml" --to megatron

# Refusals.
expect_bad "torchtitan's float8 is torchao's tensorwise scaling (got delayed)" "--fp8" -- plan "${job[@]}" --fp8 delayed --target torchtitan
expect_bad "Megatron-LM's fp8 is Transformer Engine's" "--fp8" -- plan "${job[@]}" --fp8 tensorwise --target megatron
expect_bad "prices no fp8 linear layers" "--fp8" -- plan --model llama3-8b --topology dgx-a100-ib --gpus 16 --seq 32k --fp8 delayed
expect_bad "expected one of tensorwise, delayed, current (got 'e4m3')" "--fp8" -- plan "${job[@]}" --fp8 e4m3
echo "format: 1" >"$tmp/profile.yaml"
expect_bad "not with a calibrated profile" "fp8_recipe" -- simulate --plan "$tmp/delayed.yaml" --profile "$tmp/profile.yaml"
expect_run_refusal "$tmp/delayed.yaml" "fp8_recipe: the executor's linear layers run in fp32 or bf16, not float8" \
  "an fp8 plan"

echo "plan_fp8: $checked checks, $failures failed"
[[ $failures -eq 0 ]]
