#!/usr/bin/env bash
# The GPU scripts' contract, checked where no GPU is (a lent GPU's minutes are too few to
# find a broken script there): scripts/gpu-check's options (--help, a wrong option and a
# --keep without its folder exit 2), its skip without a device (exit 77, "skipped"), and a
# whole run, and tests/e2e/cuda_ring.sh's, against a GPU that nvidia-smi lists and CUDA
# cannot open; scripts/gpu-bundle refuses a build without the cuda binaries, and from a
# cuda build packs the binaries, OpenMPI whole (mpirun, its launcher plugin, libmpi) and
# an env.sh that a shell reads; validation/measure_*.py compile.
# Usage: gpu_scripts.sh <ringmaster> <source-dir>.
set -u
bin=$1
src=$2
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.bash"
check=$src/scripts/gpu-check
bundle=$src/scripts/gpu-bundle
source "$src/scripts/gpu-binaries.sh"
build=$(dirname "$(dirname "$bin")")
gpu_here=0
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU' && gpu_here=1
cuda_build=0
[[ -x $build/bin/cuda_tests && -x $build/bin/cuda_attention_bench ]] && cuda_build=1

out=$(bash "$check" --help 2>&1) || fail "gpu-check --help: exit $?"
[[ $out == *"--no-build"* && $out == *"--keep DIR"* && $out == *"exits 77."* ]] ||
  fail "gpu-check --help lacks an option or its end: $out"
bash "$check" --bogus >"$tmp/o" 2>&1
rc=$?
[[ $rc -eq 2 ]] && grep -q "unknown option '--bogus'" "$tmp/o" || fail "gpu-check --bogus: exit $rc: $(cat "$tmp/o")"
bash "$check" --keep >"$tmp/o" 2>&1
rc=$?
[[ $rc -eq 2 ]] && grep -q "needs a folder" "$tmp/o" || fail "gpu-check --keep: exit $rc: $(cat "$tmp/o")"
if [[ $gpu_here -eq 1 ]]; then
  echo "a GPU is here: gpu-check's skip and --no-build not checked (skipped)"
else
  bash "$check" >"$tmp/o" 2>&1
  rc=$?
  [[ $rc -eq 77 ]] && grep -q "skipped: no CUDA device" "$tmp/o" || fail "gpu-check without a GPU: exit $rc: $(cat "$tmp/o")"
fi

# no_shell_error <script>: $tmp/o, that script's output, shows no bash error.
no_shell_error() {
  grep -E "command not found|syntax error|unbound variable" "$tmp/o" && fail "$1 has a shell error"
}

# The whole script on a machine whose nvidia-smi lists a GPU that CUDA cannot open: every step
# runs in order and is bounded, mpirun alone passes, each GPU check fails with a verdict, and
# the summary counts them (so a lent GPU's minutes never go to a broken script).
if [[ $cuda_build -eq 1 && $gpu_here -eq 0 ]]; then
  mkdir -p "$tmp/fake"
  printf '#!/bin/sh\n[ "$1" = -L ] && echo "GPU 0: no such GPU (UUID: GPU-0)" || echo "0, no such GPU"\n' >"$tmp/fake/nvidia-smi"
  chmod +x "$tmp/fake/nvidia-smi"
  PATH=$tmp/fake:$PATH RM_BUILD_DIR=$build timeout 240 bash "$check" --no-build --keep "$tmp/keep" >"$tmp/o" 2>&1
  rc=$?
  [[ $rc -eq 1 ]] || fail "gpu-check with an unusable GPU: exit $rc (want 1)"
  for s in "1. GPU tests" "2. rings over NCCL" "3. the local transport" "4. NCCL on a broken" "5. kernel throughput" \
           "6. short calibration" "7. a short training run"; do
    grep -q "^== $s" "$tmp/o" || fail "gpu-check did not reach step '$s'"
  done
  grep -q "^PASS: mpirun: a cpu ring of 2, verified" "$tmp/o" || fail "gpu-check's mpirun check did not pass: $(grep mpirun "$tmp/o")"
  grep -q "^PASS: transport protocol tests" "$tmp/o" || fail "gpu-check's transport protocol tests did not pass"
  grep -q "^FAIL: ring of 1, nccl" "$tmp/o" || fail "gpu-check passed a cuda ring without a usable GPU"
  tail -1 "$tmp/o" | grep -Eq "^gpu-check: FAILED \([0-9]+ of [0-9]+ checks\)$" || fail "gpu-check's last line: $(tail -1 "$tmp/o")"
  [[ -s $tmp/keep/runs.log && -s $tmp/keep/cuda_tests.log ]] || fail "gpu-check --keep left no runs.log or cuda_tests.log"
  no_shell_error "gpu-check"
  # tests/e2e/cuda_ring.sh (gpu-check --full) the same way: every run reached, failed and
  # counted, and no shell error (one hid in its last check until a GPU ran it).
  PATH=$tmp/fake:$PATH timeout 180 bash "$src/tests/e2e/cuda_ring.sh" "$bin" "$src" >"$tmp/o" 2>&1
  rc=$?
  [[ $rc -ne 0 && $rc -ne 124 ]] || fail "cuda_ring.sh with an unusable GPU: exit $rc (want a failure)"
  no_shell_error "cuda_ring.sh"
  tail -1 "$tmp/o" | grep -Eq "^cuda ring: ([0-9]+) runs, \1 failed$" ||
    fail "cuda_ring.sh's last line: $(tail -1 "$tmp/o")"
else
  echo "no cuda build here, or a usable GPU: gpu-check's run through not checked (skipped)"
fi

# The scripts that measured on the lent GPUs (validation/measured/) stay valid Python, so the
# next GPU can rerun them; without a GPU (or torch) they cannot run here.
for py in "$src"/validation/measure_*.py; do
  python3 -c 'import py_compile, sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True)' \
    "$py" "$tmp/m.pyc" 2>"$tmp/o" || fail "${py#"$src"/} does not compile: $(cat "$tmp/o")"
done

mkdir -p "$tmp/empty/bin"
bash "$bundle" "$tmp/empty" "$tmp/b" >"$tmp/o" 2>&1
rc=$?
[[ $rc -eq 2 ]] && grep -q "ringmaster missing (a cuda build?)" "$tmp/o" ||
  fail "gpu-bundle of a folder without binaries: exit $rc: $(cat "$tmp/o")"
if [[ $cuda_build -eq 0 ]]; then
  echo "no cuda build here: gpu-bundle's packing not checked (skipped)"
elif ! dpkg -s libopenmpi3 >/dev/null 2>&1; then
  echo "OpenMPI not from Debian's packages: gpu-bundle's packing not checked (skipped)"
else
  # The fastest xz level: the test checks what is packed, not how small.
  if XZ_OPT="-0 -T0" bash "$bundle" "$build" "$tmp/b" >"$tmp/o" 2>&1; then
    for b in "${gpu_bins[@]}" "$gpu_module"; do
      [[ -x $tmp/b/bin/$b ]] || fail "gpu-bundle: bin/$b missing"
    done
    tar tJf "$tmp/b/runtime.tar.xz" >"$tmp/files" || fail "gpu-bundle: runtime.tar.xz unreadable"
    for f in usr/bin/mpirun usr/bin/orterun; do
      grep -qx "$f" "$tmp/files" || fail "gpu-bundle: runtime.tar.xz lacks $f"
    done
    for f in /libmpi.so.40 /mca_plm_rsh.so /libyaml-cpp.so /libsimgrid.so; do
      grep -qF "$f" "$tmp/files" || fail "gpu-bundle: runtime.tar.xz lacks $f"
    done
    # What the GPU host serves itself must not travel: its own C++ runtime and CUDA libraries.
    grep -E "libstdc\+\+|libcudart|libnccl|libcublas" "$tmp/files" && fail "gpu-bundle packed a host library"
    bash -n "$tmp/b/env.sh" || fail "gpu-bundle: env.sh is not valid shell"
    grep -q "OPAL_PREFIX=/opt/rm/usr" "$tmp/b/env.sh" || fail "gpu-bundle: env.sh sets no OPAL_PREFIX"
  else
    fail "gpu-bundle of $build: $(tail -3 "$tmp/o")"
  fi
fi
[[ $failures -eq 0 ]] && echo "gpu scripts: OK"
