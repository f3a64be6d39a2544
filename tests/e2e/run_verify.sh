#!/usr/bin/env bash
# `ringmaster run --verify` on real MPI ranks (oversubscribed) over a matrix of plans:
# P = 1..4; flat, bidirectional and two-level schedules; causal and not; MHA and GQA;
# contiguous, striped and zigzag load balance; whole and split (kv_subblocks 2) transfers;
# a data-parallel case (2 rings of 2); rings over permuted rank orders; all-gather CP
# (cp_comm_type all_gather) over P = 2..4, load balances, sub-blocks, dp 2 and an order;
# all-to-all CP (cp_comm_type a2a, Ulysses) over P = 2..4, GQA and MHA, load balances, causal
# and not, dp 2, sub-blocks (which the all-to-all does not split) and an order; and a sliding
# window (13 of 48 tokens) under each kind: the flat ring's fewer steps, all_gather's window
# blocks, a2a's whole-sequence kernel; and a2a+p2p (USP) over 4 and 8 ranks.
# Every run must print "verification: OK" and exit 0.
# Plans are written by hand (the plan.yaml format, planner/plan_io.cc) so every schedule
# is pinned. Usage: run_verify.sh <ringmaster> <source-dir>. Exit 77 = skipped.
set -u
bin=$1
src=$2
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.bash"
need mpirun
cd "$tmp"

# MHA variant of the shipped tiny model (tiny itself is GQA: 4 heads, 2 kv heads).
sed -e 's/^name: tiny/name: tiny-mha/' -e 's/^kv_heads: .*/kv_heads: 4/' \
  "$src/models/tiny.yaml" > tiny-mha.yaml
# 6 heads (and 3 kv heads): a2a over 3 ranks, which must divide both.
sed -e 's/^name: tiny/name: tiny-6h/' -e 's/^heads: .*/heads: 6/' -e 's/^kv_heads: .*/kv_heads: 3/' \
  -e 's/^hidden: .*/hidden: 384/' "$src/models/tiny.yaml" > tiny-6h.yaml
# A sliding window of 13 tokens (Mistral's sliding_window), GQA and MHA.
for m in tiny tiny-mha; do
  sed -e "s/^name: .*/name: $m-swa/" "$src/models/tiny.yaml" > $m-swa.yaml
  [[ $m == tiny-mha ]] && sed -i 's/^kv_heads: .*/kv_heads: 4/' $m-swa.yaml
  echo "sliding_window: 13" >> $m-swa.yaml
done
# cpu-local split into nodes of g devices (two-level rings need nodes); the nodes are
# joined by a small fat tree only so that the topology is complete.
node_topology() {  # <g> <nodes>
  sed -e "s/^name: cpu-local/name: cpu-nodes-$1x$2/" -e "s/^gpus_per_node: .*/gpus_per_node: $1/" \
    -e "s/^max_nodes: .*/max_nodes: $2/" "$src/topologies/cpu-local.yaml" > "cpu-$1x$2.yaml"
  if [[ $2 -gt 1 ]]; then
    cat >> "cpu-$1x$2.yaml" <<EOF
inter:
  kind: fat-tree
  latency_us: 1
  nics_per_node: $1
  nic_gb_per_s: 5
  rail_optimized: true
  nodes_per_leaf: $2
  oversubscription: 1
EOF
  fi
}

# write_plan <file> <model> <topology> <P> <dp> <schedule> <lb> <causal> <subblocks> [order]
# ($strategy: ring, allgather-cp, ulysses, or usp with $split "A, R", a2a degree and ring size)
strategy=ring
split=""
write_plan() {
  local gpus=$(($4 * $5)) order=${10:-}
  [[ -n $order ]] || order=$(seq -s ', ' 0 $((gpus - 1)))
  cat > "$1" <<EOF
format: 1
model: $2
topology: $3
gpus: $gpus
seq_len: 48
causal: $8
workload: attention
passes: forward-backward
plan:
  strategy: $strategy
  cp: $4
  dp: $5${split:+
  hierarchical_context_parallel_sizes: [$split]}
  schedule: $6
  order_name: custom
  order: [$order]
  load_balance: $7
  block_q: 4
  block_kv: 8
  kv_subblocks: $9
  checkpointing: none
  grad_accum: 1
EOF
}

runs=0
start=$(date +%s)
# check <label> <plan args...>
check() {
  local label=$1
  shift
  write_plan plan.yaml "$@"
  runs=$((runs + 1))
  local out rc
  out=$(timeout 60 "$bin" run --plan plan.yaml --verify --iters 1 --timeout-s 20 2>&1)
  rc=$?
  if [[ $rc -ne 0 || $out != *"verification: OK"* ]]; then
    echo "FAIL ($label): exit $rc"
    echo "$out" | tail -15
    failures=$((failures + 1))
  else
    echo "ok   ($label): $(echo "$out" | grep -o 'max rel err [0-9.e+-]*')"
  fi
}

for P in 1 2 3 4; do
  # Hierarchical: nodes of 2 devices when P is even, of 1 otherwise.
  g=$((P % 2 == 0 ? 2 : 1))
  node_topology $g $((P / g))
  for sched in flat bidirectional two-level; do
    topo=cpu-local
    [[ $sched == two-level ]] && topo=$tmp/cpu-${g}x$((P / g)).yaml
    check "P=$P $sched causal GQA zigzag" tiny "$topo" $P 1 $sched zigzag true 1
    check "P=$P $sched causal MHA contiguous" "$tmp/tiny-mha.yaml" "$topo" $P 1 $sched contiguous true 1
    check "P=$P $sched non-causal MHA striped" "$tmp/tiny-mha.yaml" "$topo" $P 1 $sched striped false 1
    check "P=$P $sched causal GQA striped, 2 sub-blocks" tiny "$topo" $P 1 $sched striped true 2
  done
done
# Hierarchical with every device its own node (outer ring only), and two rings (dp = 2).
node_topology 1 4
check "P=4 two-level 4 nodes of 1, causal GQA zigzag" tiny "$tmp/cpu-1x4.yaml" 4 1 two-level zigzag true 1
check "P=2 x dp=2 flat causal GQA zigzag" tiny cpu-local 2 2 flat zigzag true 1
# Rings in any order of the ranks.
check "P=4 flat order 2 0 3 1, causal GQA zigzag" tiny cpu-local 4 1 flat zigzag true 1 "2, 0, 3, 1"
check "P=3 bidirectional order 1 2 0, causal MHA striped" "$tmp/tiny-mha.yaml" cpu-local 3 1 bidirectional striped true 1 "1, 2, 0"
# All-gather CP (cp_comm_type all_gather): the K,V gathered around the ring into one block
# per position, attention against each, the dK,dV partials reduce-scattered home.
strategy=allgather-cp
for P in 2 3 4; do
  check "P=$P all_gather causal GQA zigzag" tiny cpu-local $P 1 flat zigzag true 1
  check "P=$P all_gather non-causal MHA striped, 2 sub-blocks" "$tmp/tiny-mha.yaml" cpu-local $P 1 flat striped false 2
done
check "P=2 x dp=2 all_gather causal GQA contiguous" tiny cpu-local 2 2 flat contiguous true 1
check "P=4 all_gather order 2 0 3 1, causal MHA zigzag" "$tmp/tiny-mha.yaml" cpu-local 4 1 flat zigzag true 1 "2, 0, 3, 1"
# All-to-all CP (cp_comm_type a2a): Q,K,V all-to-all'd to h/P heads of the whole sequence,
# attention there, the output (and dQ,dK,dV) all-to-all'd back.
strategy=ulysses
check "P=2 a2a causal GQA zigzag" tiny cpu-local 2 1 flat zigzag true 1
check "P=3 a2a causal GQA contiguous" "$tmp/tiny-6h.yaml" cpu-local 3 1 flat contiguous true 1
check "P=4 a2a non-causal MHA striped" "$tmp/tiny-mha.yaml" cpu-local 4 1 flat striped false 1
check "P=4 a2a causal MHA zigzag, 2 sub-blocks" "$tmp/tiny-mha.yaml" cpu-local 4 1 flat zigzag true 2
check "P=2 x dp=2 a2a causal GQA striped" tiny cpu-local 2 2 flat striped true 1
check "P=4 a2a order 2 0 3 1, causal MHA zigzag" "$tmp/tiny-mha.yaml" cpu-local 4 1 flat zigzag true 1 "2, 0, 3, 1"
# Sliding window: the ring runs 2 of 4 steps on contiguous chunks of 12, all_gather gathers
# 2 blocks, a2a masks the band in its whole-sequence kernel; zigzag and striped spread it.
strategy=ring
check "P=4 flat window 13, contiguous" "$tmp/tiny-swa.yaml" cpu-local 4 1 flat contiguous true 1
check "P=3 flat window 13, zigzag, 2 sub-blocks" "$tmp/tiny-swa.yaml" cpu-local 3 1 flat zigzag true 2
check "P=2 x dp=2 flat window 13, striped" "$tmp/tiny-swa.yaml" cpu-local 2 2 flat striped true 1
strategy=allgather-cp
check "P=4 all_gather window 13, contiguous" "$tmp/tiny-swa.yaml" cpu-local 4 1 flat contiguous true 1
check "P=3 all_gather window 13, zigzag" "$tmp/tiny-swa.yaml" cpu-local 3 1 flat zigzag true 1
strategy=ulysses
check "P=4 a2a window 13, MHA zigzag" "$tmp/tiny-mha-swa.yaml" cpu-local 4 1 flat zigzag true 1
# a2a+p2p (USP): all-to-alls inside groups of 2 around p2p rings of 2 (or 4) over the groups'
# head-sharded blocks, flat and bidirectional, dp 2, a window, an order.
strategy=usp
split="2, 2"
check "cp 4 = a2a 2 x ring 2, causal MHA zigzag" "$tmp/tiny-mha.yaml" cpu-local 4 1 flat zigzag true 1
check "cp 4 = a2a 2 x ring 2, causal GQA contiguous" tiny cpu-local 4 1 flat contiguous true 1
check "cp 4 = a2a 2 x ring 2, non-causal MHA striped, 2 sub-blocks" "$tmp/tiny-mha.yaml" cpu-local 4 1 flat striped false 2
check "cp 4 = a2a 2 x ring 2 x dp 2, causal GQA zigzag" tiny cpu-local 4 2 flat zigzag true 1
check "cp 4 = a2a 2 x ring 2, window 13, MHA contiguous" "$tmp/tiny-mha-swa.yaml" cpu-local 4 1 flat contiguous true 1
check "cp 4 = a2a 2 x ring 2, order 2 0 3 1, causal MHA zigzag" "$tmp/tiny-mha.yaml" cpu-local 4 1 flat zigzag true 1 "2, 0, 3, 1"
split="2, 4"
check "cp 8 = a2a 2 x ring 4 bidirectional, causal MHA zigzag" "$tmp/tiny-mha.yaml" cpu-local 8 1 bidirectional zigzag true 1
split=""
strategy=ring

echo "$runs runs, $failures failed, $(($(date +%s) - start)) s"
[[ $failures -eq 0 ]]
