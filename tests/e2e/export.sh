#!/usr/bin/env bash
# `ringmaster export` and `plan --target` (megatron, torchtitan, and slurm: what `ringmaster
# run` executes) through the real binary: the golden files of
# tests/data/export (RINGMASTER_UPDATE_GOLDEN=1 rewrites them), the Megatron line checked
# against Megatron-LM's argument rules, the torchtitan TOML parsed, the sbatch script
# syntax-checked, -o written whole, refusals (exit 2, the plan field and the rule named), and
# the `--launch train` script run through a stand-in srun (trains, resumes, stops without DATA).
# Megatron's rules, as it states them: megatron/training/arguments.py validate_args (world
# size divisible by TP x PP x CP, DP the quotient; a2a+p2p needs
# --hierarchical-context-parallel-sizes), megatron/training/utils.py get_batch_on_this_cp_rank
# (the sequence viewed as 2 x CP chunks), megatron/core/num_microbatches_calculator.py (global
# batch divisible by micro batch x DP). Usage: export.sh <ringmaster> <source-dir>.
set -u
bin=$(realpath "$1")
src=$2
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.bash"
source "$(dirname "${BASH_SOURCE[0]}")/lib/expect_bad.bash"
need python3 "needed to check the Megatron arguments and parse the TOML"
checked=0
cd "$src/tests/data/export" || exit 1

# ---- golden files ----------------------------------------------------------------------
golden() {  # golden <name> <plan> <target> [export options...]
  local name=$1 plan=$2 to=$3
  shift 3
  checked=$((checked + 1))
  if ! "$bin" export --plan "$plan" --to "$to" "$@" >"$tmp/$name" 2>"$tmp/$name.err"; then
    fail "export --plan $plan --to $to $* exited non-zero: $(cat "$tmp/$name.err")"
    return
  fi
  if [[ -n ${RINGMASTER_UPDATE_GOLDEN:-} ]]; then cp "$tmp/$name" "$name"; fi
  diff -u "$name" "$tmp/$name" || fail "export --plan $plan --to $to $* differs from $name"
}
golden megatron.golden plan-step.yaml megatron
golden torchtitan.golden plan-step.yaml torchtitan
golden slurm.golden plan-attention.yaml slurm
# A step plan for a CPU topology (train runs on the cpu backend), trained by the script.
golden slurm-train.golden plan-step-cpu.yaml slurm --launch train --data corpus.txt --steps 4769 --checkpoint-every 500

# ---- the Megatron line obeys Megatron's rules --------------------------------------------
checked=$((checked + 1))
python3 - "$tmp/megatron.golden" <<'PY' || fail "Megatron rules (see above)"
import sys
line = [l for l in open(sys.argv[1]) if l.startswith("--")][-1].split()
args = {}
for i, tok in enumerate(line):
    if tok.startswith("--"):
        vals = []
        for v in line[i + 1:]:
            if v.startswith("--"): break
            vals.append(v)
        args[tok] = vals
gpus = 16  # plan-step.yaml
num = lambda k, d=1: int(args[k][0]) if k in args else d
tp, pp, cp = num("--tensor-model-parallel-size"), num("--pipeline-model-parallel-size"), num("--context-parallel-size")
errors = []
if gpus % (tp * pp * cp): errors.append("world size not divisible by TP x PP x CP")
dp = gpus // (tp * pp * cp)
if "a2a+p2p" in args.get("--cp-comm-type", []) and "--hierarchical-context-parallel-sizes" not in args:
    errors.append("a2a+p2p without --hierarchical-context-parallel-sizes")
if cp > 1 and num("--seq-length") % (2 * cp): errors.append("seq_length not divisible by 2 x CP")
if num("--global-batch-size") % (num("--micro-batch-size") * dp): errors.append("global batch not divisible by micro batch x DP")
if "--sequence-parallel" in args and tp == 1: errors.append("sequence parallel at TP 1")
print("\n".join(errors))
sys.exit(1 if errors else 0)
PY

# ---- the TOML parses, the script is bash ---------------------------------------------------
checked=$((checked + 1))
python3 -c 'import sys, tomllib; c = tomllib.load(open(sys.argv[1], "rb")); p = c["parallelism"]
assert p["context_parallel_degree"] * p["data_parallel_shard_degree"] == 16, p
assert c["training"]["seq_len"] % (2 * p["context_parallel_degree"]) == 0' "$tmp/torchtitan.golden" ||
  fail "torchtitan.golden is not the expected TOML"
for f in slurm.golden slurm-train.golden; do
  checked=$((checked + 1))
  bash -n "$tmp/$f" || fail "$f is not valid bash"
done

# ---- plan reads the Megatron names export writes -------------------------------------------
# The parallel sizes, CP kind, recomputation, micro-batch, global batch and sequence length of
# the golden line, given back to `plan` under Megatron's own option names, pin the plan they
# came from.
checked=$((checked + 1))
meg_args=$(python3 - "$tmp/megatron.golden" <<'PY'
import sys
line = [l for l in open(sys.argv[1]) if l.startswith("--")][-1].split()
keep = ["--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
        "--cp-comm-type", "--recompute-granularity", "--micro-batch-size", "--global-batch-size",
        "--seq-length"]
print(" ".join(f"{k} {line[line.index(k) + 1]}" for k in keep))
PY
)
# shellcheck disable=SC2086 # meg_args is a list of options
if "$bin" plan --model llama2-7b --topology dgx-a100-ib --gpus 16 $meg_args --format json >"$tmp/meg.json" 2>"$tmp/meg.err"; then
  python3 - "$tmp/meg.json" <<'PY' || fail "plan with Megatron's option names ($meg_args) is not plan-step.yaml's plan"
import json, sys
d = json.load(open(sys.argv[1])); p = d["plan"]
want = {"tp": 1, "pp": 1, "cp": 8, "cp_comm_type": "p2p", "checkpointing": "full", "micro_batch": 1}
got = {k: p[k] for k in want}
assert got == want and d["seq_len"] == 1048576, (got, d["seq_len"])
assert d["batch_tokens"] == 2 * 1048576, d["batch_tokens"]  # --global-batch-size 2 sequences
PY
else
  fail "plan with Megatron's option names ($meg_args) exited non-zero: $(cat "$tmp/meg.err")"
fi

# ---- -o writes the same text ------------------------------------------------------------------
checked=$((checked + 1))
"$bin" export --plan plan-step.yaml --to megatron -o "$tmp/m.sh" 2>/dev/null && cmp -s "$tmp/m.sh" "$tmp/megatron.golden" ||
  fail "export -o differs from stdout"

# ---- the plan may be given without --plan (as validate takes its plans) ----------------------
checked=$((checked + 1))
"$bin" export plan-step.yaml --to megatron 2>/dev/null | cmp -s - "$tmp/megatron.golden" ||
  fail "export PLAN differs from export --plan PLAN"

# ---- refusals -----------------------------------------------------------------------------------
expect_bad "plan.schedule: Megatron-LM's ring passes K,V in one direction only" "plan-bidirectional.yaml" -- \
  export --plan plan-bidirectional.yaml --to megatron
expect_bad "plan.schedule: torchtitan" "plan-bidirectional.yaml" -- export --plan plan-bidirectional.yaml --to torchtitan
"$bin" plan --model tiny --topology cpu-local --gpus 2 --cp 2 --seq 256 --workload layer -o "$tmp/layer.yaml" >/dev/null 2>&1
expect_bad "'layer' is for prediction only" "layer.yaml: workload" -- export --plan "$tmp/layer.yaml" --to slurm
# `run` executes step plans too (whole training steps): a step plan exports to slurm.
"$bin" export --plan plan-step.yaml --to slurm >"$tmp/step.sbatch" 2>"$tmp/step.err" && grep -q "ringmaster run" "$tmp/step.sbatch" ||
  fail "export --to slurm of a step plan: $(tail -2 "$tmp/step.err")"
expect_bad "workload: the plan prices 'attention'" "plan-attention.yaml" -- export --plan plan-attention.yaml --to megatron
expect_bad "workload: the plan prices 'attention', not a whole training step" "plan-attention.yaml" -- \
  export --plan plan-attention.yaml --to slurm --launch train
expect_bad "runs on the cpu backend only" "plan-step.yaml: topology" -- export --plan plan-step.yaml --to slurm --launch train
expect_bad "only with --to slurm --launch train" "--data" -- export --plan plan-step-cpu.yaml --to slurm --data corpus.txt
expect_bad "only with --to slurm --launch train" "--steps" -- export --plan plan-step.yaml --to megatron --steps 10
expect_bad "only with --to slurm" "--launch" -- export --plan plan-step.yaml --to megatron --launch train
expect_bad "expected one of megatron, torchtitan, slurm" "--to" -- export --plan plan-step.yaml --to deepspeed
expect_bad "runs a flat ring only" "--schedule" -- plan --gpus 16 --seq 1M --target megatron --schedule bidirectional
expect_bad "none or full" "--checkpointing" -- plan --gpus 16 --seq 1M --target torchtitan --checkpointing selective
expect_bad "does not exist or is not writable" "/nonexistent" -- export --plan plan-step.yaml --to megatron -o /nonexistent/x.sh

# ---- plan --target gives a plan the target exports --------------------------------------------
for t in megatron torchtitan slurm; do
  checked=$((checked + 1))
  "$bin" plan --gpus 32 --seq 512k --target $t -o "$tmp/p-$t.yaml" >/dev/null 2>&1 &&
    "$bin" export --plan "$tmp/p-$t.yaml" --to $t >/dev/null || fail "plan --target $t then export --to $t"
done
# --target slurm: the plans `ringmaster run` executes. At 64K on 16 H100s the free search
# picks a2a, which run refuses on GPUs (a2a runs on the cpu backend only); --target slurm a
# tp 1 p2p or all_gather plan.
checked=$((checked + 1))
"$bin" plan --model llama3-8b --topology dgx-h100-ib --gpus 16 --seq 64k -o "$tmp/free.yaml" >/dev/null 2>&1
grep -q "cp_comm_type: a2a$" "$tmp/free.yaml" || fail "the free pick is no longer a2a: $(grep cp_comm_type "$tmp/free.yaml")"
expect_bad "a2a (all-to-all over heads) runs on the cpu backend only" "free.yaml: plan.strategy" \
  -- export --plan "$tmp/free.yaml" --to slurm
"$bin" plan --model llama3-8b --topology dgx-h100-ib --gpus 16 --seq 64k --target slurm -o "$tmp/ours.yaml" \
  >"$tmp/ours.txt" 2>&1 || fail "plan --target slurm exited $?: $(tail -2 "$tmp/ours.txt")"
grep -Eq "cp_comm_type: (p2p|all_gather)$" "$tmp/ours.yaml" && grep -q "^  tp: 1$" "$tmp/ours.yaml" ||
  fail "plan --target slurm: not a tp 1 p2p or all_gather plan: $(grep -E 'cp_comm_type|  tp:' "$tmp/ours.yaml")"
grep -q "only plans for ringmaster run (--target slurm; export --to slurm)" "$tmp/ours.txt" ||
  fail "plan --target slurm does not say what it searched"
expect_bad "no plan \`ringmaster run\` can run" "plan.tp: the cuda backend runs plans without tensor parallelism" \
  -- plan --model llama3-8b --topology dgx-h100-ib --gpus 16 --seq 64k --target slurm --tp 2

# --target prices the plan as that framework runs its GEMMs (data_parallel.h
# pays_gemm_size_curve), and the plan file keeps it: torchtitan's plan carries framework
# pytorch, Megatron's framework megatron, and a replay of the file reads the same step.
checked=$((checked + 1))
for t in megatron:megatron torchtitan:pytorch; do
  grep -q "^framework: ${t#*:}$" "$tmp/p-${t%%:*}.yaml" || fail "plan --target ${t%%:*}: the plan file has no 'framework: ${t#*:}'"
done
"$bin" plan --gpus 64 --seq 8k --target torchtitan --sharding fsdp --format json >"$tmp/tt.json" 2>/dev/null &&
  "$bin" plan --gpus 64 --seq 8k --target megatron --sharding fsdp --format json >"$tmp/mg.json" 2>/dev/null ||
  fail "plan --target with --sharding fsdp at 8K"
mg_table=$("$bin" plan --gpus 64 --seq 8k --target megatron 2>/dev/null)
[[ $mg_table == *"priced for"*"megatron (Megatron-Core: GEMMs at the size curve's limit)"* ]] ||
  fail "plan --target megatron: the table does not say what it is priced for"
# Megatron-LM keeps a bf16 run's gradients in fp32 unless --grad-reduce-in-bf16: --target
# megatron prices that default, --grad-reduce-in-bf16 prices the flag and exports it.
[[ $mg_table == *"gradients"*"accumulated and reduced in fp32 (grad_reduce_in_fp32)"* ]] ||
  fail "plan --target megatron does not price Megatron-LM's fp32 gradients: $(grep -n gradients <<<"$mg_table")"
checked=$((checked + 1))
"$bin" plan --gpus 64 --seq 8k --target megatron --format json -o "$tmp/g32.yaml" >"$tmp/g32.json" 2>/dev/null &&
  "$bin" plan --gpus 64 --seq 8k --target megatron --grad-reduce-in-bf16 --format json -o "$tmp/g16.yaml" \
    >"$tmp/g16.json" 2>/dev/null || fail "plan --target megatron [--grad-reduce-in-bf16] exited non-zero"
python3 - "$tmp/g32.json" "$tmp/g16.json" <<'PY' || fail "--grad-reduce-in-bf16: the JSON key or the memory"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
assert a["grad_reduce_in_fp32"] is True and b["grad_reduce_in_fp32"] is False
assert a["plan"]["sharding"] == b["plan"]["sharding"] == "zero1", (a["plan"]["sharding"], b["plan"]["sharding"])
extra = a["predicted"]["memory_gib_per_gpu"] - b["predicted"]["memory_gib_per_gpu"]
assert 12 < extra < 13, extra  # 2 bytes more a whole gradient: 2 x 6.7e9 (Megatron's 6 + 12/d against 4 + 12/d)
PY
grep -q "^grad_reduce_in_fp32: true" "$tmp/g32.yaml" || fail "the plan file does not record grad_reduce_in_fp32: true"
"$bin" export --plan "$tmp/g16.yaml" --to megatron 2>/dev/null | grep -q -- "--bf16 --grad-reduce-in-bf16" ||
  fail "export --to megatron of a bf16-gradient plan lacks --grad-reduce-in-bf16"
"$bin" export --plan "$tmp/g32.yaml" --to megatron 2>/dev/null | grep -q -- "--grad-reduce-in-bf16" &&
  fail "export --to megatron of an fp32-gradient plan says --grad-reduce-in-bf16"
"$bin" plan --gpus 64 --seq 8k --target torchtitan -o "$tmp/t32.yaml" >/dev/null 2>&1 &&
  "$bin" plan --gpus 64 --seq 8k --target torchtitan --grad-reduce-in-bf16 -o "$tmp/t16.yaml" >/dev/null 2>&1 ||
  fail "plan --target torchtitan [--grad-reduce-in-bf16] exited non-zero"
"$bin" export --plan "$tmp/t32.yaml" --to torchtitan 2>/dev/null | grep -q '^mixed_precision_reduce = "float32"' ||
  fail "export --to torchtitan of a plan priced for torchtitan lacks its default mixed_precision_reduce = \"float32\""
"$bin" export --plan "$tmp/t16.yaml" --to torchtitan 2>/dev/null | grep -q '^mixed_precision_reduce = "bfloat16"' ||
  fail "export --to torchtitan of a bf16-gradient plan lacks mixed_precision_reduce = \"bfloat16\""
"$bin" plan --gpus 64 --seq 8k --grad-reduce-in-fp32 --grad-reduce-in-bf16 >/dev/null 2>&1
[[ $? -eq 2 ]] || fail "--grad-reduce-in-fp32 with --grad-reduce-in-bf16 did not exit 2"
python3 - "$tmp/tt.json" "$tmp/mg.json" <<'PY' || fail "--target megatron does not price FSDP's GEMMs at the limit"
import json, sys
tt, mg = (json.load(open(f)) for f in sys.argv[1:3])
assert tt["framework"] == "pytorch" and mg["framework"] == "megatron", (tt["framework"], mg["framework"])
assert tt["plan"]["sharding"] == mg["plan"]["sharding"] == "fsdp"
assert mg["predicted"]["tokens_per_s"] > 1.05 * tt["predicted"]["tokens_per_s"], (mg["predicted"], tt["predicted"])
PY

# The collective kinds the frameworks run are searched too: at 1M tokens on 16 GPUs all-to-all
# is the fastest plan; Megatron-LM runs it (--cp-comm-type a2a), torchtitan has no a2a CP.
checked=$((checked + 1))
"$bin" plan --gpus 16 --seq 1M --target megatron -o "$tmp/a2a.yaml" >/dev/null 2>&1 &&
  "$bin" export --plan "$tmp/a2a.yaml" --to megatron | grep -q -- "--context-parallel-size 8 --cp-comm-type a2a " ||
  fail "plan --target megatron at 1M on 16 GPUs: not exported as --cp-comm-type a2a"
# Its placement names CP groups: a2a has no ring of its own.
checked=$((checked + 1))
"$bin" export --plan "$tmp/a2a.yaml" --to megatron | grep -q "^# Rank placement: .*CP group" ||
  fail "an a2a plan's export calls its CP groups rings: $("$bin" export --plan "$tmp/a2a.yaml" --to megatron | grep placement)"
checked=$((checked + 1))
"$bin" plan --gpus 16 --seq 1M --target torchtitan -o "$tmp/t1m.yaml" >/dev/null 2>&1 &&
  "$bin" export --plan "$tmp/t1m.yaml" --to torchtitan >/dev/null || fail "plan --target torchtitan at 1M then export"
expect_bad "plan.strategy: torchtitan has no all-to-all" "--target" -- \
  plan --gpus 16 --seq 128k --cp-comm-type a2a --target torchtitan

# --max-seq --target: the longest sequence the framework's plans fit, which it exports, and no
# longer than the longest of any plan.
for t in megatron torchtitan; do
  checked=$((checked + 1))
  "$bin" plan --gpus 16 --max-seq --target $t -o "$tmp/max-$t.yaml" --format json >"$tmp/max-$t.json" 2>/dev/null &&
    "$bin" export --plan "$tmp/max-$t.yaml" --to $t >/dev/null || fail "plan --max-seq --target $t then export --to $t"
done
checked=$((checked + 1))
"$bin" plan --gpus 16 --max-seq --format json >"$tmp/max-any.json" 2>/dev/null || fail "plan --max-seq exited $?"
python3 - "$tmp/max-any.json" "$tmp/max-megatron.json" "$tmp/max-torchtitan.json" <<'PY' || fail "--max-seq --target: longer than any plan, or does not fit"
import json, sys
best = json.load(open(sys.argv[1]))["seq_len"]
for path in sys.argv[2:]:
    d = json.load(open(path))
    assert d["predicted"]["fits"] and 0 < d["seq_len"] <= best and d["seq_len"] % (2 * d["plan"]["cp"]) == 0, (path, d["seq_len"], best)
PY

# ---- the train script runs: srun stood in for by a script that logs and drops its options ----
# (`ringmaster train` outside an MPI job starts the plan's ranks with mpirun), 2 steps with a
# checkpoint after each, then STEPS=3 at submission resumes after step 2; without DATA the
# script stops before srun (exit 2, DATA named). srun gets --mpi=pmix, or SRUN_MPI's plugin.
if command -v mpirun >/dev/null 2>&1; then
  mkdir -p "$tmp/bin" "$tmp/job"
  printf '#!/usr/bin/env bash\nwhile [[ $1 == --* ]]; do echo "$1"; shift; done >"$(dirname "$0")/srun-called"\nexec "$@"\n' >"$tmp/bin/srun"
  chmod +x "$tmp/bin/srun"
  cp plan-step-cpu.yaml "$tmp/job/"
  data=$(realpath "$src/data/public_domain.txt")
  "$bin" export --plan plan-step-cpu.yaml --to slurm --launch train --data "$data" --steps 2 --checkpoint-every 1 \
    -o "$tmp/job/train.sbatch" 2>/dev/null || fail "export --launch train -o exited $?"
  submit() { (cd "$tmp/job" && PATH="$tmp/bin:$PATH" SLURM_JOB_ID=7 RINGMASTER="$bin" "$@" bash train.sbatch); }
  checked=$((checked + 1))
  if submit env >"$tmp/job/1.out" 2>"$tmp/job/1.err"; then
    [[ $(grep -cE '^ +[12] +[0-9.]+ ' "$tmp/job/1.out") -eq 2 ]] || fail "the train script did not print steps 1 and 2: $(cat "$tmp/job/1.out")"
    [[ -d $tmp/job/checkpoints ]] || fail "the train script wrote no checkpoints/ folder"
    [[ -s $tmp/job/measurements-7.jsonl ]] || fail "the train script wrote no measurements-7.jsonl"
    grep -qx -- "--mpi=pmix" "$tmp/bin/srun-called" || fail "srun's options lack --mpi=pmix: $(cat "$tmp/bin/srun-called")"
    grep -qx -- "--overcommit" "$tmp/bin/srun-called" || fail "srun's options lack --overcommit: $(cat "$tmp/bin/srun-called")"
  else
    fail "the exported train script exited non-zero: $(tail -3 "$tmp/job/1.err")"
  fi
  checked=$((checked + 1))
  if submit env STEPS=3 SRUN_MPI=pmi2 >"$tmp/job/2.out" 2>"$tmp/job/2.err"; then
    grep -qx -- "--mpi=pmi2" "$tmp/bin/srun-called" || fail "SRUN_MPI=pmi2 did not reach srun: $(cat "$tmp/bin/srun-called")"
    grep -q "resumed after step 2" "$tmp/job/2.out" || fail "resubmitted with STEPS=3, train did not resume: $(head -3 "$tmp/job/2.out")"
    [[ $(grep -cE '^ +[0-9]+ +[0-9.]+ ' "$tmp/job/2.out") -eq 1 ]] || fail "resubmitted with STEPS=3: want step 3 only: $(cat "$tmp/job/2.out")"
  else
    fail "the resubmitted train script exited non-zero: $(tail -3 "$tmp/job/2.err")"
  fi
  checked=$((checked + 1))
  rm -f "$tmp/bin/srun-called"
  "$bin" export --plan plan-step-cpu.yaml --to slurm --launch train -o "$tmp/job/train.sbatch" 2>/dev/null
  submit env >"$tmp/job/3.out" 2>"$tmp/job/3.err"
  rc=$?
  [[ $rc -eq 2 && $(cat "$tmp/job/3.err") == "DATA: the training text is not set"* && ! -e $tmp/bin/srun-called ]] ||
    fail "a train script without DATA: exit $rc (want 2 before srun): $(cat "$tmp/job/3.err")"
else
  echo "mpirun not found: the train script is not run"
fi

echo "export: $checked checks, $failures failed"
[[ $failures -eq 0 ]]
