#!/usr/bin/env bash
# Whole-step simulation at production scale: Llama 3 8B at 256K tokens on the DGX H100
# SuperPOD (topologies/dgx-h100-superpod.yaml), 2M-token batch (BATCH), for each GPU count: the
# plan `ringmaster plan` picks (PIN=1: pinned to ring cp = G/8 x dp 8, flat, snake, zigzag,
# the case the fast mode's ring-step folding is for: at 4,096 GPUs the planner's own ring
# is contiguous, 512 tokens a GPU, whose causal steps differ by position and do not fold),
# written to a file, then `simulate --plan` under
# /usr/bin/time -v (wall time, CPU time and peak resident memory of the whole command,
# SimGrid's child included), in the fast mode and, where asked, with --full. Figures:
# BENCHMARKS.md ("Simulation at scale").
#
# Usage: bench/simulate_scale.sh <ringmaster> [gpu counts, default "256 1024 4096 16384"]
#        FULL="256 1024" to also time --full at those counts; TIMEOUT (s, default 1200)
#        bounds each run (a row that hits it says so).
#        Without PIN the rows are the planner's own picks. At 16,384 GPUs without tensor
#        parallelism that is a two-level ring 512 x 32 (dp 32), the case of the 60 s
#        target; its 32 rings need 32 sequences, so `BATCH=8M PLAN_OPTS="--tp 1"
#        bench/simulate_scale.sh build-h/bin/ringmaster 16384` (with tp searched the pick
#        is tp 8 x all_gather cp 32 x dp 64, which leaves rings idle at 8M and `plan` exits
#        1). BATCH (default 2M) is the global batch in tokens; PLAN_OPTS adds plan options;
#        the plan search is not timed (~30-60 s of CPU at 16,384 GPUs). PIN=1 pins tp 1.
set -euo pipefail
rm_bin=$1
counts=${2:-256 1024 4096 16384}
full=" ${FULL:-} "
limit=${TIMEOUT:-1200}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
job=(--model llama3-8b --topology dgx-h100-superpod --seq 256k --batch-tokens "${BATCH:-2M}")

measure() {  # measure <label> <gpus> <simulate options...>: one table row
  local label=$1 g=$2
  shift 2
  local rc=0
  /usr/bin/time -v -o "$tmp/time" timeout "$limit" "$rm_bin" simulate --plan "$tmp/plan-$g.yaml" "$@" \
    --format json >"$tmp/sim.json" 2>"$tmp/err" || rc=$?
  local wall mem cpu
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$tmp/time")
  # CPU seconds (user + system, SimGrid's child included): what the run costs when the
  # machine is shared, as it is for these figures.
  cpu=$(awk -F': ' '/User time/ {u = $2} /System time/ {s = $2} END {printf "%.1f", u + s}' "$tmp/time")
  mem=$(awk -F': ' '/Maximum resident set size/ {printf "%.2f", $2 / 1048576}' "$tmp/time")
  if [[ $rc -ne 0 ]]; then
    printf '%6d  %-5s  %10s  %7s s  %8s GiB  (exit %d%s)\n' "$g" "$label" "$wall" "$cpu" "$mem" "$rc" \
      "$([[ $rc -eq 124 ]] && echo ": over ${limit} s")"
    return
  fi
  python3 - "$tmp/sim.json" "$g" "$label" "$wall" "$mem" "$cpu" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
s = d["simulated"]
p = d["plan"]
print(f"{sys.argv[2]:>6}  {sys.argv[3]:<5}  {sys.argv[4]:>10}  {sys.argv[6]:>7} s  {sys.argv[5]:>8} GiB  "
      f"{p['schedule']} {p['cp']} x {p['dp']}: step {s['step_time_s']:.4f} s, "
      f"memory {s['memory_gib_per_gpu']:.3f} GiB/GPU, {s['simulation']['ops']} ops, "
      f"{s['simulation']['activities']} activities; {s['note']}")
EOF
}

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) (the machine is shared)"
echo "  GPUs  mode         wall        CPU      peak RSS  (ringmaster $(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null || echo '?'))"
for g in $counts; do
  # The plan search is not what is timed (18 s of CPU at 16,384 GPUs, BENCHMARKS.md).
  pins=()
  [[ ${PIN:-0} == 1 ]] && pins=(--tp 1 --cp $((g / 8)) --schedule flat --order snake --load-balance zigzag)
  # shellcheck disable=SC2206  # PLAN_OPTS is a list of options
  extra=(${PLAN_OPTS:-})
  "$rm_bin" plan "${job[@]}" --gpus "$g" "${pins[@]}" "${extra[@]}" -o "$tmp/plan-$g.yaml" >/dev/null 2>&1
  measure fast "$g"
  if [[ $full == *" $g "* ]]; then measure full "$g" --full; fi
done
