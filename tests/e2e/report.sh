#!/usr/bin/env bash
# `ringmaster report` opened in headless Chromium: for a sweep, a plan and validate
# --published, every chart renders (the page's title turns to "rendered N charts" once
# vega-embed has drawn them all, "error: ..." on any error) with one SVG per chart, the
# file works offline (no <script src>: the libraries are inlined), and a
# screenshot is kept (RINGMASTER_ARTIFACTS, default the build folder's report-artifacts/).
# Bad input exits 2. Usage: report.sh <ringmaster> <source-dir>. Exit 77 = skipped.
set -u
bin=$1
src=$2
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.bash"
source "$(dirname "${BASH_SOURCE[0]}")/lib/expect_bad.bash"
need chromium "the headless browser that renders the report"
js=${RINGMASTER_JS_DIR:-/usr/local/share/ringmaster/js}
if [[ ! -f $js/node_modules/vega-embed/build/vega-embed.min.js ]]; then
  echo "skipped: the npm charting libraries are not in $js (scripts/install-deps installs them)"
  exit 77
fi
artifacts=${RINGMASTER_ARTIFACTS:-$(dirname "$bin")/../report-artifacts}
mkdir -p "$artifacts"
checked=0

"$bin" sweep --gpus 16,32,64 --seqs 128k,512k,1M --format json >"$tmp/sweep.json" 2>/dev/null || fail "sweep exited $?"
"$bin" plan --gpus 16 --seq 1M --format json >"$tmp/plan.json" 2>/dev/null || fail "plan exited $?"
"$bin" validate --published --format json >"$tmp/validate.json" 2>/dev/null || fail "validate --published exited $?"

render() {  # render <name> <charts expected>
  checked=$((checked + 1))
  if ! "$bin" report "$tmp/$1.json" -o "$tmp/$1.html" 2>"$tmp/$1.err"; then
    fail "report $1.json exited non-zero: $(cat "$tmp/$1.err")"
    return
  fi
  grep -q '<script[^>]*src=' "$tmp/$1.html" && fail "$1.html loads a script from a file or the network"
  # One browser start both dumps the rendered page and takes the screenshot (each start
  # costs about 4 s of the suite's 2 cores).
  timeout 120 chromium --headless=new --no-sandbox --disable-gpu --virtual-time-budget=20000 --hide-scrollbars \
    --window-size=1000,1400 --screenshot="$artifacts/report-$1.png" \
    --dump-dom "file://$tmp/$1.html" >"$tmp/$1.dom" 2>"$tmp/$1.chromium.log"
  local title svgs
  title=$(grep -o "<title>[^<]*</title>" "$tmp/$1.dom" | head -1)
  svgs=$(grep -o '<svg[^>]*class="marks"' "$tmp/$1.dom" | wc -l)
  if [[ $title != "<title>rendered $2 charts</title>" || $svgs -ne $2 ]]; then
    fail "$1.html: title '$title', $svgs SVG charts (want $2)"
  fi
  [[ -s $artifacts/report-$1.png ]] || fail "no screenshot of $1.html"
}
render sweep 4
# The plan table accounts for every GPU: cp x dp, and tp and pp where the plan has them.
checked=$((checked + 1))
python3 - "$tmp/sweep.html" <<'PY' || fail "sweep.html's plan table (above)"
import re, sys
rows = re.findall(r"<tr><td>(\d+)</td><td>[^<]*</td><td>([^<]*)</td><td>([^<]*)</td><td>([^<]*)</td><td>([^<]*)</td>",
                  open(sys.argv[1]).read())
assert len(rows) == 9, rows
for gpus, kind, layout, schedule, balance in rows:
    m = re.fullmatch(r"(\d+) x (\d+)(?:, tp (\d+))?(?:, pp (\d+)(?:/\d+)?)?", layout)
    assert m, layout
    cp, dp, tp, pp = (int(x) if x else 1 for x in m.groups())
    assert cp * dp * tp * pp == int(gpus), (gpus, layout)
    # No ring, no schedule; a2a attends over whole sequences: no load balance either.
    assert (kind == "-") == (cp == 1), (kind, layout)
    assert schedule == "-" or kind.startswith("p2p") or kind.startswith("a2a+p2p"), (kind, schedule)
    assert balance == "-" or kind not in ("-", "a2a"), (kind, balance)
PY
render plan 1
units=$(python3 -c 'import json,sys; print(len({e["unit"] for e in json.load(open(sys.argv[1]))["entries"] if e["modelled"]}))' "$tmp/validate.json")
render validate "$units"

echo '{"something": 1}' >"$tmp/other.json"
expect_bad "expected the JSON of ringmaster sweep, plan or validate" "other.json" -- report "$tmp/other.json" -o "$tmp/o.html"
echo 'not json' >"$tmp/bad.json"
expect_bad "expected JSON" "bad.json" -- report "$tmp/bad.json" -o "$tmp/o.html"

echo "report: $checked checks, $failures failed (screenshots in $artifacts)"
[[ $failures -eq 0 ]]
