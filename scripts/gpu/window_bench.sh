#!/usr/bin/env bash
# Collectives on registered windows (collbench --window: weft's buffers registered with
# weft_window_register, NCCL's with ncclCommRegister) against NCCL in the same run, 2 GPUs:
# allreduce, allgather, reduce_scatter and alltoall, f32 and bf16, 8 B-4 GiB (sizes up to
# 256 MiB checked against the oracle), with the copy engines on (WEFT_CE_MIN_BYTES=auto: from
# 64 MiB blocks, allreduce from 128 MiB segments); then reduce_scatter and allreduce of
# 512 MiB-4 GiB with the peers' buffers read at every size (WEFT_DIRECT_READ_MAX_BYTES=4G, the
# copy engines off), which is why the default stops reading at 64 MiB; and allgather and
# alltoall of 16 MiB-4 GiB on the kernels alone (WEFT_CE_MIN_BYTES=0, the default), against
# which the copy engines' threshold was chosen. Tables in OUT/sweep-direct*.txt, rows in
# OUT/sweep-direct-*.json.
# usage: scripts/gpu/window_bench.sh OUT [BUILD]    (ITERS: timed iterations, default 20)
set -uo pipefail
source "$(dirname "$0")/common.sh"
rc=0
for t in float bfloat16; do
  WEFT_CE_MIN_BYTES=auto "$b/bench/collbench" -C $colls -d "$t" -b 8 -e 256M -n "${ITERS:-20}" \
    -w 5 --window --compare nccl --json "$out/sweep-direct-$t-small.json" \
    > "$out/sweep-direct-$t.txt" 2>&1 || rc=1
  WEFT_CE_MIN_BYTES=auto "$b/bench/collbench" -C $colls -d "$t" -b 512M -e 4G -n "${ITERS:-20}" \
    -w 3 -c 0 --window --compare nccl --json "$out/sweep-direct-$t-large.json" \
    >> "$out/sweep-direct-$t.txt" 2>&1 || rc=1
done
WEFT_CE_MIN_BYTES=0 WEFT_DIRECT_READ_MAX_BYTES=4294967296 "$b/bench/collbench" \
  -C allreduce,reduce_scatter -b 512M -e 4G -n 10 -w 3 -c 0 --window --compare nccl \
  --json "$out/sweep-direct-reads.json" \
  > "$out/sweep-direct-reads.txt" 2>&1 || rc=1
WEFT_CE_MIN_BYTES=0 "$b/bench/collbench" -C allgather,alltoall -b 16M -e 4G -f 2 -n 10 -w 3 \
  -c 0 --window --compare nccl --json "$out/sweep-direct-kernels.json" \
  > "$out/sweep-direct-kernels.txt" 2>&1 || rc=1
grep -h "WRONG\|failed" "$out"/sweep-direct*.txt
exit $rc
