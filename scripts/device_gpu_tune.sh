#!/usr/bin/env bash
# The tuning experiments behind the device defaults, as they ran on nvidia-h200-x2 (2026-11-30)
# from a copy of the build (BUILD=.devbin there). Progress lines ("sizes done") were dropped.
#   1 -> bench/results/2026-11-30-h200x2-tuning-1.txt: staging chunk / stages / channels at
#        256 MiB (busbw), then small allreduce as CUDA-graph replays and reduce_scatter/alltoall
#        at 1M/16M/256M. This ran on the build that allowed at most 32 collective channels.
#   2 -> bench/results/2026-11-30-h200x2-tuning-2.txt: the same at 64 MiB and 1 GiB with up
#        to 64 channels; then allreduce 16 KiB-4 MiB for each WEFT_ONESHOT_MAX_BYTES.
# Columns of the size lines: in "size:A/B" A is weft's time (us) and B NCCL's busbw (GB/s);
# in the space-separated ones of experiment 1: size, weft time (us), then NCCL's columns
# (time or busbw as awk picked them: $14 time, $15 busbw, $16 ratio, $17 empty).
# usage: scripts/device_gpu_tune.sh 1|2 [BUILD]
set -uo pipefail
exp=${1:?usage: device_gpu_tune.sh 1|2 [BUILD]}
b=${2:-build-dev}
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
cb=$b/bench/collbench
if [ "$exp" = 1 ]; then
  for v in "65536 4 32" "262144 4 32" "1048576 2 32" "262144 2 32" "131072 4 16"; do
    set -- $v
    for c in allgather allreduce; do
      r=$(WEFT_P2P_CHUNK_BYTES=$1 WEFT_P2P_STAGES=$2 WEFT_P2P_CHANNELS=$3 timeout 60 $cb -C $c \
        -b 256M -e 256M -n 5 -w 2 -c 0 | grep -v "^#" | awk '{print $8}')
      echo "chunk=$1 stages=$2 ch=$3 $c busbw=$r"
    done
  done
  echo "graph mode small allreduce:"
  timeout 60 $cb -C allreduce -b 8 -e 64K -f 8 -n 50 -w 10 -G 1 --compare nccl | grep -v "^#" |
    awk '{print $1, $6, $15, $17}'
  echo "rs/a2a quick:"
  timeout 90 $cb -C reduce_scatter,alltoall -b 1M -e 256M -f 16 -n 5 -w 2 --compare nccl |
    grep -v "^#" | awk '{print $1, $6, $8, $10, $15, $16, $17}'
  exit 0
fi
for v in "262144 2 32" "262144 2 64" "524288 2 64" "1048576 2 64" "131072 4 64"; do
  set -- $v
  for c in allgather allreduce; do
    r=$(WEFT_P2P_CHUNK_BYTES=$1 WEFT_P2P_STAGES=$2 WEFT_P2P_CHANNELS=$3 timeout 60 $cb -C $c \
      -b 64M -e 1G -f 16 -n 5 -w 2 -c 0 | grep -v "^#" | awk '{printf "%s ", $8}')
    echo "chunk=$1 stages=$2 ch=$3 $c busbw(64M,1G)=$r"
  done
done
for lim in 1 65536 131072 262144 524288 1048576; do
  echo "oneshot max $lim:"
  WEFT_ONESHOT_MAX_BYTES=$lim timeout 60 $cb -C allreduce -b 16K -e 4M -n 20 -w 5 --compare nccl |
    grep -v "^#" | awk '{printf "%s:%s/%s ", $1, $6, $15} END {print ""}'
done
echo "small, stream mode:"
timeout 60 $cb -C allreduce,allgather,reduce_scatter,alltoall -b 8 -e 1M -f 32 -n 50 -w 10 \
  --compare nccl | grep -v "^#" | awk '{printf "%s:%s/%s ", $1, $6, $15} END {print ""}'
