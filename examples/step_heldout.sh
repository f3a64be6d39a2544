#!/usr/bin/env bash
# Whole-step closed loop on this machine: run a few training-step plans of the tiny model
# (`ringmaster run`: forward, backward, FSDP collectives, AdamW on synthetic tokens), fit the
# cost model's step terms from their records (`calibrate --from`: attention kernel, GEMM,
# elementwise and optimizer rates, links), then predict held-out step plans (other
# sequence lengths, ring sizes, checkpointing policies, micro-batches, and tensor
# and pipeline parallelism, which no fitted run had: TP's collectives are priced with the
# fit of FSDP's, a pipeline's exchanges with the links' and its bubble by the 1F1B program)
# and compare with what they measure (`validate`, median of the timed steps).
#
# Usage: examples/step_heldout.sh [ringmaster] [out-dir]
#   ringmaster  the binary (default: ringmaster on PATH)
#   out-dir     where the profile, plans and measurements go (default: step-heldout)
# Environment: ITERS (timed steps per run, default 3), FORMAT=table|json (validate's output).
#
# Needs Open MPI (mpirun) and 2 cores; 16-30 s at ITERS=3. As root, start it in its own
# scheduler autogroup at nice -10 (BENCHMARKS.md, "Calibration (closed loop)").
set -euo pipefail
rm_bin=${1:-ringmaster}
out=${2:-step-heldout}
iters=${ITERS:-3}
mkdir -p "$out"

# plan <name> <options...>: a step plan of the tiny model on 2 ranks, 1024 tokens per step
# (tp 1 unless the options say --tp).
plan() {
  local name=$1
  shift
  local tp=(--tp 1)
  [[ " $* " == *" --tp "* ]] && tp=()
  "$rm_bin" plan --model tiny --topology cpu-local --gpus 2 "${tp[@]}" --sharding fsdp --batch-tokens 1024 "$@" \
    -o "$out/$name.yaml" >/dev/null
}

echo "== fit set: run, then calibrate --from their records"
fit=(seq256-cp2 seq512-dp2 seq512-cp2-full)
plan seq256-cp2      --seq 256 --cp 2 --micro-batch 1 --checkpointing none
plan seq512-dp2      --seq 512 --cp 1 --micro-batch 1 --checkpointing none
plan seq512-cp2-full --seq 512 --cp 2 --micro-batch 1 --checkpointing full
records=()
for name in "${fit[@]}"; do
  "$rm_bin" run --plan "$out/$name.yaml" --iters "$iters" --measurements "$out/$name.jsonl" >/dev/null
  records+=("$out/$name.jsonl")
done
"$rm_bin" calibrate --from "${records[@]}" -o "$out/profile.yaml"

echo "== held-out step plans"
held=()
heldout() {
  plan "$@"
  held+=("$out/$1.yaml")
}
heldout seq384-cp2            --seq 384  --cp 2 --micro-batch 1 --checkpointing none
heldout seq768-cp2-selective  --seq 768  --cp 2 --micro-batch 1 --checkpointing selective
heldout seq256-cp2-mb2        --seq 256  --cp 2 --micro-batch 2 --checkpointing none
heldout seq1k-cp2-full        --seq 1k   --cp 2 --micro-batch 1 --checkpointing full
heldout seq256-dp2-mb2-sel    --seq 256  --cp 1 --micro-batch 2 --checkpointing selective
heldout seq512-dp2-full       --seq 512  --cp 1 --micro-batch 1 --checkpointing full
heldout seq512-tp2            --seq 512  --cp 1 --micro-batch 1 --checkpointing none --tp 2 --no-tp-comm-overlap
heldout seq256-tp2-mb2-sel    --seq 256  --cp 1 --micro-batch 2 --checkpointing selective --tp 2 --no-tp-comm-overlap
heldout seq256-pp2            --seq 256  --cp 1 --micro-batch 1 --checkpointing none --pp 2 --virtual-stages 1
heldout seq512-pp2-full       --seq 512  --cp 1 --micro-batch 1 --checkpointing full --pp 2 --virtual-stages 1
printf '%s\n' "${held[@]}"

echo "== validate (predicted vs measured, median of $iters steps)"
"$rm_bin" validate --profile "$out/profile.yaml" --iters "$iters" --format "${FORMAT:-table}" \
  --keep-measurements "$out" "${held[@]}"
