#!/usr/bin/env bash
# Data-parallel sharding levels through the real binary: each --sharding pin gives a plan
# whose JSON and plan file carry it (hsdp with torchtitan's two degrees), simulate replays
# it, the exports write each framework's flags, a bad value or plan key exits 2 naming it,
# and `train` runs a zero1 plan as ZeRO-1.
# Usage: plan_sharding.sh <ringmaster> <source-dir>. Exit 77 = skipped.
set -u
bin=$1
src=$2
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.bash"
source "$(dirname "${BASH_SOURCE[0]}")/lib/expect_bad.bash"
need python3 "needed to parse the JSON"
checked=0
job=(--model llama2-7b --topology dgx-a100-ib --gpus 16 --seq 8K --tp 1 --pp 1 --cp 1 --checkpointing full)  # pp 1: a pipeline would fit ddp

for s in ddp zero1 zero2 fsdp hsdp; do
  checked=$((checked + 1))
  # ddp's 16 B/param do not fit in 80 GB: exit 1, and the message says by how much.
  "$bin" plan "${job[@]}" --sharding $s --format json >"$tmp/$s.json" 2>"$tmp/$s.err"
  rc=$?
  want=0
  [[ $s == ddp ]] && want=1
  [[ $rc -eq $want ]] || { fail "plan --sharding $s exited $rc (want $want): $(tail -2 "$tmp/$s.err")"; continue; }
  [[ $s == ddp ]] && { grep -q "GiB over; ddp's model states" "$tmp/$s.err" || fail "ddp's misfit does not say by how much"; }
  python3 - "$tmp/$s.json" $s <<'PY' || fail "plan --sharding $s: JSON (above)"
import json, sys
j = json.load(open(sys.argv[1]))
p = j["plan"]
assert p["sharding"] == sys.argv[2], p["sharding"]
if sys.argv[2] == "hsdp":
    assert p["data_parallel_shard_degree"] * p["data_parallel_replicate_degree"] == p["dp"], p
else:
    assert "data_parallel_shard_degree" not in p, p
PY
done
python3 - "$tmp" <<'PY' || fail "model states do not fall ddp > zero1 > zero2 > fsdp (above)"
import json, sys
m = {s: json.load(open(f"{sys.argv[1]}/{s}.json"))["predicted"]["memory_gib"]["model_states"]
     for s in ("ddp", "zero1", "zero2", "fsdp")}
assert m["ddp"] > m["zero1"] > m["zero2"] > m["fsdp"], m
PY

checked=$((checked + 1))
"$bin" plan "${job[@]}" --sharding hsdp -o "$tmp/hsdp.yaml" >/dev/null 2>"$tmp/err" || fail "plan -o hsdp exited $?"
grep -q "^  sharding: hsdp" "$tmp/hsdp.yaml" || fail "plan file lacks sharding: hsdp"
grep -q "^  data_parallel_shard_degree: 8" "$tmp/hsdp.yaml" || fail "plan file lacks data_parallel_shard_degree: 8"
sim=$("$bin" simulate --plan "$tmp/hsdp.yaml" 2>"$tmp/err") || fail "simulate of an hsdp plan exited $?: $(tail -2 "$tmp/err")"
grep -q "^step time" <<<"$sim" || fail "simulate of an hsdp plan printed no step time"
tt=$("$bin" export --plan "$tmp/hsdp.yaml" --to torchtitan 2>&1) || fail "torchtitan export of hsdp exited $?: $tt"
grep -q "data_parallel_replicate_degree = 2" <<<"$tt" || fail "torchtitan export lacks replicate degree 2"
grep -q "data_parallel_shard_degree = 8" <<<"$tt" || fail "torchtitan export lacks shard degree 8"
expect_bad "hsdp" "plan.sharding" -- export --plan "$tmp/hsdp.yaml" --to megatron

"$bin" plan "${job[@]}" --sharding zero1 -o "$tmp/zero1.yaml" >/dev/null 2>&1 || fail "plan -o zero1 failed"
checked=$((checked + 1))
mg=$("$bin" export --plan "$tmp/zero1.yaml" --to megatron 2>&1) || fail "megatron export of zero1 exited $?: $mg"
grep -q -- "--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather" <<<"$mg" ||
  fail "megatron export of zero1 lacks --use-distributed-optimizer: $mg"
grep -q -- "--use-megatron-fsdp" <<<"$mg" && fail "megatron export of zero1 uses Megatron-FSDP"
expect_bad "no zero1" "plan.sharding" -- export --plan "$tmp/zero1.yaml" --to torchtitan
"$bin" plan "${job[@]}" --sharding zero2 -o "$tmp/zero2.yaml" >/dev/null 2>&1 || fail "plan -o zero2 failed"
checked=$((checked + 1))
mg=$("$bin" export --plan "$tmp/zero2.yaml" --to megatron 2>&1) || fail "megatron export of zero2 exited $?"
grep -q -- "--data-parallel-sharding-strategy optim_grads " <<<"$mg" || fail "megatron export of zero2 lacks optim_grads"

expect_bad "ddp, zero1, zero2, fsdp, hsdp" "--sharding" -- plan "${job[@]}" --sharding zero3
sed 's/^  sharding: zero1/  sharding: zero4/' "$tmp/zero1.yaml" >"$tmp/bad.yaml"
expect_bad "zero4" "plan.sharding" -- simulate --plan "$tmp/bad.yaml"
sed 's/^  sharding: zero1/  sharding: zero1\n  data_parallel_shard_degree: 2/' "$tmp/zero1.yaml" >"$tmp/bad2.yaml"
expect_bad "only with sharding hsdp" "data_parallel_shard_degree" -- simulate --plan "$tmp/bad2.yaml"
"$bin" plan --model tiny --topology cpu-local --gpus 2 --cp 2 --seq 256 --batch-tokens 1024 --sharding zero1 \
  -o "$tmp/tiny.yaml" >/dev/null 2>&1 || fail "plan of tiny zero1 failed"
# train runs the level the plan names (tests/e2e/train_equivalence.sh checks its losses).
checked=$((checked + 1))
"$bin" train --plan "$tmp/tiny.yaml" --data "$src/data/public_domain.txt" --steps 1 >"$tmp/train.out" 2>&1 ||
  fail "train of a zero1 plan exited $?: $(tail -2 "$tmp/train.out")"
grep -q "(ZeRO-1:" "$tmp/train.out" || fail "train of a zero1 plan does not say ZeRO-1"

echo "plan_sharding: $checked checks, $failures failed"
[[ $failures -eq 0 ]]
