#!/usr/bin/env bash
# Bounded libFuzzer runs (clang, ASan+UBSan) of the parsers of bytes that come from the
# network: TCP data frames, bootstrap-ring notices, and the rendezvous root's reply. New
# inputs go to a scratch copy of the corpus; crashes leave their input in build-fuzz/.
# usage: scripts/fuzz.sh [seconds per target]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-30}
[ -f build-fuzz/build.ninja ] || CC=clang meson setup build-fuzz -Dfuzz=true \
  -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debugoptimized -Dmpi=disabled -Dcuda=disabled > /dev/null
ninja -C build-fuzz > /dev/null
for t in tcp_stream notice rendezvous; do
  work=$(mktemp -d)
  cp tests/fuzz/corpus/$t/* "$work"/
  echo "fuzz_$t, $secs s:"
  (cd build-fuzz && ./tests/fuzz/fuzz_$t -max_total_time="$secs" -timeout=10 -print_final_stats=1 \
    "$work" 2>&1 | grep -E "stat::number_of_executed_units|ERROR|SUMMARY" || true)
  rm -rf "$work"
  # libFuzzer leaves the input of any crash, leak or hang here
  if ls build-fuzz/crash-* build-fuzz/leak-* build-fuzz/timeout-* 2> /dev/null; then
    echo "fuzz_$t found a failure"
    exit 1
  fi
done
echo "fuzz: no failures"
