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
expect_bad "not in range 1 to 131072" "ringmaster: command line: --gpus" -- plan --model llama2-7b --topology dgx-a100-ib --gpus 0 --seq 8k
expect_bad "not expected: --bogus" "ringmaster: command line:" -- plan --gpus 8 --seq 8k --bogus
expect_bad "not in range 1 to 131072" "--gpus" -- simulate --gpus 0 --seq 8k
expect_bad "required" "--gpus" -- plan --model llama2-7b --topology dgx-a100-ib --seq 8k
expect_bad "gpus" "gpus" -- plan --model llama2-7b --topology dgx-a100-ib --gpus 129 --seq 8k
expect_bad "shipped" "no-such-topology" -- plan --model llama2-7b --topology no-such-topology --gpus 8 --seq 8k
expect_bad "micro_batch 300 is more than the 256 sequences of a step's batch" "--micro-batch 300" -- plan --gpus 8 --seq 8k --micro-batch 300

# Not regular files: refused by name at once, never read until memory runs out or blocked on.
mkfifo "$tmp/fifo.yaml"
mkdir "$tmp/dir.yaml"
job=(--gpus 8 --seq 8k)
for f in "$tmp/fifo.yaml" /dev/zero "$tmp/dir.yaml"; do
  case $f in *fifo*) what="a FIFO (named pipe)" ;; /dev/*) what="a device" ;; *) what="a directory" ;; esac
  exp="is $what, expected a topology file"
  expect_bad "$exp" "$f" -- plan --model llama2-7b --topology "$f" "${job[@]}"
  expect_bad "is $what, expected a model file" "$f" -- plan --model "$f" --topology dgx-a100-ib "${job[@]}"
  expect_bad "is $what, expected a plan file" "$f" -- run --plan "$f"
  expect_bad "is $what, expected a profile file" "$f" -- plan --model tiny --topology cpu-local --gpus 2 --seq 1k --profile "$f"
  expect_bad "is $what, expected a measurements file" "$f" -- calibrate --from "$f" -o "$tmp/p.yaml"
  expect_bad "is $what, expected a published corpus file" "$f" -- validate --published "$f"
  expect_bad "is $what, expected a ringmaster JSON output file" "$f" -- merge "$f" -o "$tmp/merged.json"
  expect_bad "is $what, expected a ringmaster JSON output file" "$f" -- report "$f" -o "$tmp/r.html"
done
# A number past double's range in JSON is nlohmann's out_of_range, not a parse error.
printf '{"model_type": "llama", "hidden_size": 1e400}\n' > "$tmp/huge.json"
expect_bad "not valid JSON" "huge.json" -- plan --model "$tmp/huge.json" --topology dgx-a100-ib "${job[@]}"
printf '{"rows": [1e400]}\n' > "$tmp/huge-part.json"
expect_bad "not valid JSON" "huge-part.json" -- merge "$tmp/huge-part.json"
expect_bad "expected JSON" "huge-part.json" -- report "$tmp/huge-part.json" -o "$tmp/r.html"
# A tool's JSON with a field missing or of the wrong type: named by its path, exit 2.
printf '{"plans": [{"gpus": 1, "seq_len": 5, "topology": "dgx-a100-ib", "predicted": {}, "plan": {}}]}\n' >"$tmp/part.json"
expect_bad "plans[0].predicted.memory_gib: missing (required)" "part.json" -- report "$tmp/part.json" -o "$tmp/r.html"
# A sweep whose plan names a topology neither shipped nor a file: the plan's field is named.
"$bin" sweep --gpus 16 --seqs 8k --format json 2>/dev/null | sed 's/"topology": *"[^"]*"/"topology": "no-such-box"/' \
  >"$tmp/box.json"
expect_bad "plans[0].topology: topology 'no-such-box': not a shipped topology" "box.json" -- \
  report "$tmp/box.json" -o "$tmp/r.html"
printf '{"entries": [{"modelled": true, "id": "x", "published": "many"}]}\n' >"$tmp/entries.json"
expect_bad "entries[0].published: expected a number (got \"many\")" "entries.json" -- report "$tmp/entries.json" -o "$tmp/r.html"
head -c $((2 * 1024 * 1024)) /dev/zero | tr '\0' '#' > "$tmp/big.yaml"
expect_bad "larger than the 1 MiB limit for a topology file" "big.yaml" -- plan --model llama2-7b --topology "$tmp/big.yaml" "${job[@]}"

# Sizes, counts and values on the command line.
expect_bad "expected at most 1024M (1073741824) (got '4G')" "--seq" -- plan --model llama2-7b --topology dgx-a100-ib --gpus 8 --seq 4G
expect_bad "expected at least one sequence, --seq 8192 tokens (got 1)" "--batch-tokens" -- plan --model llama2-7b --topology dgx-a100-ib --gpus 8 --seq 8k --batch-tokens 1
expect_bad "must be in [1, 1024] (got 1000000000)" "--kv-subblocks" -- plan --model llama2-7b --topology dgx-a100-ib --gpus 8 --seq 8k --kv-subblocks 1000000000
for opt in --topology --model -o; do
  expect_bad "expected a value (got an empty string)" "$opt" -- plan --model llama2-7b --topology dgx-a100-ib "${job[@]}" "$opt" ""
done
expect_bad "expected a value (got an empty string)" "--topology" -- plan --topology= "${job[@]}"
plan=$bad/plan-order-text-item.yaml  # any plan: the option is refused before the plan is read
expect_bad "expected a number in [0.001, 86400] (got 'nan')" "--timeout-s" -- run --plan "$plan" --timeout-s nan
out=$("$bin" run --plan "$plan" --np 0 2>&1)
checked=$((checked + 1))
if [[ $out != *"--np"*"not in range 1 to 131072"* || ${#out} -gt 300 ]]; then
  fail "--np 0: want a short message with the bound 1 to 131072: $out"
fi

# A plan run would allocate past the host's memory: refused before any rank starts, naming the figure.
sed 's/^seq_len: 0/seq_len: 1G/' "$bad/plan-zero-seq.yaml" > "$tmp/plan-1G.yaml"
expect_bad "GiB of host memory for its tensors" "plan-1G.yaml: seq_len" -- run --plan "$tmp/plan-1G.yaml"
# A fault number that does not fit an int: exit 2 naming the variable (std::stoi used to throw, exit 1).
sed 's/^seq_len: 0/seq_len: 1k/' "$bad/plan-zero-seq.yaml" > "$tmp/plan-1k.yaml"
RINGMASTER_FAULT="kill:rank=99999999999,step=1" expect_bad "expected kill|stall|swap|checkpoint-kill|fsdp-unit|pp-order|comm-order:rank=R,step=S" "RINGMASTER_FAULT" -- \
  run --plan "$tmp/plan-1k.yaml" --timeout-s 20

# Measurements records: every field range-checked before narrowing (exit 2, file:line named).
rec() {  # <rank> <peer> <seconds>
  printf '{"rank":%s,"ring":0,"position":0,"iteration":0,"op":0,"pass":"forward","layer":0,"step":0,"kind":"recv","block_q":0,"block_kv":0,"head_dim":0,"flops":0,"useful_flops":0,"bytes":1024,"peer":%s,"request":0,"start":0,"seconds":%s}\n' "$1" "$2" "$3"
}
{ rec 0 1 0.001; rec -1 0 0.001; } > "$tmp/neg-rank.jsonl"
expect_bad "neg-rank.jsonl:2: rank: expected a whole number in [0, 131071] (got -1)" "neg-rank" -- calibrate --from "$tmp/neg-rank.jsonl" -o "$tmp/p.yaml"
rec 0 2147483647 0.001 > "$tmp/big-peer.jsonl"
expect_bad "big-peer.jsonl:1: peer: expected a whole number in [-1, 131071] (got 2147483647)" "big-peer" -- calibrate --from "$tmp/big-peer.jsonl" -o "$tmp/p.yaml"
rec 4294967296 1 0.001 > "$tmp/wrap-rank.jsonl"
expect_bad "wrap-rank.jsonl:1: rank: expected a whole number in [0, 131071] (got 4294967296)" "wrap-rank" -- calibrate --from "$tmp/wrap-rank.jsonl" -o "$tmp/p.yaml"
rec 0 1 1e308 > "$tmp/huge-seconds.jsonl"
expect_bad "huge-seconds.jsonl:1: seconds: expected a number in [0, 1e+06] (got 1e+308)" "huge-seconds" -- calibrate --from "$tmp/huge-seconds.jsonl" -o "$tmp/p.yaml"
rec 100 101 0.001 > "$tmp/off-topology.jsonl"
expect_bad "outside topology cpu-local" "off-topology.jsonl: rank" -- calibrate --from "$tmp/off-topology.jsonl" -o "$tmp/p.yaml"
[[ -e $tmp/p.yaml ]] && fail "calibrate wrote a profile from bad measurements"

# Writers: through a symlink (the link stays, its target is replaced), the mode kept, a
# non-regular target refused, a dead writer's temporary file removed.
good=(plan --model llama2-7b --topology dgx-a100-ib --gpus 8 --seq 8k --format yaml)
mkdir "$tmp/out"
echo old > "$tmp/out/target.yaml"
chmod 640 "$tmp/out/target.yaml"
ln -s target.yaml "$tmp/out/link.yaml"
touch "$tmp/out/target.yaml.2147483646.tmp"
"$bin" "${good[@]}" -o "$tmp/out/link.yaml" >/dev/null 2>"$tmp/w.log" || fail "plan -o through a symlink: $(cat "$tmp/w.log")"
checked=$((checked + 1))
[[ -L $tmp/out/link.yaml ]] || fail "plan -o replaced the symlink instead of writing through it"
grep -q '^plan:' "$tmp/out/target.yaml" || fail "plan -o did not write the symlink's target"
[[ $(stat -c %a "$tmp/out/target.yaml") == 640 ]] || fail "plan -o changed the mode 640 to $(stat -c %a "$tmp/out/target.yaml")"
[[ -e $tmp/out/target.yaml.2147483646.tmp ]] && fail "a dead writer's temporary file was left behind"
ls "$tmp/out" | grep -q '\.tmp$' && fail "temporary files left: $(ls "$tmp/out")"
expect_bad "cannot write file (it exists and is not a regular file)" "$tmp/dir.yaml" -- "${good[@]}" -o "$tmp/dir.yaml"

echo "bad inputs: $checked checked, $failures failed"
[[ $failures -eq 0 ]]
