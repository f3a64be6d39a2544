#!/usr/bin/env bash
# `ringmaster schedule`: prints each rank's op list and checks the message contract.
# The JSON contract ({"ranks": [{"rank", "ops": [{"kind", "peer", "tag", "bytes", "flops",
# "buffer", "role"}]}]}), --rank filtering, the table, and bad input (exit 2).
# Usage: schedule.sh <ringmaster> <source-dir>. Exit 77 = skipped.
set -u
bin=$1
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.bash"
need python3
cd "$tmp"

"$bin" plan --model tiny --topology cpu-local --gpus 4 --cp 4 --seq 1k --workload attention \
  --schedule bidirectional -o plan.yaml >/dev/null 2>&1 || fail "plan -o plan.yaml"

"$bin" schedule --plan plan.yaml --format json > all.json || fail "schedule --format json: exit $?"
python3 - all.json <<'PY' || fail "schedule JSON contract"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["contract"] == "ok", j["contract"]
assert [r["rank"] for r in j["ranks"]] == [0, 1, 2, 3]
kinds = set()
for r in j["ranks"]:
    for op in r["ops"]:
        for k in ("kind", "peer", "tag", "bytes", "flops", "buffer", "role", "phase", "request"):
            assert k in op, (k, op)
        kinds.add(op["kind"])
        if op["kind"] in ("send", "recv"):
            assert op["role"] in ("kv_own", "kv_ring", "dkv_accumulator"), op
            assert op["peer"] != r["rank"] and op["bytes"] > 0 and op["phase"] >= 0
        if op["kind"].startswith("attention"):
            assert op["flops"] > 0 and op["role"] in ("kv_own", "kv_ring"), op
# Posting order pairs: the n-th send on a link meets the n-th receive with the same tag.
links = {}
for r in j["ranks"]:
    for op in r["ops"]:
        if op["kind"] == "send":
            links.setdefault((r["rank"], op["peer"]), [[], []])[0].append((op["tag"], op["bytes"]))
        if op["kind"] == "recv":
            links.setdefault((op["peer"], r["rank"]), [[], []])[1].append((op["tag"], op["bytes"]))
for link, (s, rv) in links.items():
    assert s == rv, link
assert {"begin_pass", "own_grad", "send", "recv", "wait", "attention_forward",
        "attention_backward", "accumulate"} <= kinds, kinds
print("schedule json: %d ranks, %d links, contract ok" % (len(j["ranks"]), len(links)))
PY

"$bin" schedule --plan plan.yaml --rank 2 --format json > two.json || fail "--rank 2: exit $?"
python3 -c 'import json,sys; j=json.load(open("two.json")); assert [r["rank"] for r in j["ranks"]]==[2]' \
  || fail "--rank 2 prints rank 2 only"

out=$("$bin" schedule --plan plan.yaml --rank 1 2>&1) || fail "table: exit $?"
[[ $out == *"rank 1 (ring 0, position 1)"* && $out == *"message contract"*": ok"* ]] \
  || fail "table: missing rank header or contract line: $out"
[[ $out == *"own_grad"* && $out == *"dkv_accumulator"* ]] || fail "table: no own_grad / roles"
# An a2a plan's ranks sit in a CP group, not a ring; a cp 1 plan's are data-parallel replicas.
"$bin" plan --model tiny --topology cpu-local --gpus 2 --cp-comm-type a2a --cp 2 --seq 1k --workload attention \
  -o a2a.yaml >/dev/null 2>&1 || fail "plan --cp-comm-type a2a: exit $?"
out=$("$bin" schedule --plan a2a.yaml --rank 1 2>&1)
[[ $out == *"rank 1 (CP group 0, position 1)"* ]] || fail "a2a table: rank header: $(echo "$out" | head -3)"
"$bin" plan --model tiny --topology cpu-local --gpus 2 --cp 1 --seq 1k --workload attention -o dp.yaml >/dev/null 2>&1 ||
  fail "plan --cp 1: exit $?"
out=$("$bin" schedule --plan dp.yaml --rank 1 2>&1)
[[ $out == *"rank 1 (data-parallel replica 1)"* ]] || fail "cp 1 table: rank header: $(echo "$out" | head -3)"

out=$("$bin" schedule --plan plan.yaml --rank 9 2>&1)
rc=$?
[[ $rc -eq 2 && $out == *"--rank"* ]] || fail "--rank 9 of 4: exit $rc: $out"
out=$("$bin" schedule --plan missing.yaml 2>&1)
rc=$?
[[ $rc -eq 2 && $out == *"missing.yaml"* ]] || fail "missing plan: exit $rc: $out"

[[ $failures -eq 0 ]] && echo "all schedule checks passed"
[[ $failures -eq 0 ]]
