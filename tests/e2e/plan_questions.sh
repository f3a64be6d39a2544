#!/usr/bin/env bash
# The questions users ask, through the real binary: --min-gpus (the fewest GPUs that fit,
# and with a step-time or throughput target more), --train-tokens / --gpu-hour-cost (days, GPU-hours,
# cost = steps x step time), --max-seq --headroom (fits in the rest, a multiple of 2 x cp), the
# note on a plan past 90 % of GPU memory (with the --headroom 10% plan's figures),
# the defaults in the header, exit 1 when the plan does not fit (naming --max-seq and
# --min-gpus) or leaves GPUs idle (bad input stays 2), a baseline's idle replicas, an a2a
# plan's choices without a ring, sizes echoed as typed, --format csv, --version, help CMD,
# list --show.
# Usage: plan_questions.sh <ringmaster> <source-dir>. Exit 77 = skipped.
set -u
bin=$1
src=$2
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.bash"
source "$(dirname "${BASH_SOURCE[0]}")/lib/expect_bad.bash"
need python3 "needed to parse the JSON"
checked=0

# ---- --min-gpus: the fewest GPUs that fit; a step-time target asks for more ---------------
checked=$((checked + 1))
"$bin" plan --min-gpus --gpus 64 --seq 1M --format json >"$tmp/min.json" 2>"$tmp/min.err" ||
  fail "plan --min-gpus exited $?: $(tail -2 "$tmp/min.err")"
min=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["predicted"]["fits"]; print(d["gpus"])' "$tmp/min.json") ||
  fail "plan --min-gpus JSON"
# One GPU count fewer (the candidate before it) does not fit.
checked=$((checked + 1))
grep -q "min-gpus: $min GPUs: yes" "$tmp/min.err" || fail "no progress line for $min GPUs"
prev=$(grep -o 'min-gpus: [0-9]* GPUs\?' "$tmp/min.err" | tail -2 | head -1 | grep -o '[0-9]*')
if [[ -n $prev && $prev != "$min" ]]; then
  checked=$((checked + 1))
  "$bin" plan --gpus "$prev" --seq 1M >/dev/null 2>&1
  [[ $? -eq 1 ]] || fail "plan on $prev GPUs (one count below --min-gpus' $min) should not fit (exit 1)"
fi
checked=$((checked + 1))
step=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["predicted"]["step_time_s"])' "$tmp/min.json")
target=$(python3 -c "print($step / 1.5)")
"$bin" plan --min-gpus --gpus 128 --seq 1M --target-step-time "$target" --format json >"$tmp/fast.json" 2>"$tmp/fast.err" ||
  fail "plan --min-gpus --target-step-time exited $?"
python3 - "$tmp/fast.json" "$min" "$target" <<'PY' || fail "--target-step-time not met or not more GPUs"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["gpus"] > int(sys.argv[2]) and d["predicted"]["step_time_s"] <= float(sys.argv[3]), d["gpus"]
PY
grep -Eq "^min-gpus: $min GPUs: step [0-9.]+ s > [0-9.]+ s \(--target-step-time\)$" "$tmp/fast.err" ||
  fail "the GPU count that fits but is too slow does not say so with both times: $(cat "$tmp/fast.err")"
# --target-tokens-per-s: twice the throughput of the fewest GPUs takes more of them.
checked=$((checked + 1))
want=$(python3 -c 'import json,sys; print(round(2 * json.load(open(sys.argv[1]))["predicted"]["tokens_per_s"]))' "$tmp/min.json")
"$bin" plan --min-gpus --gpus 128 --seq 1M --target-tokens-per-s "$want" --format json >"$tmp/tput.json" 2>"$tmp/tput.err" ||
  fail "plan --min-gpus --target-tokens-per-s exited $?"
python3 - "$tmp/tput.json" "$min" "$want" <<'PY' || fail "--target-tokens-per-s not met or not more GPUs"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["gpus"] > int(sys.argv[2]) and d["predicted"]["tokens_per_s"] >= float(sys.argv[3]), (d["gpus"], d["predicted"])
PY
grep -Eq "^min-gpus: $min GPUs: [0-9]+ tokens/s < $want \(--target-tokens-per-s\)$" "$tmp/tput.err" ||
  fail "the GPU count that fits but is too slow does not say so with both throughputs: $(cat "$tmp/tput.err")"
checked=$((checked + 1))
"$bin" plan --min-gpus --gpus 16 --seq 1M --target-step-time 0.001 >/dev/null 2>"$tmp/none.err"
rc=$?
[[ $rc -eq 1 ]] && grep -q "no GPU count up to 16" "$tmp/none.err" || fail "an unmet target: exit $rc (want 1): $(cat "$tmp/none.err")"

# ---- --train-tokens: days, GPU-hours and cost from the step time --------------------------
checked=$((checked + 1))
"$bin" plan --gpus 64 --seq 128k --train-tokens 1T --gpu-hour-cost 2.5 --format json >"$tmp/run.json" 2>/dev/null ||
  fail "plan --train-tokens exited $?"
python3 - "$tmp/run.json" <<'PY' || fail "training_run figures"
import json, math, sys
d = json.load(open(sys.argv[1]))
t, p = d["training_run"], d["predicted"]
batch = d["batch_tokens"]
assert t["tokens"] == 1e12 and t["steps"] == math.ceil(1e12 / batch), t
assert abs(t["days"] - t["steps"] * p["step_time_s"] / 86400) < 1e-6 * t["days"], t
assert abs(t["gpu_hours"] - 64 * t["days"] * 24) < 1e-6 * t["gpu_hours"], t
assert abs(t["cost"] - 2.5 * t["gpu_hours"]) < 1e-6 * t["cost"], t
PY
checked=$((checked + 1))
"$bin" plan --gpus 64 --seq 128k --train-tokens 1T --gpu-hour-cost 2.5 >"$tmp/run.txt" 2>/dev/null
grep -q "wall clock .* days" "$tmp/run.txt" && grep -q "GPU-hours" "$tmp/run.txt" || fail "training run table missing"

# ---- --max-seq --headroom: fits in the rest, a multiple of 2 x cp -------------------------
checked=$((checked + 1))
"$bin" plan --gpus 16 --max-seq --headroom 10% --format json >"$tmp/h.json" 2>/dev/null || fail "--max-seq --headroom exited $?"
"$bin" plan --gpus 16 --max-seq --format json >"$tmp/h0.json" 2>/dev/null || fail "--max-seq exited $?"
python3 - "$tmp/h.json" "$tmp/h0.json" <<'PY' || fail "--headroom: not less, not below 90 % of 80 GB, or not a multiple of 2 x cp"
import json, sys
h, h0 = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert h["seq_len"] < h0["seq_len"], (h["seq_len"], h0["seq_len"])
assert h["predicted"]["memory_gib_per_gpu"] <= 0.9 * 80, h["predicted"]["memory_gib_per_gpu"]
assert h["seq_len"] % (2 * h["plan"]["cp"]) == 0
PY
expect_bad "percentage from 0 to 90" "--headroom" -- plan --gpus 16 --max-seq --headroom 95%

# ---- a plan past 90 % of GPU memory says so, with the best plan that keeps 10 % free -------
checked=$((checked + 1))
"$bin" plan --gpus 16 --seq 1M >"$tmp/tight.txt" 2>/dev/null || fail "plan --seq 1M on 16 GPUs exited $?"
"$bin" plan --gpus 16 --seq 1M --headroom 10% --format json >"$tmp/margin.json" 2>/dev/null ||
  fail "plan --headroom 10% exited $?"
python3 - "$tmp/tight.txt" "$tmp/margin.json" <<'PY' || fail "the tight-memory note is missing or disagrees with --headroom 10%"
import json, re, sys
text, m = open(sys.argv[1]).read(), json.load(open(sys.argv[2]))
fills = re.search(r"the plan fills (\d+) % of GPU memory.*--headroom 10%\): (\d+) tokens/s \(([-+][\d.]+) %\) in ([\d.]+) GiB", text)
assert fills, text[:600]
used = float(re.search(r"^memory per GPU +([\d.]+) +GiB of 80.0", text, re.M).group(1))
assert int(fills.group(1)) >= 90 and abs(int(fills.group(1)) - 100 * used / 80) <= 1, (fills.group(1), used)
# The alternative is the --headroom 10% plan itself.
assert int(fills.group(2)) == round(m["predicted"]["tokens_per_s"]), (fills.group(2), m["predicted"]["tokens_per_s"])
assert abs(float(fills.group(4)) - m["predicted"]["memory_gib_per_gpu"]) < 0.051 and float(fills.group(4)) <= 72
PY
checked=$((checked + 1))
"$bin" plan --gpus 16 --seq 1M --headroom 10% 2>/dev/null | grep -q "the plan fills" &&
  fail "a plan under --headroom repeats the tight-memory note"
"$bin" plan --gpus 64 --seq 8k 2>/dev/null | grep -q "the plan fills" &&
  fail "a plan at under 80 % of memory has the tight-memory note"

# ---- the header states the defaults; sizes echo as typed ---------------------------------
checked=$((checked + 1))
"$bin" plan --gpus 16 --seq 128000 >"$tmp/typed.txt" 2>/dev/null
head -3 "$tmp/typed.txt" | grep -q "128000 tokens per sequence" &&
  head -3 "$tmp/typed.txt" | grep -q "defaults: model llama2-7b (--model), topology dgx-a100-ib (--topology), global batch 2M tokens" ||
  fail "header: $(head -3 "$tmp/typed.txt")"
checked=$((checked + 1))
"$bin" plan --gpus 16 --seq 1.5M >"$tmp/frac.txt" 2>/dev/null
head -1 "$tmp/frac.txt" | grep -q "1.5M tokens per sequence" || fail "--seq 1.5M: $(head -1 "$tmp/frac.txt")"
# ... and in the sweep and csv tables (128000 is 125K exactly: shown as typed, not respelled).
checked=$((checked + 1))
"$bin" sweep --gpus 16 --seqs 1.5M,128000 >"$tmp/typed-sweep.txt" 2>/dev/null
[[ $(awk '$1 == 16 { print $2 }' "$tmp/typed-sweep.txt" | paste -sd,) == "1.5M,128000" ]] ||
  fail "sweep --seqs 1.5M,128000 does not show the lengths as typed: $(cat "$tmp/typed-sweep.txt")"
head -1 "$tmp/typed-sweep.txt" | grep -q "global batch 2M tokens (--batch-tokens) in whole sequences" ||
  fail "the sweep header does not state the global batch asked for: $(head -1 "$tmp/typed-sweep.txt")"
checked=$((checked + 1))
"$bin" plan --gpus 16 --seq 128000 --format csv 2>/dev/null | awk -F, 'NR == 2 { print $2 }' | grep -qx 128000 ||
  fail "plan --seq 128000 --format csv does not show the length as typed"

# ---- does not fit / idle GPUs: exit 1 after printing; bad input stays 2 ------------------
checked=$((checked + 1))
"$bin" plan --gpus 8 --seq 1M --cp 8 --checkpointing none >"$tmp/nofit.txt" 2>"$tmp/nofit.err"
rc=$?
[[ $rc -eq 1 ]] && grep -q "does not fit" "$tmp/nofit.err" && grep -q "fits" "$tmp/nofit.txt" ||
  fail "a plan that does not fit: exit $rc (want 1), stderr: $(cat "$tmp/nofit.err")"
checked=$((checked + 1))
grep -q -- "--max-seq finds the longest sequence that fits on 8 GPUs, --min-gpus with a larger --gpus" "$tmp/nofit.err" ||
  fail "a plan that does not fit does not name the questions that would: $(cat "$tmp/nofit.err")"
# A baseline that fits but has fewer sequences than replicas says how many idle (a2a's cp
# stops at Llama 3 8B's 8 KV heads: cp 8 x dp 8 for a batch of 2 sequences), text and JSON.
checked=$((checked + 1))
"$bin" plan --model llama3-8b --gpus 64 --seq 1M >"$tmp/idle-base.txt" 2>/dev/null
"$bin" plan --model llama3-8b --gpus 64 --seq 1M --format json >"$tmp/idle-base.json" 2>/dev/null
grep -Eq "^ulysses .* 8 x 8 +yes .* only 2 sequences a step: 6 of 8 data-parallel replicas idle$" "$tmp/idle-base.txt" ||
  fail "the a2a baseline does not say its idle replicas: $(grep -A4 '^baseline' "$tmp/idle-base.txt")"
python3 - "$tmp/idle-base.json" <<'PY' || fail "baselines' busy_replicas"
import json, sys
d = json.load(open(sys.argv[1]))
seqs = d["batch_tokens"] // d["seq_len"]
for b in d["baselines"]:
    assert b["busy_replicas"] == min(seqs, b["dp"]), b
assert any(b["busy_replicas"] < b["dp"] for b in d["baselines"]), d["baselines"]
PY
# An a2a plan has no ring: no schedule, load balance or K,V sub-blocks, and its order lists a CP group.
checked=$((checked + 1))
"$bin" plan --gpus 16 --seq 512k --cp-comm-type a2a --cp 16 >"$tmp/a2a.txt" 2>/dev/null
python3 - "$tmp/a2a.txt" <<'PY' || fail "an a2a plan's choices (above)"
import re, sys
rows = dict(re.findall(r"^(schedule|order|load balance|kv sub-blocks|micro-batch) {2,}(.*)$", open(sys.argv[1]).read(), re.M))
assert rows["schedule"] == "-" and rows["load balance"] == "-" and rows["kv sub-blocks"] == "-", rows
assert "(CP group 0: " in rows["order"] and rows["micro-batch"].endswith("per CP group"), rows
PY
checked=$((checked + 1))
"$bin" plan --gpus 64 --seq 1M --cp 8 --tp 1 >/dev/null 2>"$tmp/idle.err"  # (tp 8 would use the idle GPUs)
rc=$?
[[ $rc -eq 1 ]] && grep -q "data-parallel replicas idle" "$tmp/idle.err" || fail "idle GPUs: exit $rc (want 1): $(cat "$tmp/idle.err")"
expect_bad "required" "--gpus" -- plan --seq 1M
expect_bad "add --min-gpus" "--target-step-time" -- plan --gpus 16 --seq 1M --target-step-time 3
expect_bad "add --train-tokens" "--gpu-hour-cost" -- plan --gpus 16 --seq 1M --gpu-hour-cost 2
expect_bad "token count" "--train-tokens" -- plan --gpus 16 --seq 1M --train-tokens lots
# Not-a-number and out-of-range values are refused where they are read, not priced.
expect_bad "expected a number in (0, 1e+09]" "--target-step-time" -- plan --min-gpus --gpus 16 --seq 1M --target-step-time nan
expect_bad "expected a number in [0, 1e+09]" "--gpu-hour-cost" -- plan --gpus 16 --seq 1M --train-tokens 1T --gpu-hour-cost nan

# ---- --format csv on plan and sweep ------------------------------------------------------
checked=$((checked + 1))
"$bin" plan --gpus 16 --seq 1M --format csv >"$tmp/p.csv" 2>/dev/null
python3 -c 'import csv,sys; r=list(csv.reader(open(sys.argv[1]))); assert len(r)==2 and r[0][0]=="GPUs" and r[1][0]=="16" and "step (s)" in r[0], r' "$tmp/p.csv" ||
  fail "plan --format csv"
checked=$((checked + 1))
"$bin" sweep --gpus 16,32 --seqs 8k,1M --format csv >"$tmp/s.csv" 2>/dev/null
python3 -c 'import csv,sys; r=list(csv.reader(open(sys.argv[1]))); assert len(r)==5 and len(set(map(len,r)))==1, r' "$tmp/s.csv" ||
  fail "sweep --format csv"

# ---- --version, help CMD, list --show ------------------------------------------------------
checked=$((checked + 1))
"$bin" --version | grep -q "^ringmaster [0-9]" || fail "--version"
checked=$((checked + 1))
diff <("$bin" help plan) <("$bin" plan --help) >/dev/null || fail "help plan differs from plan --help"
checked=$((checked + 1))
diff <("$bin" help) <("$bin" --help) >/dev/null || fail "help differs from --help"
expect_bad "expected a command" "help" -- help nosuchcommand
checked=$((checked + 1))
"$bin" validate --published --format csv 2>/dev/null | head -1 | grep -q "^entry,source,gpu,metric,published,predicted,ratio (pub/pred),error % ((pub-pred)/pred),split$" ||
  fail "validate --published --format csv header (the error's sign convention)"
checked=$((checked + 1))
cmp -s <("$bin" list --show dgx-a100-ib) "$src/topologies/dgx-a100-ib.yaml" || fail "list --show dgx-a100-ib is not the shipped file"
expect_bad "shipped topology or model" "--show" -- list --show nosuch

# ---- --no-chunked-loss: the loss over whole fp32 logits, as torchtitan and Megatron hold it --
# (memory only: the same step time; the plan says which, JSON carries it, the export warns)
checked=$((checked + 1))
loss_job=(--model llama3-8b --topology grand-teton-h100-96gb --gpus 8 --seq 32K --cp 1 --sharding fsdp
          --checkpointing full --micro-batch 1 --batch-tokens 256K)
"$bin" plan "${loss_job[@]}" --format json -o "$tmp/chunked.yaml" >"$tmp/chunked.json" 2>/dev/null || fail "plan (chunked loss)"
"$bin" plan "${loss_job[@]}" --no-chunked-loss --format json -o "$tmp/whole.yaml" >"$tmp/whole.json" 2>/dev/null ||
  fail "plan --no-chunked-loss"
python3 - "$tmp/chunked.json" "$tmp/whole.json" <<'PY' || fail "--no-chunked-loss: memory, time or the JSON key"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
assert a["chunked_loss"] is True and b["chunked_loss"] is False, (a["chunked_loss"], b["chunked_loss"])
ga, gb = a["predicted"]["memory_gib_per_gpu"], b["predicted"]["memory_gib_per_gpu"]
# 32K tokens x 128,256 vocabulary x (fp32 logits + gradient) = 31.3 GiB, less the 4K-token chunk
assert abs((gb - ga) - (32768 - 4096) * 128256 * 8 / 2**30) < 0.2, (ga, gb)
assert a["predicted"]["step_time_s"] == b["predicted"]["step_time_s"]
print(f"loss: chunked {ga:.1f} GiB, whole logits {gb:.1f} GiB per GPU")
PY
checked=$((checked + 1))
"$bin" plan "${loss_job[@]}" --no-chunked-loss 2>/dev/null | grep -q "^loss  *whole: the micro-step's fp32 logits" ||
  fail "plan --no-chunked-loss does not say the loss holds whole logits"
checked=$((checked + 1))
grep -q "^chunked_loss: false" "$tmp/whole.yaml" || fail "the plan file does not record chunked_loss: false"
"$bin" export --plan "$tmp/chunked.yaml" --to torchtitan 2>/dev/null | grep -q "re-plan with --no-chunked-loss" ||
  fail "export --to torchtitan of a chunked-loss plan does not warn"
"$bin" export --plan "$tmp/whole.yaml" --to torchtitan 2>/dev/null | grep -q "chunked-loss" &&
  fail "export --to torchtitan of a whole-logits plan warns"
checked=$((checked + 1))
# --compiled-loss: the loss compiled with the model holds the bf16 logits and their gradient
"$bin" plan "${loss_job[@]}" --no-chunked-loss --compiled-loss --format json -o "$tmp/compiled.yaml" \
  >"$tmp/compiled.json" 2>/dev/null || fail "plan --compiled-loss"
python3 - "$tmp/whole.json" "$tmp/compiled.json" <<'PY' || fail "--compiled-loss: memory, time or the JSON key"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
assert a["compiled_loss"] is False and b["compiled_loss"] is True, (a["compiled_loss"], b["compiled_loss"])
ga, gb = a["predicted"]["memory_gib_per_gpu"], b["predicted"]["memory_gib_per_gpu"]
# 32K tokens x 128,256 vocabulary: 8 bytes a logit (fp32 logits + gradient) -> 4 (both bf16)
assert abs((ga - gb) - 32768 * 128256 * 4 / 2**30) < 0.2, (ga, gb)
assert a["predicted"]["step_time_s"] == b["predicted"]["step_time_s"]
PY
grep -q "^compiled_loss: true" "$tmp/compiled.yaml" || fail "the plan file does not record compiled_loss: true"
"$bin" export --plan "$tmp/compiled.yaml" --to torchtitan 2>/dev/null | grep -qx 'components = \["model", "loss"\]' ||
  fail "export --to torchtitan of a compiled-loss plan does not compile the loss"
"$bin" export --plan "$tmp/whole.yaml" --to torchtitan 2>/dev/null | grep -q '^components = \["model"\]  # the loss priced eager' ||
  fail "export --to torchtitan of an eager whole-loss plan compiles the loss or does not say why not"
expect_bad "--no-chunked-loss" "--compiled-loss" -- plan "${loss_job[@]}" --compiled-loss
checked=$((checked + 1))
"$bin" plan "${loss_job[@]}" --target torchtitan --format json 2>/dev/null |
  python3 -c 'import json, sys; assert json.load(sys.stdin)["chunked_loss"] is False' ||
  fail "plan --target torchtitan does not price the loss over whole logits"

echo "plan questions: $checked checks, $failures failed"
[[ $failures -eq 0 ]]
