#!/usr/bin/env bash
# The cuda backend runs every ring schedule and verifies it: `ringmaster run --backend
# cuda --verify` for flat and bidirectional rings (contiguous, striped, zigzag; causal and
# not; GQA and MHA; sub-blocked transfers), the two-level ring (two 8-GPU nodes; the old
# spelling hierarchical once) and all-gather CP (--cp-comm-type all_gather).
# On a machine with fewer GPUs than ranks the ranks share them through the local
# transport (executor/cuda/local_transport.h), so one GPU runs all of it. Last, a ring with
# two receives swapped must stop with the message contract's error (local transport).
# Usage: cuda_ring.sh <ringmaster> <source-dir>. Exit 77 = skipped (no GPU, or a build
# without the cuda backend).
set -u
bin=$1
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  echo "skipped: no CUDA device"
  exit 77
fi
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.bash"
probe=$("$bin" run --plan "$tmp/none.yaml" --backend cuda 2>&1)
if [[ $probe == *"built without the CUDA backend"* ]]; then
  echo "skipped: this ringmaster was built without the cuda backend"
  exit 77
fi

runs=0
# check <model> <gpus> <seq> <plan options...>
check() {
  local model=$1 gpus=$2 seq=$3
  shift 3
  local what="$model gpus=$gpus seq=$seq $*"
  runs=$((runs + 1))
  if ! "$bin" plan --model "$model" --topology dgx-h200-ib --gpus "$gpus" --cp "$gpus" \
      --seq "$seq" --workload attention "$@" -o "$tmp/plan.yaml" >"$tmp/plan.out" 2>&1; then
    echo "FAIL: plan $what: $(tail -3 "$tmp/plan.out")"
    failures=$((failures + 1))
    return
  fi
  if "$bin" run --plan "$tmp/plan.yaml" --backend cuda --iters 1 --verify >"$tmp/run.out" 2>&1 &&
      grep -q "verification: OK" "$tmp/run.out"; then
    echo "ok: $what: $(grep 'verification:' "$tmp/run.out")"
  else
    echo "FAIL: run $what:"
    tail -20 "$tmp/run.out"
    failures=$((failures + 1))
  fi
}

for schedule in flat bidirectional; do
  for lb in contiguous striped zigzag; do
    check tiny 4 1024 --schedule "$schedule" --load-balance "$lb" --causal
    check tiny 4 1024 --schedule "$schedule" --load-balance "$lb" --no-causal
  done
done
check tiny 3 768 --schedule flat --load-balance zigzag --causal
check tiny 4 1024 --schedule flat --load-balance zigzag --causal --kv-subblocks 2
check llama2-7b 2 2048 --schedule flat --load-balance zigzag --causal --block-q 64 --block-kv 64
check tiny 16 2048 --schedule two-level --load-balance zigzag --causal
check tiny 16 2048 --schedule hierarchical --load-balance contiguous --no-causal
# All-gather CP: the gathered K,V one block per position, the dK,dV reduce-scattered home.
check tiny 4 1024 --cp-comm-type all_gather --causal
check tiny 3 768 --cp-comm-type all_gather --no-causal

# The message contract is enforced on the GPU too: the local transport (a ring of 4 on one
# GPU) stops a ring whose rank 1 posts two receives in swapped order, naming the link.
runs=$((runs + 1))
"$bin" plan --model tiny --topology dgx-h200-ib --gpus 4 --cp 4 --seq 1024 --workload attention \
  --schedule flat --load-balance zigzag --causal -o "$tmp/plan.yaml" >"$tmp/plan.out" 2>&1
out=$(CUDA_VISIBLE_DEVICES=0 RINGMASTER_CUDA_TRANSPORT=local RINGMASTER_FAULT=swap:rank=1,step=1 \
      timeout 120 "$bin" run --plan "$tmp/plan.yaml" --backend cuda --iters 1 --timeout-s 30 2>&1)
rc=$?
if [[ $rc -ne 0 && $rc -ne 124 && $out =~ message\ contract\ broken\ on\ link\ [0-9]+\ -\>\ 1 ]]; then
  echo "ok: swapped receives stopped: $(grep -m1 -o 'message contract broken.*' <<<"$out")"
else
  fail "swapped receives on the local transport: exit $rc, no contract error: $(tail -5 <<<"$out")"
fi

echo "cuda ring: $runs runs, $failures failed"
[[ $failures -eq 0 ]]
