#!/usr/bin/env bash
# `ringmaster train` checkpoints: a run killed while writing its step-8 checkpoint (after
# the data files, before the manifest) leaves step 4 as the latest complete checkpoint and
# no step-8 folder; resuming from it with the same rank count follows the uninterrupted
# run's losses exactly, and with another rank count within 1e-4 relative.
# Usage: train_resume.sh <ringmaster> <source-dir>.
set -u
bin=$1
src=$2
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.bash"
need mpirun "train runs MPI ranks"
need python3 "compares the JSON lines"
data=$src/data/public_domain.txt
for g in 1 2; do
  "$bin" plan --model tiny --topology cpu-local --seq 128 --batch-tokens 256 --gpus $g --cp $g \
    --micro-batch 1 --sharding fsdp -o "$tmp/p$g.yaml" >/dev/null || fail "plan --gpus $g failed"
done
train() { "$bin" train --data "$data" --steps 12 --seed 3 --format json "$@"; }

train --plan "$tmp/p2.yaml" >"$tmp/full.jsonl" 2>/dev/null || fail "uninterrupted run failed"
RINGMASTER_FAULT=checkpoint-kill:rank=0,step=8 train --plan "$tmp/p2.yaml" \
  --checkpoint-dir "$tmp/ck" --checkpoint-every 4 >"$tmp/killed.jsonl" 2>"$tmp/killed.err"
rc=$?
[[ $rc -ne 0 ]] || fail "the run killed mid-checkpoint exited 0"
[[ -f $tmp/ck/step-00000004/manifest.json ]] || fail "no complete step-4 checkpoint"
[[ ! -e $tmp/ck/step-00000008 ]] || fail "a step-8 checkpoint exists although its write was killed"
ls -a "$tmp/ck"

cp -r "$tmp/ck" "$tmp/ck1"
train --plan "$tmp/p2.yaml" --checkpoint-dir "$tmp/ck" --resume >"$tmp/same.jsonl" 2>"$tmp/same.err" ||
  fail "resume with 2 ranks failed: $(tail -2 "$tmp/same.err")"
train --plan "$tmp/p1.yaml" --checkpoint-dir "$tmp/ck1" --resume >"$tmp/other.jsonl" 2>"$tmp/other.err" ||
  fail "resume with 1 rank failed: $(tail -2 "$tmp/other.err")"
[[ -f $tmp/ck/step-00000012/manifest.json ]] || fail "the resumed run wrote no final checkpoint"

python3 - "$tmp" <<'PY' || fail "resumed losses differ (above)"
import json, sys
tmp = sys.argv[1]
def losses(name):
    return {r["step"]: r["loss"] for r in (json.loads(l) for l in open(f"{tmp}/{name}.jsonl") if l.strip())}
full, same, other = losses("full"), losses("same"), losses("other")
bad = False
if sorted(same) != list(range(5, 13)) or sorted(other) != list(range(5, 13)):
    print(f"resumed runs printed steps {sorted(same)} and {sorted(other)}, want 5..12"); bad = True
for s in sorted(same):
    if same[s] != full[s]:
        print(f"step {s}: resumed (2 ranks) {same[s]!r} != uninterrupted {full[s]!r}"); bad = True
worst = max((abs(other[s] - full[s]) / full[s] for s in other), default=1)
print(f"resumed with 1 rank: largest relative loss difference {worst:.2e}")
sys.exit(1 if bad or worst > 1e-4 else 0)
PY
echo "train_resume: $failures failed"
[[ $failures -eq 0 ]]
