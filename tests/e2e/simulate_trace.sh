#!/usr/bin/env bash
# `simulate --trace --trace-ranks`: the trace keeps the chosen GPUs' events only (and every
# event of those GPUs: as many as the full trace holds for them), a bad list is bad input
# (exit 2 naming --trace-ranks), and --trace-ranks without --trace is refused.
# Usage: simulate_trace.sh <ringmaster> <source-dir>.
set -u
bin=$1
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.bash"
source "$(dirname "${BASH_SOURCE[0]}")/lib/expect_bad.bash"
need python3
checked=0

"$bin" plan --gpus 16 --seq 128k -o "$tmp/plan.yaml" >/dev/null 2>&1 || fail "plan -o exited $?"
checked=$((checked + 1))
# --full: the exact replay traces every GPU (the fast mode replays one data-parallel ring's nodes).
"$bin" simulate --plan "$tmp/plan.yaml" --full --layers 2 --trace "$tmp/all.json" >/dev/null 2>&1 || fail "simulate --trace exited $?"
"$bin" simulate --plan "$tmp/plan.yaml" --full --layers 2 --trace "$tmp/some.json" --trace-ranks 0-1,9 >/dev/null 2>&1 ||
  fail "simulate --trace-ranks exited $?"
python3 - "$tmp/all.json" "$tmp/some.json" <<'PY' || fail "--trace-ranks 0-1,9 did not keep exactly GPUs 0, 1 and 9"
import json, sys
def events(path):
    ev = json.load(open(path))["traceEvents"]
    return [e for e in ev if e["ph"] == "X"]
full, some = events(sys.argv[1]), events(sys.argv[2])
keep = {0, 1, 9}
gpus = {e["pid"] for e in some}
assert gpus == keep, gpus
assert len(some) == sum(1 for e in full if e["pid"] in keep) > 0, (len(some), len(full))
assert len(some) < len(full)
PY
expect_bad "in [0, 15]" "--trace-ranks" -- simulate --plan "$tmp/plan.yaml" --trace "$tmp/x.json" --trace-ranks 0-16
expect_bad "not a number" "--trace-ranks" -- simulate --plan "$tmp/plan.yaml" --trace "$tmp/x.json" --trace-ranks a-b
expect_bad "add --trace" "--trace-ranks" -- simulate --plan "$tmp/plan.yaml" --trace-ranks 0-1

echo "simulate trace: $checked checks, $failures failed"
[[ $failures -eq 0 ]]
