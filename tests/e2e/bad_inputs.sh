#!/usr/bin/env bash
# Every bad spec and plan file in tests/data/bad/ given to the real binary: exit code 2, a message
# naming the file and the field (the text listed in EXPECTED.tsv), and no output file.
# Also bad CLI sizes. Usage: bad_inputs.sh <ringmaster> <source-dir>. Exit 77 = skipped.
set -u
bin=$1
src=$2
bad=$src/tests/data/bad
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.bash"
source "$(dirname "${BASH_SOURCE[0]}")/lib/expect_bad.bash"
checked=0

expected_for() { grep -P "^$1\t" "$bad/EXPECTED.tsv" | cut -f2-; }

for f in "$bad"/model-*.yaml "$bad"/model-*.json "$bad"/topology-*.yaml; do
  name=$(basename "$f")
  exp=$(expected_for "$name")
  out_file=$tmp/plan.yaml
  case $name in
    model-*) expect_bad "$exp" "$f" -- plan --model "$f" --topology dgx-a100-ib --gpus 8 --seq 8k -o "$out_file" ;;
    topology-*) expect_bad "$exp" "$f" -- plan --model llama2-7b --topology "$f" --gpus 8 --seq 8k -o "$out_file" ;;
  esac
  if [[ -e $out_file ]]; then
    echo "FAIL: $name: an output file was written despite the error"
    failures=$((failures + 1))
    rm -f "$out_file"
  fi
done

# Bad plan files, through the loader every consumer uses (run checks the plan first).
for f in "$bad"/plan-*.yaml; do
  expect_bad "$(expected_for "$(basename "$f")")" "$f" -- run --plan "$f"
done

# Bad sizes and counts on the command line.
for seq in 0 -8k 8kb abc 1.3M; do
  expect_bad "expected" "seq" -- plan --model llama2-7b --topology dgx-a100-ib --gpus 8 --seq "$seq"
done
expect_bad "gpus" "gpus" -- plan --model llama2-7b --topology dgx-a100-ib --gpus 0 --seq 8k
expect_bad "gpus" "gpus" -- plan --model llama2-7b --topology dgx-a100-ib --gpus 129 --seq 8k
expect_bad "shipped" "no-such-topology" -- plan --model llama2-7b --topology no-such-topology --gpus 8 --seq 8k

echo "bad inputs: $checked checked, $failures failed"
[[ $failures -eq 0 ]]
