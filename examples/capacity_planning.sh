#!/usr/bin/env bash
# Capacity planning: will a model fit at a sequence length on a cluster, how fast, and which
# ring-attention plan to launch; then the longest sequence that fits, and a sweep over GPU
# counts and lengths. Planning only (closed-form cost and memory model): runs in a second.
#
# Usage: examples/capacity_planning.sh [ringmaster] [profile.yaml]
#   profile.yaml  optional calibrated costs (`ringmaster calibrate`); a profile made on other
#                 hardware than the topology's draws a warning.
set -euo pipefail
rm_bin=${1:-ringmaster}
profile=()
[[ $# -ge 2 ]] && profile=(--profile "$2")
job=(--model llama2-7b --topology dgx-a100-ib "${profile[@]}")

echo "== 512K tokens on 64 A100s: the plan, its predicted step, memory and the baselines"
"$rm_bin" plan "${job[@]}" --gpus 64 --seq 512k -o plan-512k.yaml
echo
echo "== the longest sequence that fits on 64 A100s"
"$rm_bin" plan "${job[@]}" --gpus 64 --max-seq
echo
echo "== sweep: 16..128 GPUs x 128K..1M tokens (fits, throughput, MFU, exposed communication)"
"$rm_bin" sweep "${job[@]}" --gpus 16,32,64,128 --seqs 128k,256k,512k,1M
