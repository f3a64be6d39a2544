#!/usr/bin/env bash
# The README's `$ ringmaster ...` examples, run in order in one scratch folder: every output
# line the README shows must be a line the command prints (lib/readme_examples.py). The few
# commands that take over a minute are skipped here and named; `--all` runs them too.
# Usage: readme_examples.sh <ringmaster> <source-dir>.
set -u
bin=$1
src=$2
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.bash"
need python3 "to read the README"
python3 "$(dirname "${BASH_SOURCE[0]}")/lib/readme_examples.py" "$bin" "$src"
