#!/usr/bin/env bash
# The GPU sweep behind bench/results/<date>-h200x2.json: one process per GPU, 8 B to 4 GiB,
# f32 and bf16, allreduce, allgather, reduce_scatter and alltoall, NCCL timed in the same
# run on the same buffers (--compare nccl). Sizes up to 256 MiB are checked against the
# oracle; the four largest are timed only (their host-side check would take most of a lease).
# Then small allreduces as CUDA-graph replays against NCCL's (sweep-graph-allreduce.*), and
# host-staged regions against NCCL's shared-memory transport (sweep-hoststaged.*), and
# sendrecv, broadcast and reduce, f32, 8 B-4 GiB (sweep-rooted-p2p.*), and the collectives
# on registered windows (scripts/gpu/window_bench.sh, sweep-direct*).
# usage: scripts/gpu/bench.sh OUT [BUILD]    (ITERS: timed iterations, default 20)
set -uo pipefail
source "$(dirname "$0")/common.sh"
rc=0
for t in float bfloat16; do
  "$b/bench/collbench" -C $colls -d "$t" -b 8 -e 256M -n "${ITERS:-20}" -w 5 --compare nccl \
    --json "$out/sweep-$t-small.json" --plot "$out/sweep-$t-small.png" > "$out/sweep-$t.txt" 2>&1 ||
    rc=1
  "$b/bench/collbench" -C $colls -d "$t" -b 512M -e 4G -n "${ITERS:-20}" -w 3 -c 0 \
    --compare nccl --json "$out/sweep-$t-large.json" >> "$out/sweep-$t.txt" 2>&1 || rc=1
done
"$b/bench/collbench" -C allreduce -b 8 -e 1M -f 4 -n 50 -w 10 -G 1 --compare nccl \
  --json "$out/sweep-graph-allreduce.json" > "$out/sweep-graph-allreduce.txt" 2>&1 || rc=1
# Host-staged regions (as where GPUs cannot map each other) against NCCL without peer-to-peer
# (its shared-memory transport), f32, 8 B-256 MiB, checked.
WEFT_P2P_DISABLE=1 NCCL_P2P_DISABLE=1 "$b/bench/collbench" -C $colls -b 8 -e 256M -f 4 -n 10 -w 3 \
  --compare nccl --json "$out/sweep-hoststaged.json" > "$out/sweep-hoststaged.txt" 2>&1 || rc=1
"$b/bench/collbench" -C sendrecv,broadcast,reduce -b 8 -e 256M -f 4 -n "${ITERS:-20}" -w 5 \
  --compare nccl --json "$out/sweep-rooted-p2p-small.json" > "$out/sweep-rooted-p2p.txt" 2>&1 || rc=1
"$b/bench/collbench" -C sendrecv,broadcast,reduce -b 1G -e 4G -f 4 -n "${ITERS:-20}" -w 3 -c 0 \
  --compare nccl --json "$out/sweep-rooted-p2p-large.json" >> "$out/sweep-rooted-p2p.txt" 2>&1 ||
  rc=1
"$(dirname "$0")/window_bench.sh" "$out" "$b" || rc=1
grep -h "WRONG\|failed" "$out"/sweep-*.txt
exit $rc
