#!/usr/bin/env bash
# Mixed precision on the cpu, the cuda path's logic (executor/bf16_kernels.h): with
# --mixed-precision-param bfloat16 the pass keeps bf16 activations and gathers bf16 units
# while the shards and AdamW stay fp32. Its losses follow the float32 run's to bf16 rounding
# (within 1e-2 relative, and not equal to them) under FSDP, DDP, full checkpointing and on
# one rank, and `run --verify` of the step passes its bf16 tolerance.
# Usage: train_mixed_precision.sh <ringmaster> <source-dir>.
set -u
bin=$1
src=$2
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.bash"
need mpirun "train runs MPI ranks"
need python3 "compares the JSON lines"
data=$src/data/public_domain.txt
plan() {  # plan <name> <gpus> [plan options...]
  local name=$1 g=$2
  shift 2
  "$bin" plan --model tiny --topology cpu-local --seq 128 --batch-tokens 256 --gpus "$g" --cp "$g" \
    --micro-batch 1 "$@" -o "$tmp/$name.yaml" >/dev/null 2>&1 || fail "plan $name"
}
plan fsdp 2 --sharding fsdp
plan full 2 --sharding fsdp --checkpointing full
plan one 1 --sharding fsdp
for case in fsdp:fsdp ddp:fsdp:--sharding=ddp full:full one:one; do
  IFS=: read -r name p extra <<<"$case"
  read -r -a args <<<"${extra/=/ }"
  for mp in float32 bfloat16; do
    timeout 120 "$bin" train --plan "$tmp/$p.yaml" --data "$data" --steps 6 --seed 3 --format json \
      --mixed-precision-param "$mp" "${args[@]}" >"$tmp/$name-$mp.jsonl" 2>"$tmp/$name-$mp.err" ||
      fail "$name $mp: train exited $?: $(tail -2 "$tmp/$name-$mp.err")"
  done
  grep -q "bf16 mixed precision" "$tmp/$name-bfloat16.err" || fail "$name: the header does not say bf16 mixed precision"
  python3 - "$tmp/$name-float32.jsonl" "$tmp/$name-bfloat16.jsonl" "$name" <<'PY' || fail "$name: bf16 losses (above)"
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(f) if l.startswith("{")] for f in sys.argv[1:3])
assert len(a) == len(b) == 6, (len(a), len(b))
worst = max(abs(x - y) / x for x, y in zip(a, b))
print(f"{sys.argv[3]}: bf16 against float32 over 6 steps, largest relative loss difference {worst:.1e}")
assert 0 < worst < 1e-2, worst
PY
done
out=$(timeout 120 "$bin" run --plan "$tmp/fsdp.yaml" --verify --iters 1 --mixed-precision-param bfloat16 2>&1) ||
  fail "run --verify in bf16 exited $?: $(tail -3 <<<"$out")"
grep "verification of step 1" <<<"$out" || fail "run --verify in bf16 printed no verification line"
echo "train_mixed_precision: $failures failed"
[[ $failures -eq 0 ]]
