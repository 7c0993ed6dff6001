#!/usr/bin/env bash
# The GPU suite on the device machine, with a report under OUT: GPU topology, the gpu test
# suite (oracle matrix on device buffers, every device algorithm, rings included, 2 ranks on 2
# GPUs with and without split roles, one process driving both GPUs, 2-3 ranks sharing one GPU,
# and 4 ranks on the 2 GPUs; the same through host-staged
# regions (WEFT_P2P_DISABLE=1, on every rank or on rank 1 alone); a rank SIGKILLed mid-kernel;
# graph capture, concurrent communicators, a send/recv group cut into several launches
# (also with WEFT_P2P_SETS=1), failures, the 128-byte low-latency kernel (its sizes and its
# rings again and again with new data, the oracle matrix through it, and without it); allgather and alltoall into registered windows,
# written by the kernels straight into the peers (also 3 ranks on one GPU) or by the copy
# engines, and their misuse), and compute-sanitizer memcheck and
# racecheck over a short collbench run of every collective and over the oracle matrix
# (memcheck over the windows test too). On one GPU: every test whose ranks share it, once
# time-sliced and once under CUDA MPS, which the script starts and stops itself.
# usage: scripts/gpu/suite.sh OUT [BUILD]   (BUILD: a build dir made with -Dcuda=enabled;
#        WEFT_SUITE_MODES="plain mps" on one GPU: without MPS, under it, or both)
set -uo pipefail
source "$(dirname "$0")/common.sh" # OUT, BUILD (b), the environment, mps_start and mps_stop
if [ ! -x "$b/tests/gpu/test_collectives_gpu" ]; then
  meson setup "$b" -Dcuda=enabled -Dmpi=disabled > "$out/build.log" 2>&1 && ninja -C "$b" >> "$out/build.log" 2>&1 ||
    { echo "build failed"; tail -30 "$out/build.log"; exit 1; }
fi
rep="$out/gpu_suite.txt"
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvidia-smi topo -m; } > "$rep" 2>&1
pass=0 fail=0
run() { # name, command...
  local name=$1
  shift
  local t0=$SECONDS
  if timeout "${WEFT_SUITE_TIMEOUT:-600}" "$@" > "$out/$name.log" 2>&1; then
    pass=$((pass + 1)); echo "PASS $name ($((SECONDS - t0)) s)" | tee -a "$rep"
  else
    fail=$((fail + 1)); echo "FAIL $name ($((SECONDS - t0)) s)" | tee -a "$rep"; tail -15 "$out/$name.log"
  fi
  tail -3 "$out/$name.log" >> "$rep"
}
# Runs a test with WEFT_DEBUG=INFO into LOG; passes when the test passed and at least two
# ranks logged PATTERN, i.e. the path under test was really taken.
logged_twice() { # pattern, log, test args...
  local pat=$1 log=$2 rc n
  shift 2
  WEFT_DEBUG=INFO "$@" > "$log" 2>&1
  rc=$?
  n=$(grep -c "$pat" "$log")
  tail -2 "$log"
  echo "ranks that logged '$pat': $n"
  [ "$rc" -eq 0 ] && [ "$n" -ge 2 ]
}
export -f logged_twice
# Host-staged regions (as where GPUs cannot map each other), forced; the INFO log must show it.
host_matrix() { # log, test args...
  local log=$1
  shift
  WEFT_P2P_DISABLE=1 WEFT_DEBUG=INFO "$@" > "$log" 2>&1
  local rc=$?
  tail -3 "$log"
  echo "host-staged inits: $(grep -c 'stages through host memory' "$log")"
  [ "$rc" -eq 0 ] && grep -q 'stages through host memory' "$log"
}
export -f host_matrix
# The logs go back as one archive (the device tool returns a few files).
pack_logs() {
  tar -czf "$out/gpu_suite_logs.tgz" -C "$out" $(cd "$out" && ls *.log hoststaged_*.txt windows_*.txt 2> /dev/null) &&
    rm -f "$out"/*.log "$out"/hoststaged_*.txt "$out"/windows_*.txt
}
# Every test whose ranks share the one GPU, named MODE_*: the oracle matrix on 2, 3, 4, 8 and
# 9 ranks (past 8: the ring slots), pairs split from 8 ranks running at once (the sharers' registry) and budgets too
# small refused, graphs and concurrent communicators, windows, the MoE paths (staged, direct,
# low-latency), the small kernel's broadcasts and reduces running ahead, the NCCL ABI, and a 2-minute soak of 4 ranks x 2 communicators.
shared_set() { # mode
  local m=$1 n
  for n in 2 3 4 8 9; do
    run "${m}_collectives_$n" "$b/tests/gpu/test_collectives_gpu" "$n" --share
  done
  run "${m}_share_8" "$b/tests/gpu/test_share" 8
  run "${m}_refused_8" env WEFT_SHARED_SM_PERCENT=1 "$b/tests/gpu/test_share" 8 --refuse
  run "${m}_dev_comm_3" "$b/tests/gpu/test_dev_comm" 3 --share
  run "${m}_ll_2" "$b/tests/gpu/test_ll" 2 --share
  run "${m}_ll_3" "$b/tests/gpu/test_ll" 3 --share
  WEFT_LL_ROOTED_BYTES=65536 run "${m}_collectives_3_rooted" "$b/tests/gpu/test_collectives_gpu" 3 --share
  run "${m}_window_3" "$b/tests/gpu/test_window" 3 --share
  for n in 2 3 4; do
    run "${m}_moe_$n" "$b/tests/mp/test_moe" "$n" --device
    run "${m}_moe_ll_$n" "$b/tests/gpu/test_moe_ll" "$n" --share
    run "${m}_moe_direct_$n" "$b/tests/gpu/test_moe_direct" "$n" --share
  done
  for n in 2 3; do
    run "${m}_nccl_$n" "$b/tests/nccl/test_nccl_gpu" "$n" --share
  done
  run "${m}_soak_4x2" "$b/tests/soak/soak" 120 4 --device --comms=2
}
ngpu=$(nvidia-smi -L | grep -c '^GPU')
if [ "$ngpu" -lt 2 ]; then
  # One GPU: the tests whose ranks share it, without MPS (time-sliced) and under MPS
  # (WEFT_SUITE_MODES chooses, both by default); what needs two GPUs is left out.
  echo "one GPU: only the tests whose ranks share it" | tee -a "$rep"
  for mode in ${WEFT_SUITE_MODES:-plain mps}; do
    if [ "$mode" = mps ]; then
      if ! mps_start "$rep"; then
        fail=$((fail + 1)); echo "FAIL mps: the MPS daemon did not start" | tee -a "$rep"
        continue
      fi
      # MPS's active thread percentage: 3% of the SMs cannot hold 8 ranks' kernels; refused
      # with the SMs MPS leaves named (a one-digit count)
      run mps_refused_mps_limit bash -c 'CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=3 "$@" > "$0" 2>&1;
        rc=$?; cat "$0"; [ $rc -eq 0 ] && grep -Eq "of the [0-9] SMs a process may use" "$0"' \
        "$out/mps_limit.txt" "$b/tests/gpu/test_share" 8 --refuse
    fi
    shared_set "$mode"
    [ "$mode" = mps ] && mps_stop
  done
  if [ "${WEFT_SUITE_MODES:-plain}" != mps ]; then
    # the GPU layout of the low-latency MoE path, its blocks exactly full among its shapes
    run route "$b/tests/gpu/test_route"
    run collectives_2_share_hoststaged bash -c 'host_matrix "$@"' _ "$out/hoststaged_share.txt" \
      "$b/tests/gpu/test_collectives_gpu" 2 --share
    run sanitizer_memcheck_matrix_share compute-sanitizer --tool memcheck --target-processes all \
      --error-exitcode 9 "$b/tests/gpu/test_collectives_gpu" 2 --share
    # the API fuzzer's corpus on device communicators (tests/fuzz/replay_device.c)
    run sanitizer_memcheck_api_corpus compute-sanitizer --tool memcheck --target-processes all \
      --error-exitcode 9 "$b/tests/fuzz/replay_api_device" --fork tests/fuzz/corpus/api \
      tests/fuzz/corpus/api_device
    run sanitizer_memcheck_moe compute-sanitizer --tool memcheck --target-processes all \
      --error-exitcode 9 "$b/tests/mp/test_moe" 2 --device
  fi
  echo "gpu suite (one GPU): $pass passed, $fail failed" | tee -a "$rep"
  pack_logs
  [ "$fail" -eq 0 ]
  exit
fi
run dev_comm_2 "$b/tests/gpu/test_dev_comm" 2
WEFT_P2P_SETS=1 run dev_comm_2_sets1 "$b/tests/gpu/test_dev_comm" 2
run dev_comm_3_share "$b/tests/gpu/test_dev_comm" 3 --share
run ll_2 "$b/tests/gpu/test_ll" 2
# Windows: the allgather and alltoall into registered buffers must really take the direct path
# (each rank logs it once).
run window_2 bash -c 'logged_twice "$@"' _ 'straight into (or from) the peers' "$out/windows_2.txt" \
  "$b/tests/gpu/test_window" 2
run window_3_share "$b/tests/gpu/test_window" 3 --share
WEFT_P2P_SPLIT=0 run window_2_nosplit "$b/tests/gpu/test_window" 2
# From 4 MiB blocks the copy engines write into whole-page windows (allgather and alltoall of
# 16 and 4 MiB blocks, the latter in graph replays; a 16 MiB allreduce as a reduce_scatter, then
# an allgather of its 8 MiB segments); into windows of allocations that are not whole 2 MiB
# pages the kernels do. Each rank logs each of the three once.
WEFT_CE_MIN_BYTES=4194304 run window_2_copy_engines bash -c \
  'logged_twice "$@" && [ "$(grep -c "not whole 2 MiB pages" "$2")" -ge 2 ] &&
   [ "$(grep -c "then an allgather through the copy engines" "$2")" -ge 2 ]' _ \
  'per rank through the copy engines' "$out/windows_2_ce.txt" \
  "$b/tests/gpu/test_window" 2
run collectives_2 "$b/tests/gpu/test_collectives_gpu" 2 --big
# The oracle matrix through the 128-byte low-latency kernel: with the small one's limit at 16
# bytes it takes every count from 7 elements up; each rank must log it.
WEFT_LL_MAX_BYTES=16 run collectives_2_ll128 bash -c 'logged_twice "$@"' _ \
  'by the 128-byte low-latency kernel' "$out/collectives_2_ll128.txt" \
  "$b/tests/gpu/test_collectives_gpu" 2
# ... and with the 128-byte kernel off, so that the general kernel takes the 64 MiB of --big.
WEFT_LL128_MAX_BYTES=0 run collectives_2_general "$b/tests/gpu/test_collectives_gpu" 2 --big
WEFT_P2P_SPLIT=0 run collectives_2_nosplit "$b/tests/gpu/test_collectives_gpu" 2
run one_process bash -c 'logged_twice "$@"' _ 'straight into (or from)' "$out/windows_1p.txt" \
  "$b/tests/gpu/test_one_process"
run gpu_fault "$b/tests/gpu/test_gpu_fault"
run moe_4_share "$b/tests/mp/test_moe" 4 --device
run collectives_2_share "$b/tests/gpu/test_collectives_gpu" 2 --share
run collectives_3_share "$b/tests/gpu/test_collectives_gpu" 3 --share
# 4 ranks on the 2 GPUs in turn: every hop of a ring crosses NVLink, and two ranks share each GPU.
run collectives_4_on_2 "$b/tests/gpu/test_collectives_gpu" 4
run dev_comm_4_on_2 "$b/tests/gpu/test_dev_comm" 4
# Host-staged regions (as where GPUs cannot map each other), forced (host_matrix, above).
run collectives_2_hoststaged bash -c 'host_matrix "$@"' _ "$out/hoststaged_2.txt" "$b/tests/gpu/test_collectives_gpu" 2
run collectives_2_share_hoststaged bash -c 'host_matrix "$@"' _ "$out/hoststaged_share.txt" \
  "$b/tests/gpu/test_collectives_gpu" 2 --share
run one_process_hoststaged bash -c 'host_matrix "$@"' _ "$out/hoststaged_1p.txt" "$b/tests/gpu/test_one_process"
# Only rank 1 asks for host staging: rank 0 must follow it (both log the choice).
run collectives_2_hoststaged_rank1 bash -c 'logged_twice "$@"' _ 'stages through host memory' \
  "$out/hoststaged_mixed.txt" \
  "$b/tests/gpu/test_collectives_gpu" 2 --host-staged-on=1
for tool in memcheck racecheck; do
  run "sanitizer_$tool" compute-sanitizer --tool "$tool" --target-processes all --error-exitcode 9 \
    "$b/bench/collbench" -C all -b 1K -e 256K -f 256 -n 1 -w 0 --ranks 2
  run "sanitizer_${tool}_matrix" compute-sanitizer --tool "$tool" --target-processes all \
    --error-exitcode 9 "$b/tests/gpu/test_collectives_gpu" 2
done
run sanitizer_memcheck_window compute-sanitizer --tool memcheck --target-processes all \
  --error-exitcode 9 "$b/tests/gpu/test_window" 2
echo "gpu suite: $pass passed, $fail failed" | tee -a "$rep"
echo "--- report ($rep):"
cat "$rep"
pack_logs
[ "$fail" -eq 0 ]
