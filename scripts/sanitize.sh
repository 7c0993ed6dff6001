#!/usr/bin/env bash
# Builds weft with ASan+UBSan and with TSan and runs the CPU suites in both (the 64 MiB
# and 8-rank cases stay in the plain build: under sanitizers they add minutes, no coverage).
set -euo pipefail
cd "$(dirname "$0")/.."
threaded=(test_api collectives_3_shm collectives_3_tcp collectives_4_tcp3 comm_3 resources_2
          faults_shm faults_tcp mismatch_shm)
# the schedule simulators are single-threaded: ASan and UBSan only
asan_tests=(test_ring test_rhd test_tree test_direct test_pairwise test_chain test_dtype test_tcp test_socket
            "${threaded[@]}")
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS=halt_on_error=1
for cfg in asan:address,undefined tsan:thread; do
  dir=build-${cfg%%:*}
  [ -f "$dir/build.ninja" ] || meson setup "$dir" -Db_sanitize="${cfg#*:}" -Db_lundef=false \
    -Dbuildtype=debugoptimized -Dwerror=true -Dcuda=disabled > /dev/null
  ninja -C "$dir" > /dev/null
  if [ "$dir" = build-asan ]; then list=("${asan_tests[@]}"); else list=("${threaded[@]}"); fi
  meson test -C "$dir" --print-errorlogs --timeout-multiplier 3 "${list[@]}"
done
