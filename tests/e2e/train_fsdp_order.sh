#!/usr/bin/env bash
# FSDP's collectives keep the order NCCL needs (executor/shard_collectives.h): a rank that
# all-gathers the wrong unit (RINGMASTER_FAULT=fsdp-unit, a same-size collective that
# MPI and NCCL both run without complaint, corrupting the others' parameters) is named by
# the step's order check, and every rank exits non-zero instead of training on; the same
# run without the fault trains all its steps. And the order across communicators
# (executor/post_log.h): a rank that posts its FSDP prefetches after the ring transfers
# the others post them before (RINGMASTER_FAULT=comm-order: the same collectives in the
# same order on each communicator, which MPI completes and NCCL can hang on) is named by
# the step's check of every rank's posts.
# Usage: train_fsdp_order.sh <ringmaster> <source-dir>.
set -u
bin=$1
src=$2
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.bash"
need mpirun "train runs MPI ranks"
data=$src/data/public_domain.txt
"$bin" plan --model tiny --topology cpu-local --seq 128 --batch-tokens 256 --gpus 2 --cp 2 \
  --micro-batch 1 --sharding fsdp -o "$tmp/plan.yaml" >/dev/null || fail "plan failed"
train() { timeout 120 "$bin" train --plan "$tmp/plan.yaml" --data "$data" --steps 3 --seed 3 --format json; }

train >"$tmp/clean.jsonl" 2>"$tmp/clean.err" || fail "the run without a fault failed: $(tail -2 "$tmp/clean.err")"
[[ $(grep -c '"step"' "$tmp/clean.jsonl") -eq 3 ]] || fail "the run without a fault did not print 3 steps"
grep -q "collectives over mpi" "$tmp/clean.err" || fail "the header does not name the collectives' transport"

RINGMASTER_FAULT=fsdp-unit:rank=1,step=2 train >"$tmp/fault.jsonl" 2>"$tmp/fault.err"
rc=$?
echo "fsdp-unit fault: exit $rc; $(grep -m1 'out of order' "$tmp/fault.err")"
[[ $rc -ne 0 ]] || fail "the run with a rank gathering the wrong unit exited 0"
[[ $rc -ne 124 ]] || fail "the run with a rank gathering the wrong unit hung"
grep -q "FSDP collectives out of order: rank 1 of the shard group" "$tmp/fault.err" ||
  fail "no message naming rank 1: $(tail -3 "$tmp/fault.err")"
# Step 1 ran before the fault; step 2's check stops the run before its optimizer step.
[[ $(grep -c '"step"' "$tmp/fault.jsonl") -eq 1 ]] || fail "the faulty run printed $(grep -c '"step"' "$tmp/fault.jsonl") steps, want 1"

RINGMASTER_FAULT=comm-order:rank=1,step=2 train >"$tmp/order.jsonl" 2>"$tmp/order.err"
rc=$?
echo "comm-order fault: exit $rc; $(grep -m1 'no one order' "$tmp/order.err")"
[[ $rc -ne 0 && $rc -ne 124 ]] || fail "the run with a rank posting its all-gathers late exited $rc"
grep -q "no one order of posts across communicators serves every rank (NCCL may hang): rank [01] posts .*collective [0-9]* of FSDP shard group of ranks 0,1.*ring link" "$tmp/order.err" ||
  fail "no message naming the FSDP collective and the ring message: $(tail -3 "$tmp/order.err")"
grep -q "out of order" "$tmp/order.err" && fail "the per-communicator check fired: the fault should keep each communicator's order"
[[ $(grep -c '"step"' "$tmp/order.jsonl") -eq 1 ]] || fail "the run with late all-gathers printed $(grep -c '"step"' "$tmp/order.jsonl") steps, want 1"
echo "train_fsdp_order: $failures failed"
[[ $failures -eq 0 ]]
