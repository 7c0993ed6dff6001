#!/usr/bin/env bash
# Bounded libFuzzer runs (clang, ASan+UBSan) of the parsers of bytes that come from the
# network (TCP data frames, bootstrap-ring notices, the rendezvous root's reply, the region
# proxy's frames) and of the
# public API on host buffers (fuzz_api: arguments, buffers and results of every call). build-fuzz
# is made afresh each run; new inputs go to a scratch copy of the corpus; a fuzzer that exits
# non-zero (crash, leak, sanitizer report, hang) fails the script, its input left in build-fuzz/.
# usage: scripts/fuzz.sh [seconds per target]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-30}
targets="tcp_stream notice rendezvous api rproxy"
rm -rf build-fuzz
# fuzzer-no-link gives libweft's parsers the coverage counters that guide libFuzzer (without
# it only the target's own file is instrumented)
setup_log=$(mktemp)
CC=clang meson setup build-fuzz -Dfuzz=true -Db_sanitize=address,undefined -Db_lundef=false \
  -Dc_args=-fsanitize=fuzzer-no-link -Dbuildtype=debugoptimized -Dmpi=disabled -Dcuda=disabled \
  > "$setup_log" 2>&1 || { cat "$setup_log"; rm -f "$setup_log"; exit 1; }
rm -f "$setup_log"
ninja -C build-fuzz $(printf 'tests/fuzz/fuzz_%s ' $targets) > build-fuzz/ninja.log 2>&1 ||
  { tail -40 build-fuzz/ninja.log; exit 1; }
# UBSan findings stop the run like ASan's, so they reach the exit status; FUZZ_UBSAN_OPTIONS
# adds to them (e.g. suppressions=FILE while a known report is being fixed)
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1${FUZZ_UBSAN_OPTIONS:+:$FUZZ_UBSAN_OPTIONS}
failed=""
for t in $targets; do
  work=$(mktemp -d)
  cp tests/fuzz/corpus/$t/* "$work"/
  log=build-fuzz/fuzz_$t.log
  echo "fuzz_$t, $secs s:"
  rc=0
  (cd build-fuzz && ./tests/fuzz/fuzz_$t -max_total_time="$secs" -timeout=10 -print_final_stats=1 \
    -artifact_prefix=./ "$work" > "fuzz_$t.log" 2>&1) || rc=$?
  rm -rf "$work"
  grep -E "stat::(number_of_executed_units|new_units_added)|ERROR|SUMMARY" "$log" || true
  if [ "$rc" -ne 0 ] || ! grep -q "stat::number_of_executed_units" "$log"; then
    echo "fuzz_$t FAILED (exit status $rc); the end of $log:"
    tail -30 "$log"
    failed="$failed fuzz_$t"
  fi
done
# libFuzzer leaves the input of any crash, leak or hang here
ls build-fuzz/crash-* build-fuzz/leak-* build-fuzz/timeout-* build-fuzz/oom-* 2> /dev/null &&
  failed="$failed (inputs above)"
if [ -n "$failed" ]; then
  echo "fuzz: failed:$failed"
  exit 1
fi
echo "fuzz: no failures"
