#!/usr/bin/env bash
# `simulate --trace --trace-ranks`: the trace keeps the chosen GPUs' events only (and every
# event of those GPUs: as many as the full trace holds for them), a bad list is bad input
# (exit 2 naming --trace-ranks), --trace-ranks without --trace is refused, and a trace
# above 200 MB draws the warning that offers --trace-ranks and --layers.
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

# --- above 200 MB a trace draws a warning that offers --trace-ranks and --layers, with its
# size; the advice (--layers 2) gives a trace below the limit and no warning. The 1M-token
# plan on 128 GPUs replaying all 32 layers is the cheapest real trace above the limit we
# found: about 225 MB in 11 s on a loaded 2-core machine; it is removed at once. --tp 1
# --cp-comm-type p2p keep the two-level ring of 64 (the search's own pick, a2a+p2p 8x8, and
# the tp 8 p2p plan ring over 8 positions: traces of 34-48 MB).
checked=$((checked + 1))
"$bin" plan --gpus 128 --seq 1M --tp 1 --cp-comm-type p2p -o "$tmp/big.yaml" >/dev/null 2>&1 ||
  fail "plan --gpus 128 --seq 1M exited $?"
if "$bin" simulate --plan "$tmp/big.yaml" --layers 0 --trace "$tmp/big.json" >/dev/null 2>"$tmp/big.err"; then
  size=$(stat -c %s "$tmp/big.json")
  rm -f "$tmp/big.json"
  if ((size <= 200000000)); then
    fail "the 32-layer trace is $size bytes, not above 200 MB: the test no longer reaches the warning"
  else
    want="warning: $tmp/big.json is $(((size + 500000) / 1000000)) MB, slow to open in Perfetto above 200 MB: keep fewer GPUs (--trace-ranks 0-7) or layers (--layers 2)"
    grep -qF "$want" "$tmp/big.err" || fail "a $size-byte trace: want '$want', got: $(grep -v '^simulate:' "$tmp/big.err")"
  fi
else
  fail "simulate --layers 0 --trace exited $?: $(tail -2 "$tmp/big.err")"
fi
checked=$((checked + 1))
"$bin" simulate --plan "$tmp/big.yaml" --layers 2 --trace "$tmp/small.json" >/dev/null 2>"$tmp/small.err" ||
  fail "simulate --layers 2 --trace exited $?"
grep -q "warning" "$tmp/small.err" && fail "a $(stat -c %s "$tmp/small.json")-byte trace drew a warning: $(grep warning "$tmp/small.err")"

echo "simulate trace: $checked checks, $failures failed"
[[ $failures -eq 0 ]]
