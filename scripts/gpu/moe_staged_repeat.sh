#!/bin/bash
# The staged MoE path (WEFT_MOE_WINDOW_BYTES=0) on 4 ranks sharing one GPU, repeated: its
# intermittent wrong combine, run RUNS times (12) with each collective channel count in
# CHANNELS ("64 16"). Each run's seconds and outcome go to OUT/moe-staged-repeat.txt, a failed
# run's whole output beside it, so a timeout (slow, and an error named) shows apart from a
# silent wrong value.
# usage: scripts/gpu/moe_staged_repeat.sh OUT [BUILD]    (run from the repository root)
source "$(dirname "$0")/common.sh"
export WEFT_TIMEOUT_MS=${WEFT_TIMEOUT_MS:-20000} WEFT_MOE_WINDOW_BYTES=0
log="$out/moe-staged-repeat.txt"
mps_start "$log"
for ch in ${CHANNELS:-64 16}; do
  bad=0
  for i in $(seq "${RUNS:-12}"); do
    t0=$(date +%s%N)
    WEFT_P2P_CHANNELS=$ch timeout 120 "$b/tests/mp/test_moe" 4 --device > "$out/run.txt" 2>&1
    rc=$?
    echo "channels $ch run $i: rc $rc, $((($(date +%s%N) - t0) / 1000000)) ms" >> "$log"
    [ $rc = 0 ] || { bad=$((bad + 1)); cp "$out/run.txt" "$out/moe-staged-fail-ch$ch-$i.txt"; }
  done
  echo "channels $ch: $bad of ${RUNS:-12} failed" >> "$log"
done
rm -f "$out/run.txt"
mps_stop
