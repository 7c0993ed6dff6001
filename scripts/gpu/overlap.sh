#!/bin/bash
# The training examples' overlap of communication with compute, between GPUs: each example
# with --gpu --ranks N (one process a GPU) and --measure-overlap, which runs the full step,
# then the same math without communication, then the same communication without math, and
# prints efficiency = (compute + communication - step) / communication. Cases: data parallel
# (DDP and ZeRO-1/2/3, with and without overlap), tensor parallel (TP N, sequence parallel),
# expert parallel (EP N), on SHAPE "batch seq channels layers heads" (per rank). Writes
# OUT/overlap.txt (each run's last lines) and OUT/overlap-summary.txt (a line a case).
# Needs N GPUs (N = RANKS, 2 by default): ranks sharing a GPU share its SMs too, so their
# compute-only time is not what the full step overlaps (FORCE=1 runs anyway, to check the
# script).
# usage: scripts/gpu/overlap.sh OUT [BUILD]    (from the repository root, BUILD built:
#   ninja -C BUILD examples/zero examples/tp examples/moe)
source "$(dirname "$0")/common.sh"
n=${RANKS:-2}
gpus=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU')
if [ "$gpus" -lt "$n" ] && [ "${FORCE:-0}" != 1 ]; then
  echo "overlap.sh: $n ranks need $n GPUs, $gpus here (FORCE=1 runs anyway)" | tee "$out/overlap.txt"
  exit 1
fi
read -r B T C L H <<< "${SHAPE:-4 256 768 12 12}"
model="--batch $B --seq $T --channels $C --layers $L --heads $H --lr 3e-4"
steps="--steps ${STEPS:-20}"
log="$out/overlap.txt" sum="$out/overlap-summary.txt"
: > "$sum"
: > "$log"
[ "$gpus" -lt "$n" ] && mps_start "$log"
run() { # tag, example, flags...: this case's overlap line, or FAILED
  local tag=$1 from line
  shift
  from=$(($(wc -l < "$log") + 1))
  # shellcheck disable=SC2086
  step "$log" "$b/examples/$1" --gpu --ranks "$n" $steps $model --measure-overlap "${@:2}"
  line=$(tail -n +"$from" "$log" | grep '^# overlap' | tail -1 | sed 's/^# overlap: //')
  if tail -n +"$from" "$log" | grep -q '^FAILED'; then line="FAILED (see overlap.txt)"; fi
  echo "$tag: ${line:-FAILED (no overlap line)}" >> "$sum"
}
for stage in 0 1 2 3; do
  run "zero stage $stage" zero --stage $stage
  run "zero stage $stage, no overlap" zero --stage $stage --no-overlap
done
run "tp $n" tp --tp "$n"
run "tp $n, sequence parallel" tp --tp "$n" --sp
run "tp $n, no overlap" tp --tp "$n" --no-overlap
run "ep $n (8 experts, top 2)" moe --experts 8 --topk 2
run "ep $n, no overlap" moe --experts 8 --topk 2 --no-overlap
[ "$gpus" -lt "$n" ] && mps_stop
exit $fail
