#!/bin/bash
# The staged MoE path (WEFT_MOE_WINDOW_BYTES=0) on 4 ranks sharing one GPU, repeated: its
# intermittent wrong combine (docs/moe.md, Device buffers). Each arm of ARMS is a
# comma-separated list of environment assignments ("-": none; default: WEFT_P2P_CHANNELS set
# to each of CHANNELS, "64 16"); the arms' runs alternate, RUNS (12) of each. Each run's outcome and time go to
# OUT/moe-staged-repeat.txt, the first 3 failed runs' output beside it, so that a timeout
# (slow, and an error named) shows apart from a silent wrong value.
# usage: [ARMS="A=1,B=2 -"] [RUNS=N] scripts/gpu/moe_staged_repeat.sh OUT [BUILD]
#   e.g. ARMS="CUDA_DEVICE_MAX_CONNECTIONS=1 CUDA_DEVICE_MAX_CONNECTIONS=32" RUNS=100
source "$(dirname "$0")/common.sh"
export WEFT_TIMEOUT_MS=${WEFT_TIMEOUT_MS:-20000} WEFT_MOE_WINDOW_BYTES=0
log="$out/moe-staged-repeat.txt"
read -ra chans <<< "${CHANNELS:-64 16}"
read -ra arms <<< "${ARMS:-${chans[*]/#/WEFT_P2P_CHANNELS=}}"
declare -A bad
kept=0
mps_start "$log"
for i in $(seq "${RUNS:-12}"); do
  for arm in "${arms[@]}"; do
    env=()
    [ "$arm" = - ] || IFS=, read -ra env <<< "$arm"
    t0=$(date +%s%N)
    env "${env[@]}" timeout 120 "$b/tests/mp/test_moe" 4 --device > "$out/run.txt" 2>&1
    rc=$?
    echo "$arm run $i: rc $rc, $((($(date +%s%N) - t0) / 1000000)) ms" >> "$log"
    if [ $rc != 0 ]; then
      bad[$arm]=$((${bad[$arm]:-0} + 1))
      [ $kept -lt 3 ] && kept=$((kept + 1)) && cp "$out/run.txt" "$out/moe-staged-fail-$kept.txt"
    fi
  done
done
for arm in "${arms[@]}"; do
  echo "$arm: ${bad[$arm]:-0} of ${RUNS:-12} failed" >> "$log"
done
rm -f "$out/run.txt"
mps_stop
