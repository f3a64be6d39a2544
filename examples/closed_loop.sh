#!/usr/bin/env bash
# Closed loop on this machine: calibrate the cost model with micro-benchmarks, make a set of
# held-out plans (sequence lengths, tile sizes, load balances, masks, transfer granularity and
# degrees the benchmarks never ran), run them and compare the calibrated prediction with what
# they measure.
#
# Usage: examples/closed_loop.sh [ringmaster] [out-dir]
#   ringmaster  the binary (default: ringmaster on PATH)
#   out-dir     where the profile, plans and measurements go (default: closed-loop)
# Environment: GRID=small|full (calibration grid, default full), ITERS (timed iterations per
# run, default 5), FORMAT=table|json (validate's output).
#
# Needs Open MPI (mpirun) and 2 cores; 25-95 s with the full grid, by machine. Other work on the same
# cores slows kernels 2-3x at random (the timed figures are medians, but that still shows up
# as error); as root, start it in its own scheduler autogroup at nice -10 (BENCHMARKS.md):
#   setsid bash -c 'echo -10 > /proc/self/autogroup; exec examples/closed_loop.sh ...'
set -euo pipefail
rm_bin=${1:-ringmaster}
out=${2:-closed-loop}
grid=${GRID:-full}
iters=${ITERS:-5}
mkdir -p "$out"

echo "== calibrate (micro-benchmarks: kernels, GEMMs, memory copies, ring exchange, overlap; 2 ranks)"
"$rm_bin" calibrate --backend cpu --np 2 --model tiny --topology cpu-local --grid "$grid" \
  -o "$out/profile.yaml"

# Held-out plans: 2 ranks of this machine, the tiny model, context-parallel attention forward +
# backward: the ring (p2p), all_gather and a2a.
plans=()
plan() {
  local name=$1
  shift
  "$rm_bin" plan --model tiny --topology cpu-local --gpus 2 --tp 1 --workload attention \
    --profile "$out/profile.yaml" "$@" -o "$out/$name.yaml" >/dev/null
  plans+=("$out/$name.yaml")
}
echo "== plans"
plan seq1k-t32-contiguous     --seq 1k   --cp 2 --block-q 32  --block-kv 32  --load-balance contiguous
plan seq1536-t96x48-striped   --seq 1536 --cp 2 --block-q 96  --block-kv 48  --load-balance striped
plan seq2k-t64-zigzag         --seq 2k   --cp 2 --block-q 64  --block-kv 64  --load-balance zigzag
plan seq2k-t64-zigzag-sub4    --seq 2k   --cp 2 --block-q 64  --block-kv 64  --load-balance zigzag --kv-subblocks 4
plan seq2k-t32x128-full       --seq 2k   --cp 2 --block-q 32  --block-kv 128 --no-causal
plan seq3k-t128-striped       --seq 3k   --cp 2 --block-q 128 --block-kv 128 --load-balance striped
plan seq3k-t48-contiguous     --seq 3k   --cp 2 --block-q 48  --block-kv 48  --load-balance contiguous
plan seq4k-t128x64-zigzag     --seq 4k   --cp 2 --block-q 128 --block-kv 64  --load-balance zigzag
plan seq2k-dp2-t64            --seq 2k   --cp 1 --block-q 64  --block-kv 64
plan seq1k-t16x64-full        --seq 1k   --cp 2 --block-q 16  --block-kv 64  --no-causal
plan seq2k-t64-allgather      --seq 2k   --cp 2 --block-q 64  --block-kv 64  --cp-comm-type all_gather
plan seq2k-t64-a2a            --seq 2k   --cp 2 --block-q 64  --block-kv 64  --cp-comm-type a2a
printf '%s\n' "${plans[@]}"

echo "== validate (predicted vs measured, median of $iters iterations)"
"$rm_bin" validate --profile "$out/profile.yaml" --iters "$iters" --format "${FORMAT:-table}" \
  --keep-measurements "$out" "${plans[@]}"
