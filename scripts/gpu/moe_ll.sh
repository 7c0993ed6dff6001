#!/bin/bash
# MoE low-latency mode on windows (src/moe/ll.c) on one GPU, ranks sharing it under CUDA MPS:
# test_moe_ll (graph replays, eager calls, refusals) on 2 and 4 ranks, test_moe --device
# (every shape, low-latency ones included) on 1-4, moebench's decode case in low-latency mode
# (1 rank beside PyTorch, then 2 and 4 ranks; the calls eager, then each a CUDA graph
# replayed; fp8 dispatch too, and on the DeepSeek-V3 shape in normal mode), and
# compute-sanitizer memcheck and racecheck over test_moe_ll without MPS.
# Writes OUT/moe-ll-{tests,bench,sanitizer}.txt.
# usage: scripts/gpu/moe_ll.sh OUT [BUILD]    (run from the repository root)
source "$(dirname "$0")/common.sh"
export WEFT_TIMEOUT_MS=${WEFT_TIMEOUT_MS:-20000}
t="$out/moe-ll-tests.txt" bench="$out/moe-ll-bench.txt" san="$out/moe-ll-sanitizer.txt"
mps_start "$t"
for n in 2 4; do step "$t" "$b/tests/gpu/test_moe_ll" $n --share; done
for n in 1 2 3 4; do step "$t" "$b/tests/mp/test_moe" $n --device; done
dec="--mode ll --tokens 128 --hidden 7168 --topk 8 --experts 256 -d bf16 -n 50 -w 10"
step "$bench" "$b/bench/moebench" --gpu --ranks 1 $dec --compare torch --json "$out/moe-ll-r1.json"
step "$bench" "$b/bench/moebench" --gpu --ranks 1 $dec --graph
step "$bench" "$b/bench/moebench" --gpu --ranks 1 $dec --graph --fp8
ds="--tokens 4096 --hidden 7168 --topk 8 --experts 256 -d bf16"
step "$bench" "$b/bench/moebench" --gpu --ranks 1 $ds --fp8
for n in 2 4; do
  step "$bench" "$b/bench/moebench" --gpu --ranks $n $dec
  step "$bench" "$b/bench/moebench" --gpu --ranks $n $dec --graph
done
mps_stop
cs=/usr/local/cuda/bin/compute-sanitizer
if [ -x "$cs" ]; then
  export WEFT_TIMEOUT_MS=120000
  step "$san" "$cs" --tool memcheck --target-processes all "$b/tests/gpu/test_moe_ll" 2 --share
  step "$san" "$cs" --tool racecheck --target-processes all "$b/tests/gpu/test_moe_ll" 2 --share
else
  echo "no compute-sanitizer" >> "$san"
fi
exit $fail
