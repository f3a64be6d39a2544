# Sourced by tests/e2e/*.sh (not a test itself: ctest runs tests/e2e/*.sh only).
# need <command> [why]: skip the test (exit 77, "skipped: ...") when <command> is missing.
need() {
  command -v "$1" >/dev/null 2>&1 && return
  echo "skipped: $1 not found${2:+ ($2)}"
  exit 77
}
# A scratch folder in $tmp, removed when the test exits.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Each test's mpiruns keep their session directories in its own folder: under ctest -j,
# Open MPI 4's shared /tmp/ompi.<host>.<uid> tree races (one mpirun's cleanup removes the
# top directory while another creates its job folder: "ORTE_ERROR_LOG: Error in file
# util/session_dir.c", open-mpi/ompi issue #7049). Open MPI 5's PRRTE reads the second name.
export OMPI_MCA_orte_tmpdir_base=$tmp PRTE_MCA_prte_tmpdir_base=$tmp
# Every test's ranks share this host, so Open MPI's ob1 messaging (shared memory) carries
# them; the default UCX layer probes the network devices first, 0.2 s of each launch here
# (an MPI hello of 4 ranks: 0.61 s against 0.39 s), and the tests launch mpirun hundreds of
# times. A choice already in the environment wins.
export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1}
# fail <what>: report and count a failure; a test ends with [[ $failures -eq 0 ]].
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
