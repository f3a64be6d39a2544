#!/usr/bin/env bash
# Pipeline parallelism through the real binary: `plan --pp 4` prints the stages, the
# schedule and the bubble (text and JSON), --virtual-stages interleaves, pins that cannot
# work are refused in one line with exit 2, and a PP plan file is read back, exported with
# Megatron's and torchtitan's PP keys (Llama 3 405B's split, counting the embedding and the
# loss as layers, included); 1F1B, interleaved and counted-split plans are simulated (their op
# lists replayed on SimGrid, within 2 % of the prediction), an interleaved one with pp 2 is
# refused by `simulate --plan` naming virtual_stages (planning the job itself, `simulate`
# replays the best plan that is not one, saying so), and `run` refuses them naming the
# topology (the cpu backend runs CPU topologies; train_pipeline_parallel.sh runs pipelines
# there) or the TP overlap it cannot run, the interleaved one of pp 2 naming
# plan.virtual_stages (priced, not run).
# Usage: plan_pipeline_parallel.sh <ringmaster> <source-dir>. Exit 77 = skipped.
set -u
bin=$1
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.bash"
need python3 "needed to parse the JSON"

job=(--model llama3-70b --topology dgx-h100-ib --gpus 256 --seq 128K)
out=$("$bin" plan "${job[@]}" --pp 4 --virtual-stages 1 2>"$tmp/err") || fail "plan --pp 4 exited $?: $(tail -3 "$tmp/err")"
grep -Eq "^tp x cp x pp x dp +[0-9]+ x [0-9]+ x 4 x " <<<"$out" || fail "plan --pp 4: no pp 4 in $(grep '^tp x' <<<"$out")"
grep -q "^pipeline parallelism  *pp 4, 1F1B, 20 layers per stage" <<<"$out" || fail "plan --pp 4: no pipeline row: $out"
grep -q "^pipeline bubble" <<<"$out" || fail "plan --pp 4 prints no bubble"
"$bin" plan "${job[@]}" --pp 4 --virtual-stages 1 --format json >"$tmp/plan.json" 2>"$tmp/err" || fail "plan --pp 4 --format json exited $?"
python3 - "$tmp/plan.json" <<'EOF' || fail "--pp 4 JSON (see above)"
import json, sys
p = json.load(open(sys.argv[1]))
c, d = p["plan"], p["predicted"]
errors = []
if c["pp"] != 4 or c["virtual_stages"] != 1: errors.append(f"pp {c['pp']} virtual_stages {c['virtual_stages']}")
if c["tp"] * c["cp"] * c["dp"] * c["pp"] != 256: errors.append("tp x cp x dp x pp != 256")
m = c["grad_accum"]
# The bubble is (p-1)/(m+p-1) of the step with equal stages; the head makes the last slower.
want = 3 / (m + 3)
got = d["pp_bubble_s"] / d["step_time_s"]
if not (0.5 * want < got < 1.05 * want): errors.append(f"bubble {got:.4f} of the step, want about {want:.4f}")
if d["pp_p2p_s"] <= 0: errors.append("no pipeline transfers")
for e in errors: print("  " + e)
sys.exit(1 if errors else 0)
EOF
out=$("$bin" plan "${job[@]}" --pp 4 --virtual-stages 2 2>"$tmp/err") || fail "plan --virtual-stages 2 exited $?: $(tail -3 "$tmp/err")"
grep -q "Interleaved1F1B (2 virtual stages)" <<<"$out" || fail "--virtual-stages 2: no interleaved schedule: $(grep pipeline <<<"$out")"

# ---- a split that counts the embedding and the loss: Llama 3 405B's 126 layers on pp 16 ------
# 126 layers do not cut into 32 equal chunks; 128 units do (the paper's "one layer less" on
# the first and last stage). The search finds that cut, the plan file and both exports carry it.
l3=(--model llama3-405b --topology dgx-h100-superpod --gpus 2048 --seq 8K --tp 8 --pp 16 --virtual-stages 2 --batch-tokens 4M --target torchtitan)
out=$("$bin" plan "${l3[@]}" -o "$tmp/l3.yaml" 2>"$tmp/err") || fail "plan ${l3[*]} exited $?: $(tail -3 "$tmp/err")"
grep -q "^pipeline parallelism .*7-8 layers per stage (the split counts the embedding and the loss as a layer)" <<<"$out" ||
  fail "405B pp 16 x 2: no counted split in $(grep '^pipeline' <<<"$out")"
grep -q "^  account_for_embedding_in_pipeline_split: true" "$tmp/l3.yaml" && grep -q "^  account_for_loss_in_pipeline_split: true" "$tmp/l3.yaml" ||
  fail "plan.yaml does not carry the split's accounting"
"$bin" export --plan "$tmp/l3.yaml" --to megatron >"$tmp/meg" 2>"$tmp/err" || fail "export megatron (405B) exited $?: $(cat "$tmp/err")"
grep -q -- "--num-virtual-stages-per-pipeline-rank 2 --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split" "$tmp/meg" ||
  fail "megatron export lacks the split's flags: $(grep -- --pipeline "$tmp/meg")"
grep -q "^# .*violat" "$tmp/meg" && fail "megatron export of the counted split reports a rule violation: $(cat "$tmp/meg")"
"$bin" export --plan "$tmp/l3.yaml" --to torchtitan >"$tmp/tt" 2>"$tmp/err" || fail "export torchtitan (405B) exited $?: $(cat "$tmp/err")"
# One pipeline schedule runs the step's micro-batches: local batch = micro-batch x grad_accum.
local=$(( $(sed -n 's/^  grad_accum: //p' "$tmp/l3.yaml") * $(sed -n 's/^  micro_batch: //p' "$tmp/l3.yaml") ))
for want in "pipeline_parallel_first_stage_less_layers = 1" "pipeline_parallel_last_stage_less_layers = 1" \
  "pipeline_parallel_layers_per_stage = 4" "local_batch_size = $local"; do
  grep -qx "$want" "$tmp/tt" || fail "torchtitan export lacks '$want': $(grep pipeline "$tmp/tt")"
done
# torchtitan's pipeline keeps FSDP's weights gathered and a stage's grads unsharded (fp32) until
# the step's last micro-batch: a plan priced for it runs fsdp as zero1 (data_parallel.h's as_run)
# and says so; one priced for no framework is exported with a note of what it left out.
pp405=(--model llama3-405b --topology dgx-h100-superpod --gpus 512 --seq 8K --tp 8 --pp 8 --virtual-stages 1 --sharding fsdp
  --checkpointing full)
"$bin" plan "${pp405[@]}" --target torchtitan -o "$tmp/fsdp-pp.yaml" >"$tmp/out" 2>"$tmp/err" || fail "plan (405B, fsdp, pp 8) exited $?: $(tail -1 "$tmp/err")"
grep -q "^  runs as  *zero1 (PyTorch's pipeline keeps FSDP's weights gathered" "$tmp/out" ||
  fail "a torchtitan pipeline's fsdp plan does not say it runs as zero1: $(grep -n -A1 'priced for' "$tmp/out")"
"$bin" plan "${pp405[@]}" --target torchtitan --format json >"$tmp/fsdp-pp.json" 2>"$tmp/err" || fail "plan --format json (405B, pp 8) exited $?"
python3 - "$tmp/fsdp-pp.json" "$tmp/out" <<'PY' || fail "the torchtitan pipeline's fsdp plan: JSON and table disagree"
import json, re, sys
d = json.load(open(sys.argv[1]))
assert d["plan"]["sharding"] == "fsdp" and d["plan"]["sharding_as_run"] == "zero1", d["plan"]
table = open(sys.argv[2]).read()
mem = float(re.search(r"^memory per GPU +([0-9.]+)", table, re.M).group(1))
assert abs(d["predicted"]["memory_gib_per_gpu"] - mem) < 0.06, (d["predicted"]["memory_gib_per_gpu"], mem)
PY
"$bin" export --plan "$tmp/fsdp-pp.yaml" --to torchtitan >"$tmp/tt" 2>"$tmp/err" || fail "export torchtitan (fsdp, pp 8) exited $?"
# zero1 pinned for a torchtitan pipeline: refused (no such option), pointing at the fsdp it runs as.
"$bin" plan "${pp405[@]/fsdp/zero1}" -o "$tmp/z1-pp.yaml" >/dev/null 2>"$tmp/err" || fail "plan (405B, zero1, pp 8) exited $?"
"$bin" export --plan "$tmp/z1-pp.yaml" --to torchtitan >/dev/null 2>"$tmp/err"
[[ $? -eq 2 ]] && grep -q "its pipeline runs FSDP as zero1" "$tmp/err" ||
  fail "a pipelined zero1 plan's torchtitan export is not refused towards fsdp: $(cat "$tmp/err")"
grep -q "^# note: torchtitan's pipeline keeps" "$tmp/tt" && fail "a plan priced for torchtitan is exported with the unpriced-grads note"
"$bin" plan "${pp405[@]}" -o "$tmp/fsdp-pp-any.yaml" >"$tmp/out-any" 2>"$tmp/err" || fail "plan (405B, fsdp, pp 8, no target) exited $?"
grep -q "runs as" "$tmp/out-any" && fail "a plan priced for no framework says it runs as another level"
python3 - "$tmp/out" "$tmp/out-any" <<'PY' || fail "torchtitan's pipelined fsdp holds no more memory than fsdp priced for no framework"
import re, sys
mem = [float(re.search(r"^memory per GPU +([0-9.]+)", open(f).read(), re.M).group(1)) for f in sys.argv[1:]]
assert mem[0] > mem[1] + 5, mem  # gathered weights and fp32 grads of a 405B stage: tens of GiB
PY
"$bin" export --plan "$tmp/fsdp-pp-any.yaml" --to torchtitan >"$tmp/tt" 2>"$tmp/err" || fail "export torchtitan (fsdp, pp 8, no target) exited $?"
# Priced with bf16 gradients (no --target), exported with mixed_precision_reduce = "bfloat16".
grep -q "^# note: torchtitan's pipeline keeps a stage's gradients unsharded in bf16" "$tmp/tt" ||
  fail "torchtitan export of a pipelined fsdp plan priced for no framework lacks the unsharded-grads note: $(grep -n pipeline "$tmp/tt")"
# The plain split, pinned, cannot interleave them.
"$bin" plan "${l3[@]}" --no-account-for-embedding-in-pipeline-split --no-account-for-loss-in-pipeline-split >"$tmp/out" 2>"$tmp/err"
[[ $? -eq 2 ]] || fail "405B pp 16 x 2 with the plain split pinned did not exit 2"
grep -q "multiple of pp x virtual stages = 32" "$tmp/err" || fail "plain split refusal does not say why: $(cat "$tmp/err")"
# A 1F1B export of a plain split spells both counts 0 (torchtitan's default is 1 each).
"$bin" export --plan "$tmp/pp.yaml" --to torchtitan >"$tmp/tt" 2>"$tmp/err"
if [[ $? -eq 0 ]]; then
  grep -qx "pipeline_parallel_first_stage_less_layers = 0" "$tmp/tt" || fail "torchtitan export of a plain split lacks first_stage_less_layers = 0"
fi

# ---- pins that cannot work ----------------------------------------------------------------
expect_refusal() {  # expect_refusal <what the message must say> <plan args...>
  local want=$1
  shift
  "$bin" plan "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  [[ $rc -eq 2 ]] || fail "plan $* exited $rc, want 2"
  grep -q -- "$want" "$tmp/err" || fail "plan $*: message lacks '$want': $(cat "$tmp/err")"
  [[ $(wc -l <"$tmp/err") -eq 1 ]] || fail "plan $*: message is not one line: $(cat "$tmp/err")"
}
expect_refusal "must divide --gpus 256" "${job[@]}" --pp 3
expect_refusal "leaves a stage without layers" "${job[@]}" --pp 128
expect_refusal "needs --pp > 1" "${job[@]}" --pp 1 --virtual-stages 2
expect_refusal "needs --pp > 1" "${job[@]}" --pp 1 --account-for-loss-in-pipeline-split
expect_refusal "got both" "${job[@]}" --pp 4 --account-for-loss-in-pipeline-split --no-account-for-loss-in-pipeline-split
# 16 sequences over dp 16 pipelines: one micro-batch each, no multiple of pp 2.
expect_refusal "multiple of pp 2" "${job[@]}" --pp 2 --virtual-stages 2 --tp 8 --cp 1
expect_refusal "step workloads" "${job[@]}" --pp 2 --workload layer

# ---- a PP plan file ---------------------------------------------------------------------------
"$bin" plan "${job[@]}" --pp 4 --virtual-stages 2 --cp-comm-type p2p -o "$tmp/pp.yaml" >/dev/null 2>"$tmp/err" || fail "plan -o exited $?: $(cat "$tmp/err")"
grep -q "^  pp: 4" "$tmp/pp.yaml" || fail "plan.yaml has no 'pp: 4'"
grep -q "^  virtual_stages: 2" "$tmp/pp.yaml" || fail "plan.yaml has no 'virtual_stages: 2'"
"$bin" export --plan "$tmp/pp.yaml" --to megatron >"$tmp/meg" 2>"$tmp/err" || fail "export megatron exited $?: $(cat "$tmp/err")"
grep -q -- "--pipeline-model-parallel-size 4 --num-virtual-stages-per-pipeline-rank 2" "$tmp/meg" ||
  fail "megatron export lacks PP 4 with 2 virtual stages: $(cat "$tmp/meg")"
"$bin" run --plan "$tmp/pp.yaml" >"$tmp/out" 2>"$tmp/err"
[[ $? -eq 2 ]] || fail "run of a PP plan did not exit 2"
grep -Eq "topology: the cpu backend runs plans made for a CPU topology|plan.tp_comm_overlap" "$tmp/err" ||
  fail "run's refusal does not name the topology or the TP overlap: $(cat "$tmp/err")"

# ---- 1F1B and interleaved plans, simulated ------------------------------------------------
# llama2-7b at 32K on one 8-GPU box, every op list replayed: pp 2 x a p2p ring of 4 with 4
# micro-batches (1F1B), pp 4 x 2 virtual stages x a ring of 2 with 8 (interleaved).
small=(--model llama2-7b --topology a100-nvlink-box --gpus 8 --seq 32K --cp-comm-type p2p)
simulate_pp() {  # simulate_pp <name> <header text> <run's refusal> <plan args...>
  local name=$1 header=$2 refusal=$3
  shift 3
  "$bin" plan "${small[@]}" "$@" -o "$tmp/$name.yaml" >/dev/null 2>"$tmp/err" ||
    fail "plan $* -o exited $?: $(cat "$tmp/err")"
  "$bin" simulate --plan "$tmp/$name.yaml" --format json >"$tmp/sim.json" 2>"$tmp/err" ||
    fail "simulate of the $name plan exited $?: $(tail -3 "$tmp/err")"
  python3 - "$tmp/sim.json" "$name" <<'EOF' || fail "simulated $name plan (see above)"
import json, sys
j = json.load(open(sys.argv[1]))
pred, sim = j["predicted"], j["simulated"]
errors = []
err = abs(sim["step_time_s"] / pred["step_time_s"] - 1)
print(f"{sys.argv[2]}: step {sim['step_time_s']:.4g} s simulated, {pred['step_time_s']:.4g} s predicted ({100 * err:.2f} %)")
if err > 0.02: errors.append("more than 2 % apart")
if "identical layers" in sim["note"]: errors.append(f"note '{sim['note']}': a pipeline replays every layer")
for e in errors: print("  " + e)
sys.exit(1 if errors else 0)
EOF
  "$bin" simulate --plan "$tmp/$name.yaml" >"$tmp/out" 2>"$tmp/err" || fail "simulate (text) of the $name plan exited $?"
  grep -qF "$header" "$tmp/out" || fail "simulate's header does not show the pipeline: $(head -1 "$tmp/out")"
  "$bin" run --plan "$tmp/$name.yaml" >"$tmp/out" 2>"$tmp/err"
  [[ $? -eq 2 ]] || fail "run of the $name plan did not exit 2"
  grep -q "$refusal" "$tmp/err" || fail "run's refusal does not say '$refusal': $(cat "$tmp/err")"
}
simulate_pp 1f1b "x pp 2 (1F1B, 4 micro-batches)" "topology: the cpu backend runs plans made for a CPU topology" --batch-tokens 128K --pp 2 --virtual-stages 1 --cp 4
simulate_pp interleaved "x pp 4 (Interleaved1F1B, 8 micro-batches)" "topology: the cpu backend" --batch-tokens 256K --pp 4 --virtual-stages 2 --cp 2
# The counted split: 34 units on 4 stages, 8, 9, 8, 7 layers (the second stage sets the pace).
simulate_pp counted "x pp 4 (1F1B, 8 micro-batches)" "topology: the cpu backend" --batch-tokens 256K --pp 4 --virtual-stages 1 --cp 2 \
  --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split
# The interleaved schedule with pp 2 (one neighbour both ways) is priced, not simulated.
"$bin" plan "${small[@]}" --batch-tokens 128K --pp 2 --virtual-stages 2 --cp 4 -o "$tmp/pp2v2.yaml" >/dev/null 2>"$tmp/err" ||
  fail "plan --pp 2 --virtual-stages 2 exited $?: $(cat "$tmp/err")"
"$bin" simulate --plan "$tmp/pp2v2.yaml" >"$tmp/out" 2>"$tmp/err"
[[ $? -eq 2 ]] || fail "simulate of an interleaved pp 2 plan did not exit 2"
grep -q "virtual_stages.*pp > 2" "$tmp/err" || fail "simulate's refusal does not say why: $(cat "$tmp/err")"
"$bin" run --plan "$tmp/pp2v2.yaml" >"$tmp/out" 2>"$tmp/err"
[[ $? -eq 2 ]] || fail "run of an interleaved pp 2 plan did not exit 2"
grep -q "plan.virtual_stages: .*pp > 2.*priced, not run" "$tmp/err" || fail "run's refusal does not say why: $(cat "$tmp/err")"
# Planning the job itself, `simulate` replays the best plan it can when the planner's pick is
# such a plan (here pp 2 x 4 virtual stages), and says so.
"$bin" plan "${small[@]}" --batch-tokens 128K --pp 2 --cp 4 >"$tmp/out" 2>"$tmp/err" || fail "plan --pp 2 exited $?"
grep -q "pp 2, Interleaved1F1B (4 virtual stages)" "$tmp/out" || fail "plan --pp 2 no longer picks pp 2 x 4 virtual stages"
"$bin" simulate "${small[@]}" --batch-tokens 128K --pp 2 --cp 4 >"$tmp/out" 2>"$tmp/err" ||
  fail "simulate --pp 2 exited $?: $(tail -3 "$tmp/err")"
grep -q "x pp 2 (1F1B" "$tmp/out" || fail "simulate --pp 2 replayed no 1F1B plan: $(head -1 "$tmp/out")"
grep -q "^note: the planner's pick (pp 2, 4 virtual stages, .*priced, not simulated" "$tmp/err" ||
  fail "simulate's note: $(cat "$tmp/err")"
# `sweep --simulate` keeps such a row, priced, with no replay: null, and why.
"$bin" sweep --model llama2-7b --topology a100-nvlink-box --gpus 8 --seqs 32K --cp-comm-type p2p --batch-tokens 128K \
  --pp 2 --cp 4 --simulate --format json >"$tmp/sweep.json" 2>"$tmp/err" || fail "sweep --simulate of an interleaved pp 2 row exited $?: $(tail -3 "$tmp/err")"
python3 - "$tmp/sweep.json" <<'EOF' || fail "sweep --simulate's row (see above)"
import json, sys
row = json.load(open(sys.argv[1]))["plans"][0]
assert row["plan"]["pp"] == 2 and row["plan"]["virtual_stages"] == 4, row["plan"]
assert row["simulated"] is None, row["simulated"]
assert "generated for pp > 2" in row["not_simulated"], row.get("not_simulated")
EOF
grep -q "not simulated: the interleaved 1F1B schedule" "$tmp/err" || fail "sweep's progress: $(cat "$tmp/err")"
sed -i 's/^  virtual_stages: 2/  virtual_stages: 0/' "$tmp/pp.yaml"
"$bin" simulate --plan "$tmp/pp.yaml" >"$tmp/out" 2>"$tmp/err"
[[ $? -eq 2 ]] || fail "a plan with virtual_stages 0 did not exit 2"
grep -q "virtual_stages" "$tmp/err" || fail "virtual_stages 0: message does not name the field: $(cat "$tmp/err")"
[[ $failures -eq 0 ]]
