#!/usr/bin/env bash
# Issue 45's GPU cases at the exact limits, into OUT/exact_limits.txt: a group of 64 device
# communicators and 65 refused (test_dev_comm), the MoE refusals and full blocks (test_moe,
# test_route), time-sliced and under MPS; and ZeRO's first-step gradients on CUDA (f32, bf16).
# usage: scripts/gpu/exact_limits.sh OUT [BUILD]
set -u
source "$(dirname "$0")/common.sh" # OUT, BUILD (b), the environment, mps_start and mps_stop
r=$out/exact_limits.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > "$r"
one() { # name, command...
  local name=$1 t0=$SECONDS rc
  shift
  echo "## $name: $*" >> "$r"
  timeout 300 "$@" > "$out/x.log" 2>&1
  rc=$?
  grep -E "group limit|passed|test_zero|test_dev_comm" "$out/x.log" >> "$r"
  echo "rc $rc ($((SECONDS - t0)) s)" >> "$r"
  [ $rc -eq 0 ] || fail=1
}
for mode in plain mps; do
  [ $mode = mps ] && { mps_start "$r" || continue; }
  one ${mode}_dev_comm_3 "$b/tests/gpu/test_dev_comm" 3 --share
  one ${mode}_moe_2 "$b/tests/mp/test_moe" 2 --device
  one ${mode}_moe_4 "$b/tests/mp/test_moe" 4 --device
  [ $mode = mps ] && mps_stop
done
one route "$b/tests/gpu/test_route"
for c in "1 0 bf16" "2 1 bf16" "4 3 bf16" "2 1 gpu" "4 3 gpu"; do
  one "zero_${c// /_}" "$b/tests/examples/test_zero" $c
done
rm -f "$out/x.log"
cat "$r"
exit $fail
