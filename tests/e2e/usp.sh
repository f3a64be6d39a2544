#!/usr/bin/env bash
# a2a+p2p (Megatron's hierarchical context parallelism, USP) through the real binary: the
# pin (--cp-comm-type a2a+p2p, and the split as --hierarchical-context-parallel-sizes A B)
# gives a plan whose JSON and plan file carry the split; a bad split exits 2 naming the
# option; Megatron's export carries both flags, torchtitan's is refused; simulate replays
# it (its op lists: all-to-all inside each node, ring across) within 2 % of the planner,
# with tensor parallelism too; run refuses it on GPUs by name (exit 2): the cpu backend runs
# a2a+p2p (tests/e2e/run_verify.sh, train_equivalence.sh).
# Usage: usp.sh <ringmaster> <source-dir>. Exit 77 = skipped.
set -u
bin=$1
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.bash"
source "$(dirname "${BASH_SOURCE[0]}")/lib/expect_bad.bash"
need python3 "needed to parse the JSON"
checked=0
job=(--model llama3-8b --topology dgx-h100-ib --gpus 64 --seq 512k)

checked=$((checked + 1))
"$bin" plan "${job[@]}" --cp-comm-type a2a+p2p --format json >"$tmp/any.json" 2>"$tmp/any.err" ||
  fail "plan --cp-comm-type a2a+p2p exited $?: $(tail -2 "$tmp/any.err")"
python3 - "$tmp/any.json" <<'PY' || fail "a2a+p2p plan JSON"
import json, sys
p = json.load(open(sys.argv[1]))["plan"]
a, r = p["hierarchical_context_parallel_sizes"]
assert p["cp_comm_type"] == "a2a+p2p" and p["strategy"] == "usp" and a * r == p["cp"] and a >= 2 and r >= 2, p
PY

checked=$((checked + 1))
"$bin" plan "${job[@]}" --hierarchical-context-parallel-sizes 8 4 --sharding fsdp -o "$tmp/p.yaml" >"$tmp/p.txt" 2>&1 ||
  fail "plan --hierarchical-context-parallel-sizes 8 4 exited $?: $(tail -2 "$tmp/p.txt")"
grep -q "hierarchical_context_parallel_sizes: \[8, 4\]" "$tmp/p.yaml" || fail "plan file lacks the split [8, 4]"
grep -q "hierarchical cp sizes *8x4" "$tmp/p.txt" || fail "plan table lacks the split 8x4"
checked=$((checked + 1))
"$bin" export --plan "$tmp/p.yaml" --to megatron 2>"$tmp/m.err" |
  grep -q -- "--context-parallel-size 32 --cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 8 4" ||
  fail "megatron export lacks --cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 8 4: $(cat "$tmp/m.err")"
checked=$((checked + 1))
"$bin" export --plan "$tmp/p.yaml" --to megatron 2>/dev/null | grep -q "ranks 8 apart form the p2p ring of 4" ||
  fail "megatron export does not say which ranks form the a2a groups and the ring"

expect_bad "no a2a+p2p plan" "--hierarchical-context-parallel-sizes 16 2" -- plan "${job[@]}" --hierarchical-context-parallel-sizes 16 2
expect_bad "divide --gpus" "--hierarchical-context-parallel-sizes" -- plan "${job[@]}" --hierarchical-context-parallel-sizes 3 8
expect_bad "two sizes" "--hierarchical-context-parallel-sizes" -- plan "${job[@]}" --hierarchical-context-parallel-sizes 8
expect_bad "a2a+p2p's split" "--hierarchical-context-parallel-sizes" -- plan "${job[@]}" --cp-comm-type a2a --hierarchical-context-parallel-sizes 8 4
expect_bad "--cp 16" "--hierarchical-context-parallel-sizes" -- plan "${job[@]}" --cp 16 --hierarchical-context-parallel-sizes 8 4
expect_bad "a2a+p2p" "torchtitan" -- export --plan "$tmp/p.yaml" --to torchtitan
expect_bad "runs on the cpu backend only" "cp_comm_type p2p (the ring) or all_gather; a2a+p2p" -- run --plan "$tmp/p.yaml" --backend cuda

# simulate replays the pinned split, and a split with tensor parallelism (tp 2 x a2a 4 in a
# node, a ring of 4 nodes), within 2 % of the planner's step time.
"$bin" plan "${job[@]}" --tp 2 --hierarchical-context-parallel-sizes 4 4 -o "$tmp/tp.yaml" >"$tmp/tp.txt" 2>&1 ||
  fail "plan --tp 2 --hierarchical-context-parallel-sizes 4 4 exited $?: $(tail -2 "$tmp/tp.txt")"
for plan in p tp; do
  checked=$((checked + 1))
  "$bin" simulate --plan "$tmp/$plan.yaml" --format json >"$tmp/sim_$plan.json" 2>"$tmp/sim_$plan.err" ||
    { fail "simulate --plan $plan.yaml exited $?: $(tail -2 "$tmp/sim_$plan.err")"; continue; }
  python3 - "$tmp/sim_$plan.json" <<'PY' || fail "simulate of the a2a+p2p plan $plan.yaml"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["plan"]["cp_comm_type"] == "a2a+p2p", d["plan"]
pred, sim = d["predicted"]["step_time_s"], d["simulated"]["step_time_s"]
assert abs(sim - pred) / pred < 0.02, (pred, sim)
PY
done
checked=$((checked + 1))
"$bin" simulate --plan "$tmp/p.yaml" 2>/dev/null | grep -q "a2a+p2p 8x4 (all-to-all inside a node, flat ring across)" ||
  fail "simulate's header does not name the split"

echo "usp: $checked checks, $failures failed"
[[ $failures -eq 0 ]]
