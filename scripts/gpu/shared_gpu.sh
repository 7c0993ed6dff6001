#!/bin/bash
# Ranks sharing one GPU, without and with CUDA MPS: the device alltoall's latency (collbench,
# 2 ranks, 8 B-1 MiB) and the MoE decode case in low-latency mode (moebench, 2 ranks). Without
# MPS the processes' kernels take turns on the GPU; with it they run side by side. MPS runs as
# this user's daemon for the script's duration only (pipe and log under OUT), and is asked to
# quit at the end. Writes OUT/shared-{plain,mps}-{alltoall,moe}.txt.
# usage: scripts/gpu/shared_gpu.sh OUT [BUILD]    (run from the repository root)
source "$(dirname "$0")/common.sh"
fail=0
run_set() { # label
  "$b/bench/collbench" --gpu --ranks 2 -C alltoall -b 8 -e 1M -n 20 -w 5 \
    > "$out/shared-$1-alltoall.txt" 2>&1 || fail=1
  "$b/bench/moebench" --gpu --ranks 2 --mode ll --tokens 128 --hidden 7168 --topk 8 \
    --experts 256 -d bf16 -n 50 -w 10 > "$out/shared-$1-moe.txt" 2>&1 || fail=1
}
run_set plain
export CUDA_MPS_PIPE_DIRECTORY="$out/mps-pipe" CUDA_MPS_LOG_DIRECTORY="$out/mps-log"
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
if command -v nvidia-cuda-mps-control > /dev/null && nvidia-cuda-mps-control -d; then
  run_set mps
  echo quit | nvidia-cuda-mps-control
else
  echo "no MPS here (nvidia-cuda-mps-control missing or refused)" > "$out/shared-mps-alltoall.txt"
  fail=1
fi
rm -rf "$CUDA_MPS_PIPE_DIRECTORY"
exit $fail
