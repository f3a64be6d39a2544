#!/usr/bin/env bash
# `calibrate --from` reports each fit's quality and warns on a poor one, on measurements
# written here (no MPI, no timing: the same records give the same fit on any machine):
#   - records on the kernel curve exactly (seconds = flops x (F + half) / (peak x max_eff x F),
#     the form of planner/kernel_efficiency.h) fit with R^2 1.0000 and draw no warning;
#   - the same records with their times scattered by factors up to 4 draw the poor-fit
#     warning naming the fit, its R^2 and MAPE, and the profile is still written (the
#     warning says to check it) with the fit's quality in it.
# The benchmark form's machine load line is asserted by calibrate_loop.sh (it needs mpirun).
# Usage: calibrate_fit_quality.sh <ringmaster> <source-dir>.
set -u
bin=$1
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.bash"
need python3 "to write the measurements"
checked=0

python3 - "$tmp" <<'PY'
import json, sys
out = sys.argv[1]
d, max_rate, half = 64, 1.0e10, 2.0e5   # head dim, peak x max_efficiency (FLOP/s), half_flops
scatter = [1.0, 3.0, 0.4, 2.2, 0.7, 4.0, 0.3, 1.8]  # times off the curve by these factors
def records(scattered):
    lines, start, op = [], 0.0, 0
    for i, (bq, bkv) in enumerate([(16, 16), (32, 32), (64, 64), (128, 128), (32, 128), (64, 256)] * 4):
        F = 4 * bq * bkv * d
        flops = 200 * F
        seconds = flops * (F + half) / (max_rate * F)
        if scattered: seconds *= scatter[i % len(scatter)]
        lines.append({"rank": 0, "ring": 0, "position": 0, "iteration": 0, "op": op, "pass": "forward",
                      "layer": 0, "step": 0, "kind": "attention_forward", "block_q": bq, "block_kv": bkv,
                      "head_dim": d, "flops": flops, "useful_flops": flops, "bytes": 0, "peer": -1,
                      "request": -1, "start": start, "seconds": seconds})
        start += seconds + 1e-6
        op += 1
    return "".join(json.dumps(r) + "\n" for r in lines)
open(out + "/clean.jsonl", "w").write(records(False))
open(out + "/scattered.jsonl", "w").write(records(True))
PY

checked=$((checked + 1))
if "$bin" calibrate --from "$tmp/clean.jsonl" -o "$tmp/clean.yaml" >"$tmp/clean.out" 2>"$tmp/clean.err"; then
  grep -q "fit is poor" "$tmp/clean.err" && fail "records on the curve drew a poor-fit warning: $(cat "$tmp/clean.err")"
  grep -q "machine during the measurements: not recorded in these files" "$tmp/clean.err" ||
    fail "records without load1 were not reported as such: $(cat "$tmp/clean.err")"
  grep -Eq "^attention_forward +24 +1\.0000 " "$tmp/clean.out" ||
    fail "records on the curve: no attention_forward row with 24 points and R^2 1.0000: $(cat "$tmp/clean.out")"
else
  fail "calibrate --from clean.jsonl exited $?: $(cat "$tmp/clean.err")"
fi

checked=$((checked + 1))
if "$bin" calibrate --from "$tmp/scattered.jsonl" -o "$tmp/scattered.yaml" >"$tmp/sc.out" 2>"$tmp/sc.err"; then
  grep -Eq "warning: the attention_forward fit is poor \(R\^2 -?[0-9.]+, MAPE [0-9.]+ %, 24 points\)" "$tmp/sc.err" ||
    fail "scattered records drew no poor-fit warning naming the fit: $(cat "$tmp/sc.err")"
  r2=$(awk '$1 == "attention_forward" { print $3 }' "$tmp/sc.out")
  python3 -c "import sys; assert float(sys.argv[1]) < 0.9" "${r2:-1}" || fail "scattered records: R^2 '$r2' printed, want < 0.9"
  grep -q "^  attention_forward: {points: 24" "$tmp/scattered.yaml" ||
    fail "the profile of a poor fit lacks the fit's quality: $(grep -A2 '^fits' "$tmp/scattered.yaml")"
else
  fail "calibrate --from scattered.jsonl exited $? (a poor fit warns, it is not bad input): $(cat "$tmp/sc.err")"
fi

echo "calibrate fit quality: $checked checks, $failures failed"
[[ $failures -eq 0 ]]
