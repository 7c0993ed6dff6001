#!/usr/bin/env bash
# What the block budget of ranks sharing a GPU (src/gpu/share.c) changes, against a build
# without it, on one GPU: what init chooses (the INFO lines: no budget for one rank, the
# budget of 2, 3 and 8 ranks), one-rank timings of both builds (collbench, moebench), and
# 2 ranks under MPS (the largest sharing the earlier build survived) with both builds, every
# row checked, and an MPS active thread percentage too small refused. Writes OUT/budget.txt.
# usage: [SWEEP="collbench args"] [MOE_ARGS="moebench args"|skip] \
#        scripts/gpu/shared_budget.sh OUT NEW_BUILD BASE_BUILD
source "$(dirname "$0")/common.sh"
new=${2:?usage: $0 OUT NEW_BUILD BASE_BUILD}
base=${3:?usage: $0 OUT NEW_BUILD BASE_BUILD}
rep="$out/budget.txt"
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; } > "$rep"
sweep=${SWEEP:-"-C allreduce,alltoall -b 8 -e 64M -f 4 -n 20 -w 5"}
moe=${MOE_ARGS:-"--tokens 4096 --hidden 7168 --topk 8 --experts 256 -d bf16 -n 50 -w 10"}
for b in "$new" "$base"; do # one rank: no budget either way, nothing may change
  for rep_i in 1 2; do
    step "$rep" "$b/bench/collbench" --gpu --ranks 1 $sweep
    [ "$moe" = skip ] || step "$rep" "$b/bench/moebench" --gpu --ranks 1 $moe
  done
done
mps_start "$rep"
# MPS's active thread percentage at 3%: too few SMs for 8 ranks, refused naming them
CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=3 step "$rep" "$new/tests/gpu/test_share" 8 --refuse
for n in 1 2 3 8; do # what init chooses
  WEFT_DEBUG=INFO WEFT_DEBUG_SUBSYS=INIT "$new/bench/collbench" --gpu --ranks "$n" -C allreduce \
    -b 8 -e 8 -n 1 -w 0 2>&1 | grep -E "block budget|serves" | sort -u | head -3 >> "$rep"
done
for b in "$new" "$base" "$new" "$base"; do # interleaved, twice
  step "$rep" "$b/bench/collbench" --gpu --ranks 2 $sweep
done
mps_stop
echo "exit: fail=$fail" >> "$rep"
exit $fail
