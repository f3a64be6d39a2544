#!/usr/bin/env bash
# `sweep --shard K/N` and `merge` through the real binary: 4 shards of the default sweep
# (24 rows) merged, in any order, equal the unsharded sweep byte for byte (stdout and -o);
# a shard holds every 4th row; more shards than rows gives empty parts that still merge;
# examples/slurm_sweep.sbatch's array tasks and merge job (run by hand, no Slurm) agree too;
# bad --shard values, parts of another sweep, a shard twice, a missing shard, a file that is
# not a part, truncated JSON, counts no sweep has: exit 2 naming the option or file. Usage: sweep_shard.sh
# <ringmaster> <source-dir>. Exit 77 = skipped.
set -u
bin=$1
src=$2
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.bash"
need python3 "needed to parse the JSON"
need cmp
checked=0

# ---- 4 shards merged == one sweep, byte for byte -----------------------------------------
"$bin" sweep --format json >"$tmp/whole.json" 2>/dev/null || fail "sweep --format json exited $?"
mkdir -p "$tmp/parts"
for k in 1 2 3 4; do
  "$bin" sweep --format json --shard $k/4 >"$tmp/parts/$k.json" 2>"$tmp/err" ||
    fail "sweep --shard $k/4 exited $?: $(tail -2 "$tmp/err")"
done
checked=$((checked + 1))
"$bin" merge "$tmp/parts/3.json" "$tmp/parts/1.json" "$tmp/parts/4.json" "$tmp/parts/2.json" \
  >"$tmp/merged.json" 2>"$tmp/err" || fail "merge exited $?: $(cat "$tmp/err")"
cmp -s "$tmp/whole.json" "$tmp/merged.json" || fail "merge of 4 shards differs from the unsharded sweep"
checked=$((checked + 1))
"$bin" merge "$tmp"/parts/*.json -o "$tmp/merged-o.json" 2>/dev/null || fail "merge -o exited $?"
cmp -s "$tmp/whole.json" "$tmp/merged-o.json" || fail "merge -o differs from the unsharded sweep"

# Each shard holds rows k-1, k-1+4, ... of the grid and 6 of the 24 plans.
checked=$((checked + 1))
python3 - "$tmp/whole.json" "$tmp"/parts/{1,2,3,4}.json <<'EOF' || fail "shard contents (see above)"
import json, sys
whole = json.load(open(sys.argv[1]))["plans"]
errors = []
for k, path in enumerate(sys.argv[2:], start=1):
    part = json.load(open(path))
    s = part["shard"]
    if (s["index"], s["count"], s["total_rows"]) != (k, 4, 24):
        errors.append(f"{path}: shard {s['index']}/{s['count']} of {s['total_rows']} rows, want {k}/4 of 24")
    if s["rows"] != list(range(k - 1, 24, 4)):
        errors.append(f"{path}: rows {s['rows']}")
    if part["plans"] != [whole[i] for i in s["rows"]]:
        errors.append(f"{path}: plans differ from the unsharded sweep's rows")
for e in errors: print("  " + e)
sys.exit(1 if errors else 0)
EOF

# More shards than rows: the extra parts are empty and everything still merges.
checked=$((checked + 1))
for k in 1 2 3; do
  "$bin" sweep --format json --gpus 16 --seqs 8k,32k --shard $k/3 >"$tmp/small$k.json" 2>/dev/null ||
    fail "sweep --shard $k/3 of 2 rows exited $?"
done
"$bin" sweep --format json --gpus 16 --seqs 8k,32k >"$tmp/small.json" 2>/dev/null
"$bin" merge "$tmp"/small{1,2,3}.json >"$tmp/small-merged.json" 2>/dev/null || fail "merge of 3 parts of 2 rows"
cmp -s "$tmp/small.json" "$tmp/small-merged.json" || fail "3 parts of a 2-row sweep differ from the sweep"

# examples/slurm_sweep.sbatch as its 3 array tasks and its merge job, run by hand with the
# variables Slurm sets: the merged file equals the unsharded sweep of the same options.
checked=$((checked + 1))
sb=$(realpath "$src/examples/slurm_sweep.sbatch")
abs_bin=$(realpath "$bin")
"$bin" sweep --format json --gpus 16,32 --seqs 8k,32k,128k >"$tmp/sb-whole.json" 2>/dev/null
for k in 1 2 3; do
  (cd "$tmp" && SLURM_ARRAY_TASK_ID=$k SLURM_ARRAY_TASK_COUNT=3 RINGMASTER=$abs_bin PARTS=sb-parts \
    bash "$sb" --gpus 16,32 --seqs 8k,32k,128k 2>/dev/null) || fail "slurm_sweep.sbatch task $k/3 exited $?"
done
(cd "$tmp" && RINGMASTER_SWEEP_MERGE=1 RINGMASTER=$abs_bin PARTS=sb-parts OUT=sb.json bash "$sb" 2>/dev/null) ||
  fail "slurm_sweep.sbatch merge exited $?"
cmp -s "$tmp/sb-whole.json" "$tmp/sb.json" || fail "slurm_sweep.sbatch: merged parts differ from the sweep"
[[ -z $(find "$tmp/sb-parts" -name '*.tmp') ]] || fail "slurm_sweep.sbatch left a temporary part"

# ---- refusals: exit 2 naming the option or the file --------------------------------------
source "$(dirname "${BASH_SOURCE[0]}")/lib/expect_bad.bash"
for bad in 0/4 5/4 4 a/4 1/0 -1/4 1/4/2; do
  expect_bad "expected K/N with 1 <= K <= N" "--shard" -- sweep --format json --shard "$bad"
done
expect_bad "expected a value (got an empty string)" "--shard" -- sweep --format json --shard ""
"$bin" sweep --format json --gpus 16 --shard 2/4 >"$tmp/other.json" 2>/dev/null
expect_bad "a part of a different sweep" "$tmp/other.json" -- merge "$tmp/parts/1.json" "$tmp/other.json"
expect_bad "they differ in 'gpus'" "shard.sweep" -- merge "$tmp/parts/1.json" "$tmp/other.json"
# Every option that shapes the plans is in a part's identity: pins, the loss and --headroom too.
"$bin" sweep --format json --tp 8 --shard 2/4 >"$tmp/tp8.json" 2>/dev/null
expect_bad "they differ in 'tp'" "shard.sweep" -- merge "$tmp/parts/1.json" "$tmp/tp8.json"
"$bin" sweep --format json --headroom 10% --shard 2/4 >"$tmp/margin.json" 2>/dev/null
expect_bad "they differ in 'headroom'" "shard.sweep" -- merge "$tmp/parts/1.json" "$tmp/margin.json"
"$bin" sweep --format json --shard 2/3 >"$tmp/three.json" 2>/dev/null
expect_bad "split 3 ways over 24 rows" "$tmp/three.json" -- merge "$tmp/parts/1.json" "$tmp/three.json"
expect_bad "shard 2/4 given twice" "$tmp/parts/2.json" -- merge "$tmp/parts/1.json" "$tmp/parts/2.json" "$tmp/parts/2.json"
expect_bad "shards 2, 4 of 4 missing" "parts" -- merge "$tmp/parts/1.json" "$tmp/parts/3.json"
expect_bad "not a part of a sharded sweep" "$tmp/whole.json" -- merge "$tmp/whole.json"
head -c 200 "$tmp/parts/1.json" >"$tmp/cut.json"
expect_bad "not valid JSON" "$tmp/cut.json" -- merge "$tmp/cut.json" "$tmp/parts/2.json"
expect_bad "cannot read file (No such file or directory)" "$tmp/nowhere.json" -- merge "$tmp/nowhere.json"
# A part whose rows belong to another shard (edited by hand) is refused, not merged.
python3 -c '
import json, sys
p = json.load(open(sys.argv[1])); p["shard"]["rows"][0] = 1
json.dump(p, open(sys.argv[2], "w"))' "$tmp/parts/1.json" "$tmp/forged.json"
expect_bad "row 1 does not belong to shard 1/4" "$tmp/forged.json" -- merge "$tmp/forged.json"
# Counts claimed by a part are bounded and nothing is sized by them: a trillion rows is a
# missing row (not an allocation that fails), a count past --shard's 9 digits is refused, and
# a billion shards with one given lists the first few missing.
printf '{"plans": [], "shard": {"index": 1, "count": 1, "total_rows": 1000000000000000, "rows": [], "sweep": {}}}' \
  >"$tmp/trillion.json"
expect_bad "shard.rows: row 0 missing" "$tmp/trillion.json" -- merge "$tmp/trillion.json"
printf '{"plans": [], "shard": {"index": 1, "count": 4294967297, "total_rows": 2, "rows": [], "sweep": {}}}' \
  >"$tmp/wrap.json"
expect_bad "shard.count: expected a whole number in [1, 999999999] (got 4294967297)" "$tmp/wrap.json" -- merge "$tmp/wrap.json"
printf '{"plans": [], "shard": {"index": 1, "count": 999999999, "total_rows": 2, "rows": [], "sweep": {}}}' \
  >"$tmp/billion.json"
expect_bad "shards 2, 3, 4, 5, 6, 7, 8, 9 and 999999990 more of 999999999 missing" "parts" -- merge "$tmp/billion.json"
# -o into a missing folder: exit 2, no file left behind.
expect_bad "cannot write file" "$tmp/no/such" -- merge "$tmp"/parts/*.json -o "$tmp/no/such/m.json"

echo "sweep shard/merge: $checked checked, $failures failed"
[[ $failures -eq 0 ]]
