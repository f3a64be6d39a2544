#!/usr/bin/env bash
# `ringmaster list`: every shipped topology and model appears in the table, and
# `--format json` is one JSON document with the same names.
# Usage: list.sh <ringmaster> <source-dir>.
set -u
bin=$1
src=$2
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.bash"
table=$("$bin" list) || { echo "FAIL: ringmaster list exited $?"; exit 1; }
json=$("$bin" list --format json) || { echo "FAIL: ringmaster list --format json exited $?"; exit 1; }
for f in "$src"/topologies/*.yaml "$src"/models/*.yaml; do
  name=$(basename "$f" .yaml)
  if ! grep -q "^$name " <<<"$table"; then echo "FAIL: '$name' missing from the table"; failures=$((failures + 1)); fi
  if ! grep -q "\"name\": \"$name\"" <<<"$json"; then echo "FAIL: '$name' missing from the JSON"; failures=$((failures + 1)); fi
done
if command -v python3 >/dev/null; then
  python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["topologies"] and d["models"]' <<<"$json" ||
    { echo "FAIL: list --format json is not the expected JSON document"; failures=$((failures + 1)); }
fi
# Peaks print as people write them: the B200's 2250 TFLOP/s, not 2.25e+03.
if ! grep -q "^dgx-b200-ib .* 2250 " <<<"$table" || grep -q "e+0" <<<"$table"; then
  echo "FAIL: a peak in the topology table is not printed whole: $(grep '^dgx-b200-ib' <<<"$table")"
  failures=$((failures + 1))
fi
"$bin" list --format xml >/dev/null 2>&1
rc=$?
if [[ $rc -ne 2 ]]; then echo "FAIL: list --format xml exited $rc (want 2)"; failures=$((failures + 1)); fi
echo "list: $failures failed"
[[ $failures -eq 0 ]]
