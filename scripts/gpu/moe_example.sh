#!/bin/bash
# The mixture-of-experts example (examples/moe) on one GPU, ranks sharing it under CUDA MPS:
# the CUDA back end's operations against the CPU's (test_ops, the MoE ones included), loss
# parity of expert parallel on the GPU against one CPU rank (test_ep ... gpu: 1, 2 and 4
# ranks, top 1 and 2, dropless and capacity-limited), then moe --gpu runs: progress lines,
# --measure-overlap, a checkpoint saved on the GPU and resumed by CPU ranks, and
# compute-sanitizer memcheck over a short run. Writes OUT/moe-example.txt.
# usage: scripts/gpu/moe_example.sh OUT [BUILD]    (from the repository root, BUILD built:
#   ninja -C BUILD examples/moe tests/examples/test_ops tests/examples/test_ep)
source "$(dirname "$0")/common.sh"
log="$out/moe-example.txt"
t="$b/tests/examples"
ck=$(mktemp -d)
mps_start "$log"
step "$log" "$t/test_ops"
for c in "1 2 0" "2 2 0" "4 1 1.0" "4 2 0" "2 1 0" "2 2 1.0"; do # ranks, top k, capacity
  # shellcheck disable=SC2086
  step "$log" "$t/test_ep" $c gpu
done
step "$log" "$b/examples/moe" --gpu --ranks 2 --steps 300
step "$log" "$b/examples/moe" --gpu --ranks 4 --experts 8 --topk 1 --capacity 1.25 --steps 100
step "$log" "$b/examples/moe" --gpu --ranks 2 --steps 20 --batch 8 --seq 256 --channels 256 \
  --layers 4 --heads 4 --experts 8 --measure-overlap
step "$log" "$b/examples/moe" --gpu --ranks 2 --steps 10 --save "$ck/moe"
step "$log" "$b/examples/moe" --ranks 4 --steps 3 --load "$ck/moe"
mps_stop
cs=/usr/local/cuda/bin/compute-sanitizer
[ -x "$cs" ] && WEFT_TIMEOUT_MS=120000 step "$log" "$cs" --tool memcheck --target-processes all \
  "$b/examples/moe" --gpu --ranks 2 --steps 2
rm -rf "$ck"
exit $fail
