#!/bin/bash
# MoE normal mode's direct path (src/moe/direct.c, direct.cu) on one GPU, ranks sharing it
# under CUDA MPS: test_moe_direct on 2-4 ranks (equal to the staged path, a late rank);
# test_moe --device on 1-4 ranks with the default window (one round), a 16 KiB window
# (rounds of 1 to 12 tokens) and none (the staged path); test_moe_ll (the layout's meta
# changed under it); moebench on the DeepSeek-V3 shape through the window, in rounds and
# staged, in the same run (1 rank beside PyTorch, then 2 and 4 ranks; fp8 dispatch on 1 and
# 2), and shapes that take other paths; then, with SANITIZE=1, compute-sanitizer memcheck and
# racecheck over test_moe in rounds, and each kernel's time by Nsight Compute.
# Writes OUT/moe-direct-{tests,bench,sanitizer,kernels}.txt and *.json.
# usage: scripts/gpu/moe_direct.sh OUT [BUILD]    (run from the repository root)
source "$(dirname "$0")/common.sh"
export WEFT_TIMEOUT_MS=${WEFT_TIMEOUT_MS:-20000}
t="$out/moe-direct-tests.txt" bench="$out/moe-direct-bench.txt" san="$out/moe-direct-sanitizer.txt"
mb="$b/bench/moebench --gpu"
ds="--tokens 4096 --hidden 7168 --topk 8 --experts 256 -d bf16"
mps_start "$t"
for n in 1 2 3 4; do step "$t" "$b/tests/mp/test_moe" $n --device; done
for n in 1 2 3 4; do WEFT_MOE_WINDOW_BYTES=16384 step "$t" "$b/tests/mp/test_moe" $n --device; done
for n in 2 4; do WEFT_MOE_WINDOW_BYTES=0 step "$t" "$b/tests/mp/test_moe" $n --device; done
for n in 2 3 4; do step "$t" "$b/tests/gpu/test_moe_direct" $n --share; done
for n in 2 4; do step "$t" "$b/tests/gpu/test_moe_ll" $n --share; done
step "$bench" $mb --ranks 1 $ds --compare torch --json "$out/moe-direct-r1.json"
WEFT_MOE_WINDOW_BYTES=0 step "$bench" $mb --ranks 1 $ds --json "$out/moe-staged-r1.json"
WEFT_MOE_WINDOW_BYTES=67108864 step "$bench" $mb --ranks 1 $ds
for n in 2 4; do
  step "$bench" $mb --ranks $n $ds --json "$out/moe-direct-r$n.json"
  WEFT_MOE_WINDOW_BYTES=0 step "$bench" $mb --ranks $n $ds --json "$out/moe-staged-r$n.json"
  WEFT_MOE_WINDOW_BYTES=67108864 step "$bench" $mb --ranks $n $ds
done
for n in 1 2; do # fp8 dispatch: through the window, then staged
  step "$bench" $mb --ranks $n $ds --fp8
  WEFT_MOE_WINDOW_BYTES=0 step "$bench" $mb --ranks $n $ds --fp8
done
step "$bench" $mb --ranks 2 --tokens 1000 --hidden 256 --topk 8 --experts 8192 -d f32
step "$bench" $mb --ranks 4 --tokens 300 --hidden 64 --topk 32 --experts 64 -d f32
step "$bench" $mb --ranks 3 --tokens 5000 --hidden 100 --topk 5 --experts 99 -d f16 --align 16
mps_stop
[ "${SANITIZE:-0}" = 1 ] || exit $fail
cs=/usr/local/cuda/bin/compute-sanitizer
if [ -x "$cs" ]; then
  for tool in memcheck racecheck; do
    WEFT_MOE_WINDOW_BYTES=16384 WEFT_TIMEOUT_MS=120000 step "$san" "$cs" --tool $tool \
      --target-processes all "$b/tests/mp/test_moe" 2 --device
  done
  step "$san" "$cs" --tool memcheck --target-processes all "$b/tests/gpu/test_moe_direct" 2 --share
else
  echo "no compute-sanitizer" >> "$san"
fi
ncu_kernels "$out/moe-direct-kernels.txt" $mb --ranks 1 $ds -n 1 -w 0 -c 0
exit $fail
