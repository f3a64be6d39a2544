#!/usr/bin/env bash
# planner -> executor: `ringmaster plan` for cpu-local and the tiny model, then
# `ringmaster run --verify --measurements --trace` on 2 ranks. Checks the summary table,
# the verification line, one JSON line per op with the contract's keys (executor/
# measurements.h), and the trace-event JSON (planner/trace_events.h) with compute and
# transfer events of both ranks. Usage: run_outputs.sh <ringmaster> <source-dir>. Exit 77 = skipped.
set -u
bin=$1
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.bash"
need mpirun
cd "$tmp"

"$bin" plan --model tiny --topology cpu-local --gpus 2 --cp-comm-type p2p --cp 2 --seq 256 --workload attention \
  --block-q 32 --block-kv 32 -o plan.yaml >/dev/null || fail "plan: exit $?"
out=$(timeout 60 "$bin" run --plan plan.yaml --iters 2 --verify --measurements m.jsonl \
      --trace t.json --timeout-s 20 2>&1)
rc=$?
echo "$out"
[[ $rc -eq 0 ]] || fail "run: exit $rc"
[[ $out == *"verification: OK"* ]] || fail "no 'verification: OK'"
[[ $out == *"exposed comm"*"GFLOP/s"* && $out =~ avg\ +[0-9.]+ ]] || fail "no summary table with an avg row"

# Measurements: every line has the contract's keys; both ranks, both iterations, every kind.
for key in '"rank"' '"iteration"' '"step"' '"kind"' '"block_q"' '"block_kv"' '"flops"' \
           '"bytes"' '"start"' '"seconds"'; do
  n=$(grep -c -v "$key" m.jsonl)
  [[ $n -eq 0 ]] || fail "m.jsonl: $n lines without $key"
done
for want in '"rank":0' '"rank":1' '"iteration":0' '"iteration":1' '"kind":"attention_forward"' \
            '"kind":"attention_backward"' '"kind":"send"' '"kind":"recv"' '"kind":"wait"'; do
  grep -q "$want" m.jsonl || fail "m.jsonl: no record with $want"
done

# Trace: the simulator's format (one process per rank, compute/send/recv tracks).
grep -q '"traceEvents"' t.json || fail "t.json: no traceEvents"
for want in '"name":"GPU 0 (measured)"' '"name":"GPU 1 (measured)"' '"name":"attention_backward"' \
            '"name":"transfer","cat":"send"' '"name":"transfer","cat":"recv"'; do
  grep -q "$want" t.json || fail "t.json: no $want"
done
if command -v python3 >/dev/null; then
  python3 -c 'import json,sys; json.load(open(sys.argv[1]))' t.json || fail "t.json: not valid JSON"
fi

[[ $failures -eq 0 ]] && echo "run outputs: all checks passed"
[[ $failures -eq 0 ]]
