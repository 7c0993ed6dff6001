#!/bin/bash
# MoE layout on one GPU (src/moe/route.cu, device_layout.c): the route kernels against a
# host model (tests/gpu/test_route), the device tests on 1-4 ranks sharing it under CUDA
# MPS, moebench's layout beside PyTorch's (argsort + bincount) on the DeepSeek-V3 and decode
# shapes, shapes that take the other code paths (8192 experts: masks in global memory;
# top-32), compute-sanitizer memcheck and racecheck over test_route and test_moe's device
# run, and each layout kernel's time by Nsight Compute. Writes OUT/moe-layout-*.txt, *.json.
# usage: scripts/gpu/moe_layout.sh OUT [BUILD]    (run from the repository root)
source "$(dirname "$0")/common.sh"
export WEFT_TIMEOUT_MS=${WEFT_TIMEOUT_MS:-20000}
t="$out/moe-layout-tests.txt" bench="$out/moe-layout-bench.txt" san="$out/moe-layout-sanitizer.txt"
mb="$b/bench/moebench --gpu"
ds="--tokens 4096 --hidden 7168 --topk 8 --experts 256 -d bf16"
dec="--mode ll --tokens 128 --hidden 7168 --topk 8 --experts 256 -d bf16 -n 50 -w 10"
step "$t" "$b/tests/gpu/test_route"
mps_start "$t"
for n in 1 2 3 4; do step "$t" "$b/tests/mp/test_moe" $n --device; done
for n in 2 4; do step "$t" "$b/tests/gpu/test_moe_ll" $n --share; done
step "$bench" $mb --ranks 1 $ds --compare torch --json "$out/moe-layout-deepseek-r1.json"
step "$bench" $mb --ranks 1 $dec --compare torch --json "$out/moe-layout-decode-r1.json"
for n in 2 4; do step "$bench" $mb --ranks $n $ds; done
step "$bench" $mb --ranks 2 --tokens 1000 --hidden 256 --topk 8 --experts 8192 -d f32
step "$bench" $mb --ranks 3 --tokens 777 --hidden 100 --topk 5 --experts 6999 -d bf16 --mode ll
step "$bench" $mb --ranks 4 --tokens 300 --hidden 64 --topk 32 --experts 64 -d f32
mps_stop
cs=/usr/local/cuda/bin/compute-sanitizer
if [ -x "$cs" ]; then
  for tool in memcheck racecheck; do
    step "$san" "$cs" --tool $tool "$b/tests/gpu/test_route"
    WEFT_TIMEOUT_MS=120000 step "$san" "$cs" --tool $tool --target-processes all \
      "$b/tests/mp/test_moe" 2 --device
  done
else
  echo "no compute-sanitizer" >> "$san"
fi
# one layout's kernels (and the dispatch's and combine's after it)
ncu_kernels "$out/moe-layout-kernels.txt" $mb --ranks 1 $ds -n 1 -w 0 -c 0
exit $fail
