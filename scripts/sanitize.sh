#!/usr/bin/env bash
# Builds weft with ASan+UBSan and with TSan, each from scratch, and runs the CPU suites in both
# (the 64 MiB and 8-rank cases stay in the plain build: under sanitizers they add minutes, no
# coverage). Runs both configurations even when the first fails; exits nonzero if either did.
set -euo pipefail
cd "$(dirname "$0")/.."
threaded=(test_api collectives_3_shm collectives_4_tcp3 comm_3 resources_2 group_3
          faults_shm faults_tcp mismatch_shm moe_3_shm moe_4_tcp zero_2_stage1
          zero_3_stage3 ep_2_top2 rproxy_3 rproxy_3_links
          rproxy_2_abort rproxy_3_abort_stop rproxy_4_fail rproxy_3_kill rproxy_10_ring
          proxy_pingpong_lines tcp_connect_4 test_pump)
# ASan and UBSan only: the schedule simulators (single-threaded), and the examples whose only
# threads are weft's own (TSan covers those in the threaded list)
asan_tests=(test_ring test_rhd test_tree test_direct test_pairwise test_chain test_p2p test_tuner test_dtype test_tcp test_socket
            test_engine test_param test_op test_window_rules test_shm test_bootstrap test_self_pairs test_moe_layout
            test_budget test_sharers test_dev_plan test_ifaces test_sockaddr test_waitlog
            test_topo_model test_topo_sysfs
            test_gpt test_err tp_2_of_4_sp
            "${threaded[@]}")
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS=halt_on_error=1
# Sanitized code runs about 3x slower: meson's timeouts and the fault tests' own time bounds
# (which read WEFT_TEST_TIME_SCALE) stretch alike.
scale=3
export WEFT_TEST_TIME_SCALE=$scale
rc=0
for cfg in asan:address,undefined tsan:thread; do
  dir=build-${cfg%%:*}
  # fresh: a reused tree keeps options and objects from an older configuration
  rm -rf "$dir"
  meson setup "$dir" -Db_sanitize="${cfg#*:}" -Db_lundef=false -Dbuildtype=debugoptimized \
    -Dwerror=true -Dcuda=disabled -Dcmocka=enabled > /dev/null
  ninja -C "$dir" > /dev/null
  if [ "$dir" = build-asan ]; then list=("${asan_tests[@]}"); else list=("${threaded[@]}"); fi
  # TSan looks for races, which do not depend on the element type: four types of the oracle
  # matrix (a float, a 16-bit float, a signed and an unsigned integer) keep CI under 20 minutes;
  # the plain and ASan+UBSan builds run all twelve
  types=
  [ "$dir" = build-tsan ] && types=float,bfloat16,int32,uint64
  WEFT_TEST_DTYPES=$types meson test -C "$dir" --print-errorlogs --timeout-multiplier "$scale" \
    "${list[@]}" || rc=1
done
exit "$rc"
