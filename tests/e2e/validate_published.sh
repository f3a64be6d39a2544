#!/usr/bin/env bash
# `ringmaster validate --published`: the shipped corpus works from any folder, --format json
# has exactly the documented keys, every shipped entry is either priced or says why not, and
# --max-abs-error sets the exit code (checked on a one-entry corpus written here), ratio and
# error follow the one sign convention (published as measured), and the
# shipped corpus stays inside its accuracy guard.
# Usage: validate_published.sh <ringmaster> <source-dir>.
set -u
bin=$1
src=$2
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.bash"
need python3 "to read the JSON"
cd "$tmp"  # the shipped corpus is built in: no files around

# --- the shipped corpus, as JSON ---
check_json='
import json, sys, yaml
want = int(sys.argv[1])
ids_of = {}  # GPU type -> entry ids, from the corpus file (the JSON entries do not carry it)
for e in yaml.safe_load(open(sys.argv[2]))["entries"]:
    ids_of.setdefault(e["gpu"], set()).add(e["id"])
d = json.load(sys.stdin)
top = {"entries", "median_abs_error", "max_abs_error", "heldout_median_abs_error",
       "heldout_max_abs_error", "modelled", "not_modelled", "by_gpu"}
assert set(d) == top, sorted(set(d) ^ top)
assert len(d["entries"]) == want, (len(d["entries"]), want)
keys = {"id", "source", "published", "predicted", "unit", "error", "split", "modelled", "reason"}
modelled = 0
for e in d["entries"]:
    assert set(e) == keys, (e.get("id"), sorted(set(e) ^ keys))
    assert e["split"] in ("fit", "heldout"), e
    assert isinstance(e["source"], str) and e["source"], e  # the whole source text
    if e["modelled"]:
        modelled += 1
        assert e["predicted"] > 0 and e["reason"] is None, e
        assert abs(e["error"] - (e["published"] - e["predicted"]) / e["predicted"]) < 1e-9, e
    else:
        assert e["predicted"] is None and e["error"] is None, e
        assert isinstance(e["reason"], str) and e["reason"], e
assert d["modelled"] == modelled and d["not_modelled"] == want - modelled, d
assert modelled > 0 and d["max_abs_error"] >= d["median_abs_error"] >= 0, d
# by_gpu: each GPU type of the modelled entries, its counts and errors from those entries
gkeys = {"modelled", "median_abs_error", "max_abs_error", "heldout_modelled",
         "heldout_median_abs_error", "heldout_max_abs_error"}
assert sum(g["modelled"] for g in d["by_gpu"].values()) == modelled, d["by_gpu"]
for gpu, g in d["by_gpu"].items():
    assert set(g) == gkeys, (gpu, sorted(set(g) ^ gkeys))
    errs = [abs(e["error"]) for e in d["entries"] if e["modelled"] and e["id"] in ids_of[gpu]]
    assert g["modelled"] == len(errs) and abs(g["max_abs_error"] - max(errs)) < 1e-12, (gpu, g)
types = len(d["by_gpu"])
print(f"{modelled} of {want} entries modelled, {types} GPU types")
'
entries=$(grep -c '^  - id:' "$src/validation/published.yaml")
if json=$("$bin" validate --published --format json); then
  python3 -c "$check_json" "$entries" "$src/validation/published.yaml" <<<"$json" || fail "validate --published --format json is not the documented document"
else
  fail "validate --published --format json exited $?"
fi
table=$("$bin" validate --published) || fail "validate --published exited $?"
[[ $table == *"entries modelled"* ]] || fail "the table lacks its summary: $table"

# --- the accuracy guard on the shipped corpus, in the issue's terms (|predicted / published - 1|,
# the distance from the published figure): median <= 7 % (the target) and every modelled entry
# within 15 % (the target), except the six entries the README's accuracy section names as
# still outside, each held to its present distance rounded up: a change that makes any entry
# worse than that, or moves another one out of the band, fails. Drop a name here once its
# entry is inside 15 %.
python3 -c '
import json, sys
outside = {  # README "Accuracy against published runs": why each is still outside
    "llmfoundry-h100-mpt30b-8k": 0.21,
    "llmfoundry-a100-mpt30b-8k": 0.36,  # the same 30B drop at 8K on A100
    "torchtitan-h100-llama3-8b-cp4-128k": 0.27,
    "torchtitan-h100-llama3-8b-cp8-256k": 0.34,  # torchtitan CP rows: see the README
    "fa2-a100-gpt3xl-2k": 0.17,  # PyTorch DDP + ZeRO-1 on the GEMM size curve, which its 8K row meets
    "torchtitan-h100-llama3-405b-pp8-interleaved": 0.24,  # at its default micro-batches (16 of 2), which its memory reading requires
}
d = json.load(sys.stdin)
dev = sorted((abs(e["predicted"] / e["published"] - 1), e["id"]) for e in d["entries"] if e["modelled"])
median = dev[len(dev) // 2][0]
assert median <= 0.07, "median %.3f" % median
out = [f"{i} {v:.3f}" for v, i in dev if v > outside.get(i, 0.15)]
assert not out, out
inside = [i for v, i in dev if i in outside and v <= 0.15]
assert not inside, ("inside the band now: drop from the list", inside)
print("guard: median %.1f %%, worst %.1f %% (%s)" % (100 * median, 100 * dev[-1][0], dev[-1][1]))
' <<<"$json" || fail "the shipped corpus left its accuracy guard"

# --- every figure in the one sign convention, the published figure as the measured one:
# ratio = published / predicted and error = (published - predicted) / predicted, both
# headers saying so (--format csv carries the table's columns) ---
csv=$("$bin" validate --published --format csv) || fail "validate --published --format csv exited $?"
python3 -c '
import csv, sys
rows = list(csv.DictReader(sys.stdin))
assert rows, "no rows"
for r in rows:
    assert r["source"] and " " not in r["source"], r  # the short name: repository or arXiv id
    pub, pred = float(r["published"]), float(r["predicted"])
    ratio, err = float(r["ratio (pub/pred)"]), float(r["error % ((pub-pred)/pred)"])
    assert abs(ratio - pub / pred) <= 0.006, (r["entry"], ratio, pub / pred)
    assert abs(err - 100 * (pub - pred) / pred) <= 0.12, (r["entry"], err)  # 4 digits shown, 0.1 %
    # ratio shows 2 decimals: 1.00 can stand for an error of +-0.4 %
    assert (ratio > 1) == (err > 0) or abs(err) < 0.1 or abs(ratio - 1) < 0.006, (r["entry"], ratio, err)
' <<<"$csv" || fail "validate --published --format csv: ratio or error not in the one sign convention"

# --- --max-abs-error on a corpus of one entry ---
sed -n '/^version:/,/^entries:/p' "$src/validation/published.yaml" >one.yaml
sed -n '/^  - id: rfa-a100-fwd-ring$/,/^$/p' "$src/validation/published.yaml" >>one.yaml
grep -q 'id: rfa-a100-fwd-ring' one.yaml || fail "entry rfa-a100-fwd-ring not found in the shipped corpus"
"$bin" validate --published one.yaml --max-abs-error 100 >/dev/null
rc=$?
[[ $rc -eq 0 ]] || fail "--max-abs-error 100 exited $rc (want 0)"
out=$("$bin" validate --published one.yaml --max-abs-error 0 2>&1)
rc=$?
[[ $rc -eq 1 ]] || fail "--max-abs-error 0 exited $rc (want 1)"
[[ $out == *"rfa-a100-fwd-ring"* ]] || fail "--max-abs-error 0 does not name the entry: $out"
"$bin" validate --published one.yaml --format json >/dev/null || fail "without --max-abs-error it exited $? (want 0)"

# --- a bad corpus: exit 2, file, entry and field named ---
sed 's/^    gpus: 8$/    gpus: eight/' one.yaml >bad.yaml
out=$("$bin" validate --published bad.yaml 2>&1)
rc=$?
[[ $rc -eq 2 ]] || fail "a bad corpus exited $rc (want 2)"
[[ $out == *"bad.yaml:"*"rfa-a100-fwd-ring.gpus: expected a whole number"* ]] || fail "bad corpus message: $out"

# --- --entry: one entry, what was assumed, and the plan it was priced with, whose prediction is
# the one the whole table gives ---
one=$("$bin" validate --published --entry fa2-a100-gpt3xl-2k) || fail "validate --entry exited $?"
[[ $one == *"entry fa2-a100-gpt3xl-2k (fit split)"* && $one == *"zero1 (optimizer states sharded)"* &&
   $one == *"micro-batch                         8 sequences per data-parallel replica"* ]] || fail "validate --entry: $one"
"$bin" validate --published --entry fa2-a100-gpt3xl-2k --format json | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert set(d) == {"id", "source", "published", "predicted", "unit", "error", "split", "modelled", "reason",
                  "assumed", "plan"}, sorted(d)
assert d["plan"]["plan"]["sharding"] == "zero1" and d["plan"]["plan"]["micro_batch"] == 8, d["plan"]["plan"]
whole = {e["id"]: e for e in json.loads(open(sys.argv[1]).read())["entries"]}
assert abs(d["predicted"] - whole[d["id"]]["predicted"]) < 1e-9, (d["predicted"], whole[d["id"]])
' <(printf '%s' "$json") || fail "validate --entry --format json"
out=$("$bin" validate --published --entry fa2-a100-gpt3xl-3k 2>&1)
rc=$?
[[ $rc -eq 2 && $out == *"--entry: no entry 'fa2-a100-gpt3xl-3k'"*"closest: fa2-a100-gpt3xl-2k"* ]] ||
  fail "an unknown --entry: exit $rc, $out"
# every shipped entry is modelled; an attention call's memory is not (a corpus of one)
sed 's/^    metric: iterations_per_s$/    metric: gib_per_gpu/' one.yaml >nm.yaml
grep -q 'metric: gib_per_gpu' nm.yaml || fail "the entry rfa-a100-fwd-ring has no iterations_per_s metric to change"
nm=$("$bin" validate --published nm.yaml) || fail "validate --published (not modelled) exited $?"
[[ $nm == *"0 of 1 entries modelled"* && $nm == *"not modelled yet (1)"* ]] || fail "the table of an unmodelled entry: $nm"
nm=$("$bin" validate --published nm.yaml --entry rfa-a100-fwd-ring) || fail "validate --entry (not modelled) exited $?"
[[ $nm == *"not modelled: memory of an attention call alone"* ]] || fail "validate --entry, not modelled: $nm"

# --- the track record plan and sweep print: the corpus's entries of the plan's GPU type and
# workload that measure time, summarised as this table does (the median of an even count is
# the upper middle one) ---
track='
import json, sys, yaml
gpu, workload, framework = sys.argv[3], sys.argv[4], sys.argv[5]
meta = {e["id"]: e for e in yaml.safe_load(open(sys.argv[2]))["entries"]}
errs = sorted((abs(e["error"]), e["id"]) for e in json.loads(open(sys.argv[1]).read())["entries"]
              if e["modelled"] and meta[e["id"]]["gpu"] == gpu and meta[e["id"]].get("workload", "step") == workload
              and meta[e["id"]]["metric"] != "gib_per_gpu"
              and framework in ("any", meta[e["id"]].get("framework", "any")))
held = sorted(a for a, i in errs if meta[i]["split"] == "heldout")
t = json.load(sys.stdin)["track_record"]
assert t["gpu"] == gpu and t["workload"] == workload and t["framework"] == framework, t
assert t["entries"] == len(errs), (t, len(errs))
assert abs(t["median_abs_error"] - errs[len(errs) // 2][0]) < 1e-9, (t, errs)
assert abs(t["max_abs_error"] - errs[-1][0]) < 1e-9 and t["worst_entry"] == errs[-1][1], (t, errs[-1])
assert t["heldout_entries"] == len(held), t
own = sum(meta[i]["source"].startswith("ringmaster (own measurement") for a, i in errs)
assert t["own_measurements"] == own, (t, own)
assert (t["heldout_median_abs_error"] is None if not held
        else abs(t["heldout_median_abs_error"] - held[len(held) // 2]) < 1e-9), t
print("track record", gpu, workload, len(errs), "entries, median %.1f %%" % (100 * t["median_abs_error"]))
'
"$bin" plan --model llama2-7b --topology dgx-a100-ib --gpus 16 --seq 32k --format json |
  python3 -c "$track" <(printf '%s' "$json") "$src/validation/published.yaml" a100-80gb step any ||
  fail "plan's track record (a100-80gb, step) is not the corpus table's"
"$bin" plan --model llama3-8b --topology dgx-h100-superpod --gpus 8 --seq 64k --workload attention --format json |
  python3 -c "$track" <(printf '%s' "$json") "$src/validation/published.yaml" h100-80gb attention any ||
  fail "plan's track record (h100-80gb, attention) is not the corpus table's"
# The project's own H200 timings are a record too, and the line says they are not published.
"$bin" plan --model llama3-8b --topology dgx-h200-ib --gpus 8 --seq 64k --workload attention --format json |
  python3 -c "$track" <(printf '%s' "$json") "$src/validation/published.yaml" h200 attention any ||
  fail "plan's track record (h200, attention) is not the corpus table's"
out=$("$bin" plan --model llama3-8b --topology dgx-h200-ib --gpus 8 --seq 64k --workload attention)
[[ $out == *"track record: "*" h200 attention runs (timed by ringmaster, not published) priced within"* ]] ||
  fail "plan's track record on H200 attention does not say its runs are the project's own: $out"
# --target names the framework: its own runs where the GPU type has some (Megatron's on H100),
# every framework's where it has none (none on A100), and the line says so.
"$bin" plan --model llama3-8b --topology dgx-h100-ib --gpus 16 --seq 64k --target megatron --format json |
  python3 -c "$track" <(printf '%s' "$json") "$src/validation/published.yaml" h100-80gb step megatron ||
  fail "plan --target megatron's track record (h100-80gb) is not the corpus's Megatron runs"
out=$("$bin" plan --model llama2-7b --topology dgx-a100-ib --gpus 16 --seq 32k)
[[ $out == *"track record: "*" published a100-80gb step runs priced within a median "*"; ringmaster validate --published"* ]] ||
  fail "plan's table has no track record line: $out"
out=$("$bin" plan --model llama2-7b --topology dgx-a100-ib --gpus 16 --seq 32k --target megatron)
[[ $out == *"track record: "*" published a100-80gb step runs (none of them megatron's) priced within"* ]] ||
  fail "plan --target megatron on A100 does not say the record is not Megatron's: $out"
[[ $("$bin" sweep --gpus 16 --seqs 32k 2>/dev/null) == *"track record: "*" published a100-80gb step runs"* ]] ||
  fail "sweep's table has no track record line"
# The closest published runs under the track record: for torchtitan's own configuration its
# own row first (distance 1: plan prices bf16 linear layers, the row ran float8), each error
# the one validate --published prints.
closest='
import json, sys
err = {e["id"]: e["error"] for e in json.loads(open(sys.argv[1]).read())["entries"] if e["modelled"]}
runs = json.load(sys.stdin)["closest_published_runs"]
assert len(runs) == 3 and runs[0]["id"] == sys.argv[2] and runs[0]["distance"] == 1, runs
assert all(a["distance"] <= b["distance"] for a, b in zip(runs, runs[1:])), runs
for r in runs:
    assert abs(r["error"] - err[r["id"]]) < 1e-9, (r, err.get(r["id"]))
print("closest published runs:", ", ".join(r["id"] for r in runs))
'
tt="plan --model llama3-8b --topology grand-teton-h100-96gb --gpus 8 --seq 256k --cp 8 --tp 1 --target torchtitan"
# shellcheck disable=SC2086  # $tt is a list of words
"$bin" $tt --format json | python3 -c "$closest" <(printf '%s' "$json") torchtitan-h100-llama3-8b-cp8-256k ||
  fail "plan's closest published runs (torchtitan CP 8) are not its own row first, or not validate's errors"
# shellcheck disable=SC2086
out=$("$bin" $tt)
[[ $out == *"closest published runs: torchtitan-h100-llama3-8b-cp8-256k (h100-96gb) "*" %, "*"; (published - predicted) / predicted"* ]] ||
  fail "plan's table has no closest published runs line: $out"
# A GPU spec no published run has checked (a shipped topology with one constant changed).
sed 's/^  gemm_efficiency: 0.841 /  gemm_efficiency: 0.80 /' "$src/topologies/dgx-a100-ib.yaml" >changed.yaml
grep -q "gemm_efficiency: 0.80 " changed.yaml || fail "could not change dgx-a100-ib's gemm_efficiency"
out=$("$bin" plan --model llama2-7b --topology changed.yaml --gpus 16 --seq 32k)
[[ $out == *"track record: none; no published step run of this GPU, as its topology describes it"* ]] ||
  fail "a changed GPU still claims a track record: $out"
[[ $("$bin" plan --model llama2-7b --topology changed.yaml --gpus 16 --seq 32k --format json |
     python3 -c 'import json,sys; print(json.load(sys.stdin)["track_record"])') == None ]] ||
  fail "a changed GPU's JSON track_record is not null"
[[ $("$bin" plan --model llama2-7b --topology changed.yaml --gpus 16 --seq 32k --format json |
     python3 -c 'import json,sys; print(json.load(sys.stdin)["closest_published_runs"])') == "[]" ]] ||
  fail "a changed GPU's JSON closest_published_runs is not empty"
[[ $out != *"closest published runs"* ]] || fail "a changed GPU still lists closest published runs: $out"

echo "validate_published: $failures failed"
[[ $failures -eq 0 ]]
