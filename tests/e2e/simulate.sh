#!/usr/bin/env bash
# `ringmaster simulate` through the real binary: plan -o then simulate --plan (table and
# JSON), --trace parsed as JSON, the job options path, bad plans (GPU count, an order that
# is not a permutation, a sequence that does not divide) -> exit 2 naming the field, and
# `sweep --simulate --format json` rows carrying `simulated` (a subset here; the full 24
# rows are the benchmark's, BENCHMARKS.md), and --gpu-spread's drawn GPU speeds.
# Usage: simulate.sh <ringmaster> <source-dir>.
set -u
bin=$1
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.bash"
need python3

"$bin" plan --gpus 16 --seq 128k -o "$tmp/plan.yaml" >/dev/null 2>&1 || fail "plan -o exited $?"
# --full: every GPU replayed (the fast default replays the rings on ring 0's nodes only).
out=$("$bin" simulate --plan "$tmp/plan.yaml" --full --trace "$tmp/trace.json" 2>"$tmp/err") || fail "simulate --plan exited $?"
grep -q "^step time" <<<"$out" || fail "simulate table has no step time row"
grep -q "^peak memory per GPU" <<<"$out" || fail "simulate table has no peak memory row"
python3 - "$tmp/trace.json" <<'PY' || fail "--trace is not valid trace-event JSON with a track per GPU"
import json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"]
names = {(e["pid"], e["args"]["name"]) for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
for g in range(16):
    for t in ("compute", "send", "recv"):
        assert (g, t) in names, (g, t)
assert all(e["dur"] >= 0 for e in ev if e["ph"] == "X")
PY
json=$("$bin" simulate --plan "$tmp/plan.yaml" --full --format json 2>/dev/null) || fail "simulate --format json exited $?"
python3 -c '
import json, sys
d = json.load(sys.stdin)
s, p = d["simulated"], d["predicted"]
assert s["mode"] == "full", s["mode"]
for k in ("step_time_s", "comm_overhead", "memory_gib_per_gpu", "tokens_per_s", "mfu", "gpus"):
    assert k in s, k
assert len(s["gpus"]) == 16
assert abs(s["step_time_s"] - p["step_time_s"]) / p["step_time_s"] < 0.02, (s["step_time_s"], p["step_time_s"])
assert abs(s["memory_gib_per_gpu"] - p["memory_gib_per_gpu"]) / p["memory_gib_per_gpu"] < 0.02
' <<<"$json" || fail "simulate --format json: keys or agreement with the planner"

# The fast default: the replayed GPUs listed by id, the note saying what stands for what,
# the same step within 2 % and the same memory as --full.
fast=$("$bin" simulate --plan "$tmp/plan.yaml" --format json 2>/dev/null) || fail "simulate (fast) exited $?"
python3 -c '
import json, sys
full, fast = (json.loads(t)["simulated"] for t in (sys.argv[1], sys.argv[2]))
assert fast["mode"] == "fast", fast["mode"]
import re
assert re.search(r"\d+ of \d+ (data-parallel rings|rings \(tp x dp\)) emitted", fast["note"]), fast["note"]
ids = [g["gpu"] for g in fast["gpus"]]
assert 0 < len(ids) < 16 and ids == sorted(set(ids)), ids
assert abs(fast["step_time_s"] - full["step_time_s"]) / full["step_time_s"] < 0.02, (fast["step_time_s"], full["step_time_s"])
assert fast["memory_gib_per_gpu"] == full["memory_gib_per_gpu"]
' "$json" "$fast" || fail "simulate fast mode: note, replayed GPUs or agreement with --full"

# The job options path: plan first, then simulate.
"$bin" simulate --gpus 8 --seq 32k --topology a100-nvlink-box --workload attention >/dev/null 2>&1 ||
  fail "simulate with job options exited $?"

# Bad plans: exit 2 and a message naming the file and field.
expect_bad() {  # <name> <python edit of the plan dict> <text the message must hold>
  python3 - "$tmp/plan.yaml" "$tmp/$1.yaml" "$2" <<'PY'
import sys, yaml
p = yaml.safe_load(open(sys.argv[1]))
exec(sys.argv[3])
yaml.safe_dump(p, open(sys.argv[2], "w"))
PY
  "$bin" simulate --plan "$tmp/$1.yaml" >/dev/null 2>"$tmp/$1.err"
  local rc=$?
  [[ $rc -eq 2 ]] || fail "$1: exit $rc (want 2)"
  grep -q "$tmp/$1.yaml" "$tmp/$1.err" && grep -q "$3" "$tmp/$1.err" ||
    fail "$1: message does not name the plan and '$3': $(cat "$tmp/$1.err")"
}
if python3 -c 'import yaml' 2>/dev/null; then
  expect_bad gpus 'p["gpus"] = 8' "gpus"
  expect_bad order 'p["plan"]["order"][1] = p["plan"]["order"][0]' "order"
  expect_bad seq 'p["seq_len"] = p["seq_len"] + 1' "seq_len"
else
  echo "note: python3 yaml module missing, bad-plan cases skipped"
fi

# sweep --simulate --format json: every row has `simulated`.
sweep=$("$bin" sweep --simulate --format json --seqs 32k,1M --gpus 16,128 2>/dev/null) || fail "sweep --simulate exited $?"
python3 -c '
import json, sys
rows = json.load(sys.stdin)["plans"]
assert len(rows) == 4, len(rows)
for r in rows:
    for k in ("step_time_s", "comm_overhead", "memory_gib_per_gpu"):
        assert k in r["simulated"], k
' <<<"$sweep" || fail "sweep --simulate --format json rows lack simulated figures"

# --gpu-spread: drawn GPU speeds, replayed with their waits; a ring of 8 at a length where
# its kernels dominate runs at its slowest GPU's pace, slower than the mean GPU's; needs --full.
"$bin" plan --model llama2-7b --topology a100-nvlink-box --gpus 8 --seq 128k --cp 8 --cp-comm-type p2p \
  --workload attention -o "$tmp/ring8.yaml" >/dev/null 2>&1 || fail "plan a ring of 8 exited $?"
mean=$("$bin" simulate --plan "$tmp/ring8.yaml" --full --format json 2>/dev/null)
spread=$("$bin" simulate --plan "$tmp/ring8.yaml" --full --gpu-spread 0.05 --seed 6 2>/dev/null)
grep -Eq "^\(GPU speeds spread 0.05, seed 6: each GPU's ring attention kernels take 0\.[0-9]+-1\.[0-9]+ x their mean" <<<"$spread" ||
  fail "simulate --gpu-spread printed no note of the draws: $(head -3 <<<"$spread")"
python3 -c '
import json, sys
mean = json.loads(sys.argv[1])["simulated"]["step_time_s"]
row = [l for l in sys.argv[2].splitlines() if l.startswith("step time")][0].split()
assert float(row[3]) > 1.02 * mean, (row, mean)' "$mean" "$spread" || fail "drawn GPU speeds did not slow the ring of 8"
"$bin" simulate --plan "$tmp/ring8.yaml" --gpu-spread 0.05 >/dev/null 2>"$tmp/nofull.err"
rc=$?
[[ $rc -eq 2 ]] && grep -q "\-\-gpu-spread: draws every GPU's speed" "$tmp/nofull.err" ||
  fail "simulate --gpu-spread without --full: exit $rc, $(cat "$tmp/nofull.err")"

"$bin" simulate --plan "$tmp/ring8.yaml" --full --seed 3 >/dev/null 2>"$tmp/seed.err"
rc=$?
[[ $rc -eq 2 ]] && grep -q "\-\-seed requires --gpu-spread" "$tmp/seed.err" ||
  fail "simulate --seed without --gpu-spread: exit $rc, $(cat "$tmp/seed.err")"

echo "simulate: $failures failed"
[[ $failures -eq 0 ]]
