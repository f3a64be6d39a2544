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
# fail <what>: report and count a failure; a test ends with [[ $failures -eq 0 ]].
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
