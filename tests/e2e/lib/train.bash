# Sourced by the parallel-training e2e tests (tests/e2e/train_*_parallel.sh) after common.bash,
# with $bin, $data, $steps and $tmp set: what they share.

# plan <name> <plan options...>: $model on cpu-local at 128 tokens, 4 sequences a step, to
# $tmp/<name>.yaml.
plan() {
  local name=$1
  shift
  "$bin" plan --model "$model" --topology cpu-local --seq 128 --batch-tokens 512 "$@" -o "$tmp/$name.yaml" \
    >/dev/null 2>"$tmp/$name.plan.err" || fail "$name: plan $* failed: $(cat "$tmp/$name.plan.err")"
}

# train <name> <plan> [train options...]: $steps steps of $tmp/<plan>.yaml from seed 7, the
# JSON lines in $tmp/<name>.jsonl, the header and notes in $tmp/<name>.err.
train() {
  local name=$1 p=$2
  shift 2
  timeout 200 "$bin" train --plan "$tmp/$p.yaml" --data "$data" --steps $steps --seed 7 --format json "$@" \
    >"$tmp/$name.jsonl" 2>"$tmp/$name.err" || fail "$name: train exited $?: $(tail -3 "$tmp/$name.err")"
}

# same_losses <name:reference:tolerance>...: each run's loss at every step within the relative
# tolerance of the reference run's.
same_losses() {
  python3 - "$tmp" "$steps" "$@" <<'PY' || fail "losses differ (above)"
import json, sys
tmp, steps = sys.argv[1], int(sys.argv[2])
def losses(name):
    try:
        return [json.loads(l)["loss"] for l in open(f"{tmp}/{name}.jsonl") if l.startswith("{")]
    except (OSError, ValueError, KeyError) as e:
        print(f"{name}: no losses ({e})"); return []
bad = False
for spec in sys.argv[3:]:
    name, ref, tol = spec.split(":")
    got, want = losses(name), losses(ref)
    if len(got) != steps or len(want) != steps:
        print(f"{name}: {len(got)} steps against {len(want)}, want {steps}"); bad = True; continue
    worst = max(abs(a / b - 1) for a, b in zip(got, want))
    print(f"{name}: largest relative loss difference to {ref} over {steps} steps {worst:.2e} (within {tol})")
    bad |= worst > float(tol)
sys.exit(1 if bad else 0)
PY
}

# stored <name>: the activations a rank stored at most, as train printed them.
stored() { grep -o "stored activations [0-9.]* MiB" "$tmp/$1.err"; }

# resumes_on_one_rank <plan> <one-rank plan>: <plan>'s ranks train 4 steps and checkpoint;
# one rank resumes to step $steps, within 1e-4 of the 1-rank run ($tmp/one.jsonl) at each.
resumes_on_one_rank() {
  timeout 200 "$bin" train --plan "$tmp/$1.yaml" --data "$data" --steps 4 --seed 7 --format json \
    --checkpoint-dir "$tmp/ck-$1" >"$tmp/first.jsonl" 2>"$tmp/first.err" || fail "$1 with checkpoints: $(tail -2 "$tmp/first.err")"
  timeout 200 "$bin" train --plan "$tmp/$2.yaml" --data "$data" --steps $steps --seed 7 --format json \
    --checkpoint-dir "$tmp/ck-$1" --resume >"$tmp/rest.jsonl" 2>"$tmp/rest.err" || fail "resume on one rank: $(tail -2 "$tmp/rest.err")"
  python3 - "$tmp" "$1" "$steps" <<'PY' || fail "the resumed losses (above)"
import json, sys
tmp, name, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
rest = {r["step"]: r["loss"] for r in map(json.loads, open(f"{tmp}/rest.jsonl")) if "step" in r}
one = {r["step"]: r["loss"] for r in map(json.loads, open(f"{tmp}/one.jsonl")) if "step" in r}
if sorted(rest) != list(range(5, steps + 1)):
    print(f"resumed steps {sorted(rest)}, want 5-{steps}"); sys.exit(1)
worst = max(abs(rest[s] / one[s] - 1) for s in rest)
print(f"{name}'s checkpoint resumed on one rank: steps 5-{steps} within {worst:.2e} of the 1-rank run")
sys.exit(0 if worst <= 1e-4 else 1)
PY
}
