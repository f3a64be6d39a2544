#!/usr/bin/env bash
# Mixed precision on the cpu, the cuda path's logic (executor/bf16_kernels.h): with
# --mixed-precision-param bfloat16 the pass keeps bf16 activations and gathers bf16 units
# while the shards and AdamW stay fp32. Its losses follow the float32 run's to bf16 rounding
# (within 1e-2 relative, and not equal to them) under FSDP, DDP, full checkpointing and on
# one rank, and `run --verify` of the step passes its bf16 tolerance.
# Gradients are reduced in the plan's type (torchtitan's mixed_precision_reduce): a bf16
# pass of a plan without grad_reduce_in_fp32 reduce-scatters (FSDP) or all-reduces (DDP)
# in bf16, half the bytes of fp32 in the measurements, its losses within 1e-3 of the same
# pass reducing in fp32 and not equal to them; a plan with grad_reduce_in_fp32 reduces in
# fp32; --mixed-precision-reduce overrides either way, a float32 pass included.
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
plan fp32grads 2 --sharding fsdp --grad-reduce-in-fp32
reduced() {  # reduced <name> <plan> [train options...]: trains 4 steps, keeping measurements
  local name=$1 p=$2
  shift 2
  timeout 120 "$bin" train --plan "$tmp/$p.yaml" --data "$data" --steps 4 --seed 3 --format json \
    --measurements "$tmp/$name.m.jsonl" "$@" >"$tmp/$name.jsonl" 2>"$tmp/$name.err" ||
    fail "$name: train exited $?: $(tail -2 "$tmp/$name.err")"
  grep -o "gradients reduced in [a-z0-9]*" "$tmp/$name.err" | sed "s/^/$name: /"
}
says() { grep -q "gradients reduced in $2" "$tmp/$1.err" || fail "$1: the header does not say gradients reduced in $2"; }
reduced plan-default fsdp --mixed-precision-param bfloat16
says plan-default bf16
reduced plan-fp32 fp32grads --mixed-precision-param bfloat16
says plan-fp32 fp32
reduced forced-fp32 fsdp --mixed-precision-param bfloat16 --mixed-precision-reduce float32
says forced-fp32 fp32
reduced ddp-bf16 fsdp --mixed-precision-param bfloat16 --sharding ddp
says ddp-bf16 bf16
reduced ddp-fp32 fsdp --mixed-precision-param bfloat16 --sharding ddp --mixed-precision-reduce float32
reduced fp32-pass fsdp --mixed-precision-param float32
says fp32-pass fp32
reduced fp32-pass-bf16 fsdp --mixed-precision-param float32 --mixed-precision-reduce bfloat16
says fp32-pass-bf16 bf16
python3 - "$tmp" <<'PY' || fail "bf16 gradient reduction (above)"
import json, sys
d = sys.argv[1]
def losses(n):
    return [json.loads(l)["loss"] for l in open(f"{d}/{n}.jsonl") if l.startswith("{")]
def moved(n, kind):
    return sum(json.loads(l)["bytes"] for l in open(f"{d}/{n}.m.jsonl") if f'"kind":"{kind}"' in l)
ok = True
for bf16, fp32, kind in (("plan-default", "forced-fp32", "reduce_scatter"), ("ddp-bf16", "ddp-fp32", "all_reduce"),
                         ("fp32-pass-bf16", "fp32-pass", "reduce_scatter")):
    a, b = losses(bf16), losses(fp32)
    worst = max(abs(x - y) / y for x, y in zip(a, b))
    ratio = moved(bf16, kind) / moved(fp32, kind)
    print(f"{bf16} against {fp32}: largest relative loss difference {worst:.1e}, {kind} bytes x{ratio:.2f}")
    ok &= len(a) == len(b) == 4 and 0 < worst < 1e-3 and ratio == 0.5
assert losses("plan-fp32") == losses("forced-fp32"), "the plan's grad_reduce_in_fp32 did not reduce in fp32"
assert ok
PY
out=$(timeout 120 "$bin" run --plan "$tmp/fsdp.yaml" --verify --iters 1 --mixed-precision-param bfloat16 2>&1) ||
  fail "run --verify in bf16 exited $?: $(tail -3 <<<"$out")"
grep "verification of step 1" <<<"$out" || fail "run --verify in bf16 printed no verification line"
echo "train_mixed_precision: $failures failed"
[[ $failures -eq 0 ]]
