# Sourced by tests/e2e/*.sh (not a test itself: ctest runs tests/e2e/*.sh only): shared checks.
# expect_bad <expected text> <named text> -- <ringmaster args...>: the command must exit 2
# with a message holding both texts (e.g. the rule broken and the file or option named).
# Uses $bin; counts into $checked and $failures.
expect_bad() {
  local expected=$1 named=$2
  shift 3
  local out rc
  out=$("$bin" "$@" 2>&1)
  rc=$?
  checked=$((checked + 1))
  if [[ $rc -ne 2 ]]; then
    echo "FAIL: ringmaster $* -> exit $rc (want 2): $out"
    failures=$((failures + 1))
  elif [[ $out != *"$named"* || $out != *"$expected"* ]]; then
    echo "FAIL: ringmaster $* -> message lacks '$named' or '$expected': $out"
    failures=$((failures + 1))
  fi
}
# expect_run_refusal <plan> <expected text> <what>: `run` of the plan on one rank must print
# the expected text (plans the executor prices but cannot run); skipped without mpirun.
expect_run_refusal() {
  local plan=$1 expected=$2 what=$3 out
  if ! command -v mpirun >/dev/null; then
    echo "mpirun not found: run's refusal of $what not checked (skipped)"
    return
  fi
  out=$(mpirun --allow-run-as-root --oversubscribe -np 1 "$bin" run --plan "$plan" 2>&1)
  checked=$((checked + 1))
  [[ $out == *"$expected"* ]] || fail "run of $what does not refuse it: $out"
}
# expect_simulate_agrees <plan> <what>: `simulate` of the plan replays it within 2 % of the
# planner's step time (needs python3).
expect_simulate_agrees() {
  local plan=$1 what=$2 sim agree
  checked=$((checked + 1))
  sim=$("$bin" simulate --plan "$plan" --format json 2>/dev/null) || { fail "simulate of $what exited $?"; return; }
  agree=$(python3 -c '
import json, sys
d = json.loads(sys.argv[1])
p, s = d["predicted"]["step_time_s"], d["simulated"]["step_time_s"]
print(abs(s / p - 1) < 0.02)' "$sim" 2>&1)
  [[ $agree == True ]] || fail "simulate of $what is not within 2 % of the plan: $agree"
}
