#!/usr/bin/env bash
# `ringmaster train` refuses bad input with one line naming the file and exit 2, before
# any rank trains: missing, empty, binary and too short data files, a learning rate or
# timeout that is not a number, a plan for a model it cannot train, a checkpoint of another
# model and a corrupted checkpoint; --backend cuda without the cuda backend or a device.
# Usage: train_bad_inputs.sh <ringmaster> <source-dir>.
set -u
bin=$1
src=$2
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.bash"
need mpirun "train runs MPI ranks"
data=$src/data/public_domain.txt
"$bin" plan --model tiny --topology cpu-local --seq 128 --batch-tokens 128 --gpus 1 -o "$tmp/p.yaml" >/dev/null ||
  fail "plan tiny failed"
"$bin" plan --model small --topology cpu-local --seq 128 --batch-tokens 128 --gpus 1 -o "$tmp/small.yaml" >/dev/null ||
  fail "plan small failed"
# gpt3-xl does not fit cpu-local's memory: plan writes the plan and exits 1 (does not fit).
"$bin" plan --model gpt3-xl --topology cpu-local --seq 128 --batch-tokens 128 --gpus 1 -o "$tmp/gpt.yaml" >/dev/null 2>&1
[[ -s $tmp/gpt.yaml ]] || fail "plan gpt3-xl wrote no plan"

# expect_bad <what must appear in the message> <train options...>
expect_bad() {
  local want=$1
  shift
  local err
  err=$("$bin" train --steps 2 "$@" 2>&1 >/dev/null)
  local rc=$?
  if [[ $rc -ne 2 ]]; then fail "train $*: exit $rc (want 2): $err"; return; fi
  grep -qF -- "$want" <<<"$err" || fail "train $*: message '$err' lacks '$want'"
  echo "ok: $err"
}
: >"$tmp/empty.txt"
head -c 100 "$data" >"$tmp/short.txt"
printf 'text\0\1\2\3more' >"$tmp/binary.dat"
expect_bad "$tmp/missing.txt: data: cannot open" --plan "$tmp/p.yaml" --data "$tmp/missing.txt"
expect_bad "$tmp/empty.txt: data: the training text is empty" --plan "$tmp/p.yaml" --data "$tmp/empty.txt"
expect_bad "$tmp/binary.dat: data: binary file" --plan "$tmp/p.yaml" --data "$tmp/binary.dat"
expect_bad "$tmp/short.txt: data: holds 101 tokens" --plan "$tmp/p.yaml" --data "$tmp/short.txt"
mkfifo "$tmp/fifo.txt"  # refused by name: opening it would wait for a writer forever
expect_bad "$tmp/fifo.txt: is a FIFO (named pipe), expected a text file for --data" --plan "$tmp/p.yaml" --data "$tmp/fifo.txt"
expect_bad "$tmp/gpt.yaml: model gpt3-xl: gated_ffn" --plan "$tmp/gpt.yaml" --data "$data"
# Numbers that are not numbers: refused where they are read, never trained with.
expect_bad "--lr: expected a number in (0, 10] (got 'nan')" --plan "$tmp/p.yaml" --data "$data" --lr nan
expect_bad "--timeout-s: expected a number in [0.001, 86400] (got 'nan')" --plan "$tmp/p.yaml" --data "$data" --timeout-s nan
# --backend cuda where it cannot run: a build without the cuda backend, or no device. A cuda
# build says there is no device, so its module (executor/cuda_module.h) loaded and answered.
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  echo "skipped: --backend cuda on a machine with a GPU"
elif [[ -f $(dirname "$bin")/libringmaster_cuda.so ]]; then
  expect_bad "--backend: cuda: no CUDA device visible on this machine" --plan "$tmp/p.yaml" --data "$data" --backend cuda
else
  expect_bad "--backend: cuda: this ringmaster was built without the CUDA backend" --plan "$tmp/p.yaml" --data "$data" --backend cuda
fi

# Checkpoints: one of tiny, then resumed by a plan for small; then damaged.
"$bin" train --plan "$tmp/p.yaml" --data "$data" --steps 1 --checkpoint-dir "$tmp/ck" >/dev/null 2>&1 ||
  fail "a 1-step run with a checkpoint failed"
expect_bad "step-00000001/manifest.json: model: the checkpoint is for model" \
  --plan "$tmp/small.yaml" --data "$data" --checkpoint-dir "$tmp/ck" --resume
printf 'garbage' | dd of="$tmp/ck/step-00000001/optimizer.bin" bs=1 seek=16 conv=notrunc 2>/dev/null
expect_bad "step-00000001/optimizer.bin: checkpoint: corrupted" \
  --plan "$tmp/p.yaml" --data "$data" --checkpoint-dir "$tmp/ck" --resume
echo '{ not json' >"$tmp/ck/step-00000001/manifest.json"
expect_bad "step-00000001/manifest.json: format" \
  --plan "$tmp/p.yaml" --data "$data" --checkpoint-dir "$tmp/ck" --resume
echo "train_bad_inputs: $failures failed"
[[ $failures -eq 0 ]]
