#!/bin/bash
# moebench on GPUs, each case beside PyTorch's baseline where there is a GPU per rank:
# the DeepSeek-V3 shape (4096 tokens/rank, hidden 7168, top-8 of 256 experts, bf16) and the
# decode case (128 tokens/rank), on one rank per GPU with --compare torch, then on 2 and 4
# ranks (weft only; they share the GPUs when there are fewer). Writes OUT/moebench-*.{txt,json}.
# usage: scripts/gpu/moe_bench.sh OUT [BUILD]    (run from the repository root)
source "$(dirname "$0")/common.sh"
ngpu=$(nvidia-smi -L | wc -l)
ds="--tokens 4096 --hidden 7168 --topk 8 --experts 256 -d bf16"
dec="--tokens 128 --hidden 7168 --topk 8 --experts 256 -d bf16"
fail=0
case_() { # name, moebench flags
  local name=$1
  shift
  echo "## $name: moebench $*" | tee "$out/moebench-$name.txt"
  "$b/bench/moebench" "$@" --json "$out/moebench-$name.json" 2>&1 | tee -a "$out/moebench-$name.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || fail=1
}
case_ deepseek-r$ngpu-torch --gpu --ranks "$ngpu" $ds --compare torch
case_ decode-r$ngpu-torch --gpu --ranks "$ngpu" $dec -n 50 -w 10 --compare torch
for r in 2 4; do case_ deepseek-r$r --gpu --ranks $r $ds; done
exit $fail
