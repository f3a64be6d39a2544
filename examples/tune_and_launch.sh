#!/usr/bin/env bash
# Auto-tune then launch, on this machine's CPU cores (2 MPI ranks, the tiny model):
#   tune     calibrates this machine first (no --profile given, local hardware), plans with
#            the profile, prints the pick and its runners-up, writes plan.yaml
#   run      launches the plan under mpirun and checks the numerics against an fp64 reference
#   validate runs it again and prints predicted vs measured step time
#
# Usage: examples/tune_and_launch.sh [ringmaster] [out-dir]   (about a minute; needs mpirun)
set -euo pipefail
rm_bin=${1:-ringmaster}
out=${2:-tune-and-launch}
mkdir -p "$out"

echo "== tune (calibrates first: $out/plan.profile.yaml)"
"$rm_bin" tune --model tiny --topology cpu-local --gpus 2 --seq 2k --grid small -o "$out/plan.yaml"
echo
echo "== run the tuned plan (verified)"
"$rm_bin" run --plan "$out/plan.yaml" --iters 3 --verify
echo
echo "== validate: predicted vs measured"
"$rm_bin" validate --profile "$out/plan.profile.yaml" "$out/plan.yaml"
