#!/usr/bin/env bash
# `ringmaster export` and `plan --target` through the real binary: the golden files of
# tests/data/export (RINGMASTER_UPDATE_GOLDEN=1 rewrites them), the Megatron line checked
# against Megatron-LM's argument rules, the torchtitan TOML parsed, the sbatch script
# syntax-checked, -o written whole, and refusals (exit 2, the plan field and the rule named).
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
golden() {  # golden <name> <plan> <target>
  checked=$((checked + 1))
  if ! "$bin" export --plan "$2" --to "$3" >"$tmp/$1" 2>"$tmp/$1.err"; then
    fail "export --plan $2 --to $3 exited non-zero: $(cat "$tmp/$1.err")"
    return
  fi
  if [[ -n ${RINGMASTER_UPDATE_GOLDEN:-} ]]; then cp "$tmp/$1" "$1"; fi
  diff -u "$1" "$tmp/$1" || fail "export --plan $2 --to $3 differs from $1"
}
golden megatron.golden plan-step.yaml megatron
golden torchtitan.golden plan-step.yaml torchtitan
golden slurm.golden plan-attention.yaml slurm

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
checked=$((checked + 1))
bash -n "$tmp/slurm.golden" || fail "slurm.golden is not valid bash"

# ---- -o writes the same text ------------------------------------------------------------------
checked=$((checked + 1))
"$bin" export --plan plan-step.yaml --to megatron -o "$tmp/m.sh" 2>/dev/null && cmp -s "$tmp/m.sh" "$tmp/megatron.golden" ||
  fail "export -o differs from stdout"

# ---- refusals -----------------------------------------------------------------------------------
expect_bad "plan.schedule: Megatron-LM's ring passes K,V in one direction only" "plan-bidirectional.yaml" -- \
  export --plan plan-bidirectional.yaml --to megatron
expect_bad "plan.schedule: torchtitan" "plan-bidirectional.yaml" -- export --plan plan-bidirectional.yaml --to torchtitan
# `run` executes step plans too (whole training steps): a step plan exports to slurm.
"$bin" export --plan plan-step.yaml --to slurm >"$tmp/step.sbatch" 2>"$tmp/step.err" && grep -q "ringmaster run" "$tmp/step.sbatch" ||
  fail "export --to slurm of a step plan: $(tail -2 "$tmp/step.err")"
expect_bad "workload: the plan prices 'attention'" "plan-attention.yaml" -- export --plan plan-attention.yaml --to megatron
expect_bad "expected one of megatron, torchtitan, slurm" "--to" -- export --plan plan-step.yaml --to deepspeed
expect_bad "runs a flat ring only" "--schedule" -- plan --gpus 16 --seq 1M --target megatron --schedule bidirectional
expect_bad "none or full" "--checkpointing" -- plan --gpus 16 --seq 1M --target torchtitan --checkpointing selective
expect_bad "does not exist or is not writable" "/nonexistent" -- export --plan plan-step.yaml --to megatron -o /nonexistent/x.sh

# ---- plan --target gives a plan the target exports --------------------------------------------
for t in megatron torchtitan; do
  checked=$((checked + 1))
  "$bin" plan --gpus 32 --seq 512k --target $t -o "$tmp/p-$t.yaml" >/dev/null 2>&1 &&
    "$bin" export --plan "$tmp/p-$t.yaml" --to $t >/dev/null || fail "plan --target $t then export --to $t"
done

echo "export: $checked checks, $failures failed"
[[ $failures -eq 0 ]]
