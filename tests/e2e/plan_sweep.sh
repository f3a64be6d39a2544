#!/usr/bin/env bash
# `ringmaster plan` and `sweep` through the real binary: the default sweep's JSON contract
# (24 rows, every key; its time is printed, not asserted: the speed target lives in
# BENCHMARKS.md, and ctest's timeout catches a search gone pathological), the 1M-token / 128-GPU claim (the ring plan fits in
# 80 GB, FlashAttention + FSDP does not), plan -o read back, --max-seq, pins that cannot
# work, bad plan files (exit 2, the plan_io message), sweep --headroom, sweep --target (each
# row the plan plan --target gives). Usage: plan_sweep.sh <ringmaster>
# <source-dir>. Exit 77 = skipped.
set -u
bin=$1
src=$2
bad=$src/tests/data/bad
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.bash"
need python3 "needed to parse the JSON"
checked=0

# ---- the default sweep: 24 rows with the contract keys -----------------------------------
start=$(date +%s.%N)
"$bin" sweep --format json >"$tmp/sweep.json" 2>"$tmp/sweep.err" || fail "sweep --format json exited $?: $(tail -3 "$tmp/sweep.err")"
end=$(date +%s.%N)
checked=$((checked + 1))
python3 - "$tmp/sweep.json" "$start" "$end" <<'EOF' || fail "sweep JSON (see above)"
import json, sys
rows = json.load(open(sys.argv[1]))["plans"]
elapsed = float(sys.argv[3]) - float(sys.argv[2])
errors = []
if len(rows) != 24:
    errors.append(f"{len(rows)} rows, want 24")
top = ["schema_version", "model", "topology", "gpus", "seq_len", "plan", "predicted", "baselines"]
plan = ["strategy", "cp", "dp", "schedule", "order", "load_balance", "block_q", "block_kv",
        "kv_subblocks", "checkpointing", "cp_comm_type", "tp", "pp", "sharding", "micro_batch",
        "virtual_stages"]
pred = ["step_time_s", "tokens_per_s", "mfu", "comm_overhead", "memory_gib_per_gpu", "fits",
        "scaling_efficiency"]
base = ["strategy", "fits", "memory_gib_per_gpu", "tokens_per_s"]
for r in rows:
    where = f"{r.get('gpus')} GPUs x {r.get('seq_len')} tokens"
    for k in top:
        if k not in r: errors.append(f"{where}: no '{k}'")
    for k in plan:
        if k not in r.get("plan", {}): errors.append(f"{where}: no 'plan.{k}'")
    for k in pred:
        if k not in r.get("predicted", {}): errors.append(f"{where}: no 'predicted.{k}'")
    for b in r.get("baselines", []):
        for k in base:
            if k not in b: errors.append(f"{where}: no 'baselines[].{k}'")
    p = r.get("plan", {})
    if p.get("tp", 1) * p.get("cp", 0) * p.get("dp", 0) != r.get("gpus"): errors.append(f"{where}: tp x cp x dp != gpus")
    if r.get("schema_version") != 2: errors.append(f"{where}: schema_version {r.get('schema_version')}, want 2")
    if p.get("cp_comm_type") not in ("p2p", "all_gather", "a2a", "a2a+p2p"): errors.append(f"{where}: cp_comm_type {p.get('cp_comm_type')}")
    if p.get("cp_comm_type") == "a2a+p2p":
        a, ring = p.get("hierarchical_context_parallel_sizes", [0, 0])
        if a * ring != p.get("cp"): errors.append(f"{where}: hierarchical_context_parallel_sizes {a} x {ring} != cp")
grid = sorted((r["gpus"], r["seq_len"]) for r in rows)
want = sorted((g, n) for g in (16, 32, 64, 128) for n in (8192, 32768, 131072, 262144, 524288, 1048576))
if grid != want: errors.append(f"rows cover {grid}, want 6 lengths x 4 GPU counts")
if {r["model"] for r in rows} != {"llama2-7b"} or {r["topology"] for r in rows} != {"dgx-a100-ib"}:
    errors.append("the default sweep is not llama2-7b on dgx-a100-ib")
# The headline: 1M tokens on 128 A100s.
big = [r for r in rows if r["gpus"] == 128 and r["seq_len"] == 1 << 20]
if big:
    r = big[0]
    if not r["predicted"]["fits"] or r["predicted"]["memory_gib_per_gpu"] > 80:
        errors.append(f"1M/128: the ring plan does not fit ({r['predicted']['memory_gib_per_gpu']:.1f} GiB)")
    fa = [b for b in r["baselines"] if b["strategy"] == "flash-fsdp"]
    if not fa or fa[0]["fits"]:
        errors.append("1M/128: FlashAttention + FSDP fits (or is missing); the study says it does not")
for e in errors: print("  " + e)
print(f"sweep: {len(rows)} rows, all keys checked, {elapsed:.2f} s (not asserted: BENCHMARKS.md)")
sys.exit(1 if errors else 0)
EOF

# Lists take commas or spaces.
checked=$((checked + 1))
rows=$("$bin" sweep --seqs 8k,32k --gpus 16 32 --format json 2>/dev/null |
  python3 -c 'import json, sys; print(len(json.load(sys.stdin)["plans"]))')
[[ $rows == 4 ]] || fail "sweep --seqs 8k,32k --gpus 16 32: $rows rows (want 4)"

# Each GPU count is planned on a thread of its own: every row, in grid order, is the plan
# `plan` finds alone for that job.
checked=$((checked + 1))
"$bin" sweep --gpus 128,16 --seqs 1M,8k --format json >"$tmp/grid.json" 2>/dev/null || fail "sweep --gpus 128,16"
for g in 128 16; do
  for n in 1M 8k; do
    "$bin" plan --gpus $g --seq $n --format json >"$tmp/one-$g-$n.json" 2>/dev/null || fail "plan --gpus $g --seq $n"
  done
done
python3 - "$tmp" <<'EOF' || fail "sweep rows differ from plan's plans (or are out of grid order)"
import json, sys
d = sys.argv[1]
rows = json.load(open(f"{d}/grid.json"))["plans"]
want = [json.load(open(f"{d}/one-{g}-{n}.json")) for g in (128, 16) for n in ("1M", "8k")]
bad = [i for i, (r, w) in enumerate(zip(rows, want)) if r != w]
if bad: print(f"  rows {bad} differ")
sys.exit(1 if bad or len(rows) != 4 else 0)
EOF

# ---- plan -o, read back ------------------------------------------------------------------
checked=$((checked + 1))
if "$bin" plan --gpus 32 --seq 128k --format json -o "$tmp/p.yaml" >"$tmp/p.json" 2>"$tmp/p.err"; then
  # The YAML file carries the same job and plan as the JSON printed beside it.
  python3 - "$tmp/p.yaml" "$tmp/p.json" <<'EOF' || fail "plan -o: the file differs from the printed plan"
import json, sys, yaml
y, j = yaml.safe_load(open(sys.argv[1])), json.load(open(sys.argv[2]))
diff = [k for k in ("model", "topology", "gpus", "seq_len", "batch_tokens", "causal", "workload")
        if y.get(k) != j.get(k)]
diff += ["plan." + k for k in j["plan"] if y["plan"].get(k) != j["plan"][k]]
if j["batch_tokens"] != 2 << 20: diff.append(f"batch_tokens {j['batch_tokens']} (want the effective 2M)")
for d in diff: print("  " + d)
sys.exit(1 if diff else 0)
EOF
  # ringmaster reads it back: the simulator replays the file's plan unchanged.
  if "$bin" simulate --help >/dev/null 2>&1; then
    if "$bin" simulate --plan "$tmp/p.yaml" --layers 1 --format json >"$tmp/s.json" 2>"$tmp/s.err"; then
      python3 -c '
import json, sys
s, j = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
sys.exit(0 if s["plan"] == j["plan"] and s["seq_len"] == j["seq_len"] else 1)' "$tmp/s.json" "$tmp/p.json" ||
        fail "simulate --plan: the plan read back differs from the one written"
    else
      fail "simulate --plan $tmp/p.yaml exited non-zero: $(tail -3 "$tmp/s.err")"
    fi
  fi
else
  fail "plan -o exited non-zero: $(cat "$tmp/p.err")"
fi

# ---- --max-seq -----------------------------------------------------------------------------
checked=$((checked + 1))
if "$bin" plan --gpus 16 --max-seq --format json >"$tmp/m.json" 2>"$tmp/m.err"; then
  n=$(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
ok = d["predicted"]["fits"] and d["seq_len"] >= 1 << 20 and d["seq_len"] % 32 == 0
print(d["seq_len"] if ok else 0)' "$tmp/m.json")
  if [[ $n -eq 0 ]]; then
    fail "--max-seq on 16 GPUs: not a fitting length >= 1M on multiples of 32: $(head -c 300 "$tmp/m.json")"
  else
    # The next length on the search's grid (2 x 16 tokens more) does not fit.
    more=$("$bin" plan --gpus 16 --seq $((n + 32)) --format json 2>/dev/null |
      python3 -c 'import json, sys; print(json.load(sys.stdin)["predicted"]["fits"])')
    [[ $more == False ]] || fail "--max-seq gave $n tokens but $((n + 32)) fit too"
    echo "max-seq: $n tokens on 16 GPUs"
  fi
else
  fail "plan --max-seq exited non-zero: $(cat "$tmp/m.err")"
fi

# ---- refusals: exit 2 and a message naming the file or option --------------------------
source "$(dirname "${BASH_SOURCE[0]}")/lib/expect_bad.bash"
expect_bad "is not a multiple of 16" "--cp 16" -- plan --gpus 16 --seq 16008 --cp 16
expect_bad "must divide" "--cp" -- plan --gpus 16 --seq 64k --cp 5
expect_bad "must be in [1, 131072] (got 0)" "--cp" -- plan --gpus 16 --seq 64k --cp 0
expect_bad "must divide --gpus 16 (got 3)" "--dp" -- plan --gpus 16 --seq 64k --dp 3
expect_bad "must be --gpus 16 (got 2 x 2 x 1 x 2)" "--dp" -- plan --gpus 16 --seq 64k --tp 2 --cp 2 --pp 1 --dp 2
expect_bad "a2a needs cp >= 2 (dp 16 leaves cp 1 of 16 TP groups)" "--dp 16" -- plan --gpus 16 --seq 64k --cp-comm-type a2a --dp 16
expect_bad "bidirectional ring needs cp >= 3" "cp" -- plan --gpus 16 --seq 64k --cp 2 --schedule bidirectional
expect_bad "--max-seq" "drop --seq" -- plan --gpus 16 --seq 64k --max-seq
# CP kinds: a2a needs cp to divide the heads; the ring's choices are not the other kinds';
# a2a+p2p needs a split (tests/e2e/usp.sh has the rest).
expect_bad "needs cp to divide the 32 query heads" "--cp-comm-type a2a --cp 64" -- plan --gpus 64 --seq 1M --cp-comm-type a2a --cp 64
expect_bad "choices of the p2p ring" "--cp-comm-type all_gather" -- plan --gpus 16 --seq 64k --cp-comm-type all_gather --schedule flat
expect_bad "a2a+p2p needs cp >= 4" "--cp-comm-type a2a+p2p --cp 2" -- plan --gpus 16 --seq 64k --cp-comm-type a2a+p2p --cp 2
# Bad plan files, through the loader every consumer uses (run checks the plan first).
for f in plan-cp-dp-mismatch plan-order-not-permutation plan-seq-not-divisible; do
  exp=$(grep -P "^$f.yaml\t" "$bad/EXPECTED.tsv" | cut -f2-)
  expect_bad "$exp" "$bad/$f.yaml" -- run --plan "$bad/$f.yaml"
done

# ---- --attention-kernel: priced by the topology's factor, carried by the plan file ----------
h100=(--model llama3-8b --topology dgx-h100-ib --gpus 8 --seq 128k --workload attention --cp 8)
"$bin" plan "${h100[@]}" --format json >"$tmp/fa2.json" 2>"$tmp/fa2.err" || fail "plan (flash_attn_2) exited $?"
"$bin" plan "${h100[@]}" --attention-kernel flash_attn_3 --format json -o "$tmp/fa3.yaml" >"$tmp/fa3.json" 2>"$tmp/fa3.err" \
  || fail "plan --attention-kernel flash_attn_3 exited $?: $(tail -2 "$tmp/fa3.err")"
checked=$((checked + 1))
python3 - "$tmp/fa2.json" "$tmp/fa3.json" <<'EOF' || fail "--attention-kernel flash_attn_3 (see above)"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
assert a["attention_kernel"] == "flash_attn_2" and b["attention_kernel"] == "flash_attn_3", (a["attention_kernel"], b["attention_kernel"])
ta, tb = a["predicted"]["step_time_s"], b["predicted"]["step_time_s"]
assert tb < ta, (ta, tb)  # FA3 is priced 1.73x faster on Hopper: the attention-only call speeds up
EOF
# A plan file (NAME.yaml) carries its kernel KERNEL, and simulate prices it as plan did.
simulates_kernel() {
  grep -q "^attention_kernel: $2\$" "$tmp/$1.yaml" || fail "the $1 plan file does not carry attention_kernel $2"
  "$bin" simulate --plan "$tmp/$1.yaml" --format json >"$tmp/$1.sim.json" 2>/dev/null || fail "simulate of the $1 plan exited $?"
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); s, p = d["simulated"], d["predicted"]
assert d["attention_kernel"] == sys.argv[2], d["attention_kernel"]
assert abs(s["step_time_s"] - p["step_time_s"]) / p["step_time_s"] < 0.02, (s["step_time_s"], p["step_time_s"])' \
    "$tmp/$1.sim.json" "$2" || fail "simulate of the $1 plan disagrees with plan"
}
# A topology refuses a kernel it has no constant for (flags ARGS, KERNEL, what it prices).
refuses_kernel() {
  local out rc
  out=$("$bin" plan --model llama3-8b --gpus 8 --seq 32k "${@:1:$#-2}" 2>&1)
  rc=$?
  [[ $rc -eq 2 && $out == *"prices no attention kernel '${*: -2:1}' (expected one of: ${*: -1})"* ]] \
    || fail "--attention-kernel ${*: -2:1}: exit $rc, $out"
}
simulates_kernel fa3 flash_attn_3
refuses_kernel --topology dgx-a100-ib --attention-kernel flash_attn_3 flash_attn_3 "flash_attn_2, triton"
# On the B200 the curve is Transformer Engine's fused attention: a plan names it, its file
# carries it, simulate prices it the same, and Megatron is told to run it.
checked=$((checked + 1))
"$bin" plan --model llama3-8b --topology dgx-b200-ib --gpus 8 --seq 64k --target megatron -o "$tmp/b200.yaml" \
  >"$tmp/b200.txt" 2>&1 || fail "plan on dgx-b200-ib exited $?"
grep -q "attention cudnn" "$tmp/b200.txt" || fail "a B200 plan's header does not name cudnn: $(head -2 "$tmp/b200.txt")"
"$bin" export --to megatron "$tmp/b200.yaml" 2>/dev/null | grep -q -- "--attention-backend fused" \
  || fail "export --to megatron of a B200 plan does not run fused attention"
simulates_kernel b200 cudnn
refuses_kernel --topology dgx-b200-ib --attention-kernel flash_attn_2 flash_attn_2 cudnn

# ---- sweep --headroom: every row fits in the rest, and says so in the header -------------
checked=$((checked + 1))
"$bin" sweep --gpus 16,128 --seqs 1M --headroom 10% --format json >"$tmp/margin.json" 2>/dev/null ||
  fail "sweep --headroom 10% exited $?"
"$bin" sweep --gpus 16,128 --seqs 1M --headroom 10% 2>/dev/null | head -1 |
  grep -q "keeping 10 % of GPU memory free (--headroom)" || fail "sweep --headroom: the header does not say so"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))["plans"]
assert len(d) == 2 and all(p["predicted"]["fits"] and p["predicted"]["memory_gib_per_gpu"] <= 0.9 * 80 for p in d), \
  [p["predicted"]["memory_gib_per_gpu"] for p in d]' "$tmp/margin.json" || fail "sweep --headroom: a row past 90 % of 80 GiB"

# ---- sweep --target: each row is the plan `plan --target` gives for its job ---------------
# torchtitan: priced as torchtitan runs it (fp32 gradient reduction, whole logits); slurm:
# only plans `ringmaster run` executes.
for t in torchtitan slurm; do
  checked=$((checked + 1))
  "$bin" sweep --target $t --gpus 16 --seqs 8k,1M --format json >"$tmp/sweep-$t.json" 2>/dev/null ||
    fail "sweep --target $t exited $?"
  for n in 8k 1M; do
    "$bin" plan --target $t --gpus 16 --seq $n --format json >"$tmp/plan-$t-$n.json" 2>/dev/null ||
      fail "plan --target $t --seq $n exited $?"
  done
  python3 - "$t" "$tmp/sweep-$t.json" "$tmp/plan-$t-8k.json" "$tmp/plan-$t-1M.json" <<'PY' || fail "sweep --target $t rows (above)"
import json, sys
target, rows = sys.argv[1], json.load(open(sys.argv[2]))["plans"]
plans = [json.load(open(f)) for f in sys.argv[3:]]
assert len(rows) == 2, len(rows)
for row, plan in zip(rows, plans):
    assert row["plan"] == plan["plan"], (row["plan"], plan["plan"])
    assert abs(row["predicted"]["tokens_per_s"] / plan["predicted"]["tokens_per_s"] - 1) < 1e-9
    assert row["grad_reduce_in_fp32"] == plan["grad_reduce_in_fp32"] == (target == "torchtitan"), target
    if target == "slurm":
        assert row["plan"]["tp"] == 1 and row["plan"]["pp"] == 1, row["plan"]
        assert row["plan"]["cp_comm_type"] in ("p2p", "all_gather", "none"), row["plan"]
PY
done
expect_bad "deepspeed not in {megatron,torchtitan,slurm}" "--target" -- sweep --target deepspeed

echo "plan/sweep: $checked checked, $failures failed"
[[ $failures -eq 0 ]]
