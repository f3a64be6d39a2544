#!/usr/bin/env bash
# Tensor parallelism through the real binary: the issue's done-when job (Llama 3 70B, 128K
# tokens, 256 H100s) splits its heads inside the nodes (every kind searched: a2a+p2p 8x8 at
# tp 1 leads), and among p2p rings picks TP inside the nodes and says why (text and JSON), --tp pins
# and refusals (exit 2, one line), a TP plan file simulated and exported with Megatron's
# TP flags, and refused by `run`. Usage: plan_tensor_parallel.sh <ringmaster> <source-dir>.
# Exit 77 = skipped.
set -u
bin=$1
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.bash"
need python3 "needed to parse the JSON"

# ---- the done-when job ---------------------------------------------------------------------
job=(--model llama3-70b --topology dgx-h100-ib --gpus 256 --seq 128K)
"$bin" plan "${job[@]}" --format json >"$tmp/any.json" 2>"$tmp/err" || fail "plan ${job[*]} exited $?: $(tail -3 "$tmp/err")"
python3 - "$tmp/any.json" <<'EOF' || fail "plan ${job[*]} does not split the heads inside a node"
import json, sys
c = json.load(open(sys.argv[1]))["plan"]
split = c["tp"] * (c["hierarchical_context_parallel_sizes"][0] if c["cp_comm_type"] == "a2a+p2p" else 1)
assert 1 < split and 8 % split == 0, c
EOF
job+=(--cp-comm-type p2p)
out=$("$bin" plan "${job[@]}" 2>"$tmp/err") || fail "plan ${job[*]} exited $?: $(tail -3 "$tmp/err")"
grep -Eq "^tp x cp x pp x dp +[248] x " <<<"$out" || fail "plan ${job[*]} picks no TP inside a node: $(grep '^tp x' <<<"$out")"
grep -q "^why tp" <<<"$out" || fail "plan ${job[*]} does not say why TP (no 'why tp' table)"
grep -q "^best with tp 1" <<<"$out" || fail "plan ${job[*]}: the 'why tp' table lacks the best tp 1 plan"
"$bin" plan "${job[@]}" --format json >"$tmp/plan.json" 2>"$tmp/err" || fail "plan --format json exited $?"
python3 - "$tmp/plan.json" <<'EOF' || fail "done-when JSON (see above)"
import json, sys
p = json.load(open(sys.argv[1]))
c, w = p["plan"], p.get("without_tp")
errors = []
if not (1 < c["tp"] <= 8): errors.append(f"tp {c['tp']}, want 2..8 (inside a node)")
if c["tp"] * c["cp"] * c["dp"] != 256: errors.append("tp x cp x dp != 256")
if not p["predicted"]["fits"]: errors.append("the plan does not fit")
if w is None: errors.append("no without_tp")
elif w["fits"] and w["tokens_per_s"] >= p["predicted"]["tokens_per_s"]:
    errors.append(f"without_tp is as fast ({w['tokens_per_s']} >= {p['predicted']['tokens_per_s']})")
for e in errors: print("  " + e)
sys.exit(1 if errors else 0)
EOF

# ---- pins -------------------------------------------------------------------------------
"$bin" plan "${job[@]}" --tp 16 >"$tmp/out" 2>"$tmp/err"
rc=$?
[[ $rc -eq 2 ]] || fail "--tp 16 on 8-GPU nodes exited $rc, want 2"
grep -q "GPUs per node" "$tmp/err" || fail "--tp 16: message does not name the node: $(cat "$tmp/err")"
[[ $(wc -l <"$tmp/err") -eq 1 ]] || fail "--tp 16: message is not one line: $(cat "$tmp/err")"
"$bin" plan "${job[@]}" --tp 0 >"$tmp/out" 2>"$tmp/err"
[[ $? -eq 2 ]] || fail "--tp 0 did not exit 2"
"$bin" plan --model llama3-70b --topology dgx-h100-ib --gpus 24 --seq 32K --tp 16 >"$tmp/out" 2>"$tmp/err"
[[ $? -eq 2 ]] || fail "--tp 16 with --gpus 24 did not exit 2"

# ---- a TP plan file: simulated, exported, refused by run -------------------------------------
small=(--model llama2-7b --topology dgx-a100-ib --gpus 16 --seq 128K --tp 8 --cp 2 --cp-comm-type p2p --sharding fsdp)
"$bin" plan "${small[@]}" -o "$tmp/tp.yaml" >/dev/null 2>"$tmp/err" || fail "plan ${small[*]} -o exited $?: $(cat "$tmp/err")"
grep -q "^  tp: 8" "$tmp/tp.yaml" || fail "plan.yaml has no 'tp: 8'"
sim=$("$bin" simulate --plan "$tmp/tp.yaml" 2>"$tmp/err") || fail "simulate of a TP plan exited $?: $(tail -3 "$tmp/err")"
grep -q "^step time" <<<"$sim" || fail "simulate of a TP plan printed no step time"
meg=$("$bin" export --plan "$tmp/tp.yaml" --to megatron 2>"$tmp/err") || fail "export --to megatron exited $?: $(cat "$tmp/err")"
grep -q -- "--tensor-model-parallel-size 8" <<<"$meg" || fail "megatron export lacks --tensor-model-parallel-size 8"
grep -q -- "--sequence-parallel" <<<"$meg" || fail "megatron export lacks --sequence-parallel"
tt=$("$bin" export --plan "$tmp/tp.yaml" --to torchtitan 2>"$tmp/err") || fail "export --to torchtitan exited $?: $(cat "$tmp/err")"
grep -q "^tensor_parallel_degree = 8" <<<"$tt" || fail "torchtitan export lacks tensor_parallel_degree = 8"
"$bin" run --plan "$tmp/tp.yaml" --backend cuda >"$tmp/out" 2>"$tmp/err"
rc=$?
[[ $rc -eq 2 ]] || fail "run of a TP plan exited $rc, want 2"
grep -q "plan.tp" "$tmp/err" || fail "run of a TP plan: message does not name plan.tp: $(cat "$tmp/err")"

# ---- TP comm overlap: pinned both ways, in the plan file, simulated, exported, refused by run ----
"$bin" plan "${small[@]}" --tp-comm-overlap -o "$tmp/tpo.yaml" >"$tmp/out" 2>"$tmp/err" ||
  fail "plan --tp-comm-overlap exited $?: $(cat "$tmp/err")"
grep -q "^  tp_comm_overlap: true" "$tmp/tpo.yaml" || fail "plan.yaml of --tp-comm-overlap has no 'tp_comm_overlap: true'"
grep -q "^tp comm overlap  *on" "$tmp/out" || fail "plan --tp-comm-overlap does not say it is on"
"$bin" plan "${small[@]}" --no-tp-comm-overlap -o "$tmp/tpw.yaml" >/dev/null 2>"$tmp/err" || fail "plan --no-tp-comm-overlap exited $?"
grep -q "^  tp_comm_overlap: false" "$tmp/tpw.yaml" || fail "plan.yaml of --no-tp-comm-overlap has no 'tp_comm_overlap: false'"
sim=$("$bin" simulate --plan "$tmp/tpo.yaml" 2>"$tmp/err") || fail "simulate of an overlapped TP plan exited $?: $(tail -3 "$tmp/err")"
grep -q "^step time" <<<"$sim" || fail "simulate of an overlapped TP plan printed no step time"
"$bin" export --plan "$tmp/tpo.yaml" --to megatron 2>"$tmp/err" | grep -q -- "--tp-comm-overlap" ||
  fail "megatron export of an overlapped plan lacks --tp-comm-overlap"
"$bin" export --plan "$tmp/tpo.yaml" --to torchtitan 2>"$tmp/err" | grep -q "^enable_async_tensor_parallel = true" ||
  fail "torchtitan export of an overlapped plan lacks enable_async_tensor_parallel = true"
"$bin" export --plan "$tmp/tpw.yaml" --to megatron 2>"$tmp/err" | grep -q -- "--tp-comm-overlap" &&
  fail "megatron export of a waited plan has --tp-comm-overlap"
"$bin" run --plan "$tmp/tpo.yaml" --backend cuda >"$tmp/out" 2>"$tmp/err"
[[ $? -eq 2 ]] || fail "run of an overlapped TP plan did not exit 2"
for bad in "--tp-comm-overlap --no-tp-comm-overlap" "--tp 1 --tp-comm-overlap"; do
  # shellcheck disable=SC2086
  "$bin" plan --model llama2-7b --topology dgx-a100-ib --gpus 16 --seq 128K $bad >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [[ $rc -eq 2 ]] || fail "plan $bad exited $rc, want 2"
  grep -q -- "--tp-comm-overlap" "$tmp/err" || fail "plan $bad: message does not name --tp-comm-overlap: $(cat "$tmp/err")"
done
sed 's/^  tp_comm_overlap: true/  tp_comm_overlap: maybe/' "$tmp/tpo.yaml" >"$tmp/bad.yaml"
"$bin" simulate --plan "$tmp/bad.yaml" >"$tmp/out" 2>"$tmp/err"
[[ $? -eq 2 ]] || fail "a plan with tp_comm_overlap: maybe did not exit 2"
grep -q "plan.tp_comm_overlap: expected true or false" "$tmp/err" || fail "tp_comm_overlap: maybe: $(cat "$tmp/err")"

[[ $failures -eq 0 ]]
