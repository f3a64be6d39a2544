#!/usr/bin/env bash
# Faults in `ringmaster run`: a rank killed mid-ring, or stalled (mid-ring or in its set-up),
# or posting two receives in swapped order (a broken message contract), must make every rank exit,
# non-zero, within a bound (the --timeout-s deadline plus mpirun's teardown), with a
# message naming a rank and the step; no rank may be left running. Faults are injected
# with the hidden RINGMASTER_FAULT variable (executor/watchdog.h). Also: a plan whose GPU
# count differs from --np, and a plan made for a GPU topology, are refused with exit 2.
# Usage: run_fault.sh <ringmaster> <source-dir>. Exit 77 = skipped.
set -u
bin=$1
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.bash"
need mpirun
cd "$tmp"

write_plan() {  # <file> <topology>
  cat > "$1" <<EOF
format: 1
model: tiny
topology: $2
gpus: 3
seq_len: 96
causal: true
workload: attention
passes: forward-backward
plan:
  strategy: ring
  cp: 3
  dp: 1
  schedule: flat
  order_name: node-major
  order: [0, 1, 2]
  load_balance: zigzag
  block_q: 16
  block_kv: 16
  kv_subblocks: 1
  checkpointing: none
  grad_accum: 1
EOF
}
write_plan plan.yaml cpu-local

timeout_s=3
bound_s=30  # deadline + watchdog poll + mpirun teardown, with room for a loaded machine
for fault in kill stall; do
  t0=$(date +%s)
  out=$(RINGMASTER_FAULT="$fault:rank=1,step=1" timeout 120 "$bin" run --plan "$tmp/plan.yaml" \
        --iters 2 --timeout-s $timeout_s 2>&1)
  rc=$?
  elapsed=$(($(date +%s) - t0))
  [[ $rc -eq 0 ]] && fail "$fault: exit 0, want non-zero"
  [[ $rc -eq 124 ]] && fail "$fault: hung (killed by the test's 120 s timeout)"
  [[ $elapsed -gt $bound_s ]] && fail "$fault: took ${elapsed} s, bound ${bound_s} s"
  if [[ $out != *"rank 1: injected fault ($fault) at step 1"* ]]; then
    fail "$fault: no injection message"
  fi
  # The watchdog names whom it waited for: a peer, or (the stalled rank) its own step.
  watchdog_re="rank [0-9]: (no progress from peer [0-9]|this rank's own step ran past the timeout).*step [0-9]"
  if [[ $fault == stall && ! $out =~ $watchdog_re ]]; then
    fail "stall: no watchdog message naming a rank, whom it waited for and a step"
  fi
  # The stalled rank blames itself, never a peer.
  if [[ $out =~ rank\ 1:\ no\ progress\ from\ peer ]]; then
    fail "stall: the stalled rank 1 blamed a peer"
  fi
  # The survivors, terminated by mpirun (or their watchdog), say where they were.
  if [[ $fault == kill && ! $out =~ rank\ [02]:\ (terminated|no\ progress\ from).*step\ [0-9] ]]; then
    fail "kill: no survivor message naming a rank and a step"
  fi
  if pgrep -f "$tmp/plan.yaml" >/dev/null; then
    fail "$fault: ranks still running after mpirun exited"
  fi
  # mpirun's own report comes as one line per rank, not its banner (cli/mpirun_relay.h).
  if [[ $out =~ -{20,} || $out == *"Primary job"* || $out == *"mpirun noticed"* ]]; then
    fail "$fault: mpirun's banner reached the user: $out"
  fi
  if [[ $fault == kill && $out != *"ringmaster: rank 1 was killed by signal 9 (Killed)"* ]]; then
    fail "kill: no one-line report of the killed rank: $out"
  fi
  echo "$fault: exit $rc after ${elapsed} s"
  echo "$out" | grep -E "injected|no progress|terminated|killed by signal" | head -5
done

# A rank stalled in its set-up (before its first op: device, transport, the ring's connect):
# the watchdog watches set-up too, so the rank names it and the job ends, bounded.
t0=$(date +%s)
out=$(RINGMASTER_FAULT="setup-stall:rank=1" timeout 120 "$bin" run --plan "$tmp/plan.yaml" \
      --iters 1 --timeout-s $timeout_s 2>&1)
rc=$?
elapsed=$(($(date +%s) - t0))
[[ $rc -eq 0 || $rc -eq 124 ]] && fail "setup-stall: exit $rc, want a bounded failure"
[[ $elapsed -gt $bound_s ]] && fail "setup-stall: took ${elapsed} s, bound ${bound_s} s"
[[ $out == *"rank 1: injected fault (setup-stall)"* ]] || fail "setup-stall: no injection message: $out"
# Its own watchdog fires, or, when a peer's waiting at the barrier fired first, mpirun's
# SIGTERM finds it there: either way rank 1 names the set-up.
setup_re="rank 1: (this rank's own step ran past the timeout: [0-9.]+ s|terminated \(a peer rank failed or the job was stopped\)) in setting up the cpu backend and connecting the ring"
[[ $out =~ $setup_re ]] || fail "setup-stall: no watchdog message naming the set-up: $out"
pgrep -f "$tmp/plan.yaml" >/dev/null && fail "setup-stall: ranks still running after mpirun exited"
echo "setup-stall: exit $rc after ${elapsed} s"
echo "$out" | grep -E "injected|own step|no progress|terminated" | head -4

# A broken message contract (two receives posted in swapped order, executor/watchdog.h):
# the MPI transport pairs by posting order as NCCL does and must stop with an error naming
# the link, the message and both tags and sizes, never pair them silently or hang.
out=$(RINGMASTER_FAULT="swap:rank=1,step=1" timeout 120 "$bin" run --plan "$tmp/plan.yaml" \
      --iters 1 --timeout-s 20 2>&1)
rc=$?
[[ $rc -eq 0 ]] && fail "swap: exit 0, want non-zero"
[[ $rc -eq 124 ]] && fail "swap: hung (killed by the test's 120 s timeout)"
if [[ ! $out =~ message\ contract\ broken\ on\ link\ 0\ -\>\ 1,\ message\ [0-9]+:\ the\ sender\ posted\ tag\ [0-9]+\ \([0-9]+\ bytes\),\ the\ receiver\ expects\ tag\ [0-9]+\ \([0-9]+\ bytes\) ]]; then
  fail "swap: no contract message naming link, message, tags and sizes: $out"
fi
echo "swap: exit $rc"
echo "$out" | grep -E "injected|message contract" | head -3

# Refusals: exit 2 with a message, before any rank starts.
out=$("$bin" run --plan plan.yaml --np 2 2>&1)
rc=$?
[[ $rc -eq 2 && $out == *"plan.yaml: gpus"*"--np is 2"* ]] || fail "--np mismatch: exit $rc: $out"
write_plan gpu.yaml dgx-a100-ib
out=$("$bin" run --plan gpu.yaml 2>&1)
rc=$?
[[ $rc -eq 2 && $out == *"gpu.yaml: topology"*"cpu backend"* ]] || fail "GPU topology: exit $rc: $out"
sed -i 's/^workload: attention/workload: layer/' gpu.yaml
out=$("$bin" run --plan gpu.yaml 2>&1)
rc=$?
[[ $rc -eq 2 && $out == *"workload"* ]] || fail "workload layer: exit $rc: $out"
# Under mpirun directly (as with a hostfile): every rank refuses a world of the wrong size.
mpirun_flags=(-np 2 --oversubscribe)
[[ $(id -u) -eq 0 ]] && mpirun_flags+=(--allow-run-as-root)
out=$(timeout 60 mpirun "${mpirun_flags[@]}" "$bin" run --plan plan.yaml 2>&1)
rc=$?
[[ $rc -ne 0 && $out == *"MPI world has 2"* ]] || fail "world size mismatch under mpirun: exit $rc: $out"

[[ $failures -eq 0 ]] && echo "all fault checks passed"
[[ $failures -eq 0 ]]
