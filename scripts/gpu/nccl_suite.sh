#!/usr/bin/env bash
# The NCCL ABI library (src/nccl) on the device machine, with a report under OUT: what
# PyTorch's libtorch_cuda.so imports and the wheel's libnccl.so.2 exports against what ours
# exports; tests/nccl/test_nccl_abi with a GPU present; test_nccl_gpu (every collective, dtype
# and op through nccl.h against exact oracles, groups, graphs, split, non-blocking init,
# abort) with 2 and 3 ranks sharing one GPU, and under compute-sanitizer memcheck; what weft
# does not serve (two hosts, nine ranks) refused on every rank with a message; then
# PyTorch through LD_PRELOAD (scripts/gpu/nccl_torch.sh).
# usage: scripts/gpu/nccl_suite.sh OUT [BUILD] [--no-torch]   (BUILD made with -Dcuda=enabled)
set -uo pipefail
out=${1:?usage: scripts/gpu/nccl_suite.sh OUT [BUILD] [--no-torch]}
b=${2:-build-dev}
torch=1
[ "${3:-}" = --no-torch ] && torch=0
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
if [ ! -x "$b/tests/nccl/test_nccl_gpu" ]; then
  { meson setup "$b" -Dcuda=enabled -Dmpi=disabled || meson setup --reconfigure "$b"; } \
    > "$out/build.log" 2>&1 &&
    ninja -C "$b" src/nccl/libnccl.so.2.28.9 tests/nccl/test_nccl_abi tests/nccl/test_nccl_gpu \
      tests/nccl/test_nccl_refuse \
      >> "$out/build.log" 2>&1 || { echo "build failed"; tail -30 "$out/build.log"; exit 1; }
fi
rep="$out/nccl_suite.txt"
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > "$rep" 2>&1
# The ABI as the clients see it: our exports must cover the wheel's and PyTorch's imports.
py=${PYTHON:-python3}
tdir=$("$py" -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2> /dev/null)
nm -D --defined-only "$b/src/nccl/libnccl.so.2" | awk '$2 ~ /[TW]/ {print $3}' | sort -u \
  > "$out/exports_weft.txt"
if [ -n "$tdir" ]; then
  nm -D --undefined-only "$tdir/lib/libtorch_cuda.so" | awk '{print $2}' | grep '^nccl' |
    sort -u > "$out/imports_torch.txt"
  wheel=$(find "$tdir/.." -path '*nvidia/nccl/lib/libnccl.so.2' 2> /dev/null | head -1)
  [ -n "$wheel" ] && nm -D --defined-only "$wheel" | awk '$2 ~ /[TW]/ {print $3}' | sort -u \
    > "$out/exports_wheel.txt"
  for f in imports_torch exports_wheel; do
    [ -f "$out/$f.txt" ] || continue
    miss=$(comm -23 "$out/$f.txt" "$out/exports_weft.txt" | xargs)
    echo "$f: $(wc -l < "$out/$f.txt") symbols, missing from ours: ${miss:-none}" | tee -a "$rep"
  done
fi
pass=0 fail=0
run() { # name, command...
  local name=$1 t0=$SECONDS
  shift
  if timeout "${WEFT_SUITE_TIMEOUT:-300}" "$@" > "$out/$name.log" 2>&1; then
    pass=$((pass + 1)); echo "PASS $name ($((SECONDS - t0)) s)" | tee -a "$rep"
  else
    fail=$((fail + 1)); echo "FAIL $name ($((SECONDS - t0)) s)" | tee -a "$rep"; tail -15 "$out/$name.log"
  fi
  grep -E "passed|failures|PASS|FAIL" "$out/$name.log" | tail -12 >> "$rep"
}
run nccl_abi_gpu "$b/tests/nccl/test_nccl_abi"
run nccl_gpu_2_share "$b/tests/nccl/test_nccl_gpu" 2 --share
run nccl_gpu_3_share "$b/tests/nccl/test_nccl_gpu" 3 --share
run nccl_refuse "$b/tests/nccl/test_nccl_refuse"
run nccl_gpu_2_share_memcheck compute-sanitizer --tool memcheck --target-processes all \
  --error-exitcode 9 "$b/tests/nccl/test_nccl_gpu" 2 --share
if [ "$torch" = 1 ]; then
  if WEFT_TORCH_BUDGET=${WEFT_TORCH_BUDGET:-420} scripts/gpu/nccl_torch.sh "$out/torch" "$b" \
    > "$out/torch.log" 2>&1; then
    pass=$((pass + 1)); echo "PASS torch" | tee -a "$rep"
  else
    fail=$((fail + 1)); echo "FAIL torch" | tee -a "$rep"
  fi
  cat "$out/torch/summary.txt" >> "$rep" 2> /dev/null
fi
echo "nccl suite: $pass passed, $fail failed" | tee -a "$rep"
tar -czf "$out/nccl_logs.tgz" -C "$out" $(cd "$out" && ls *.log torch 2> /dev/null) && rm -rf "$out"/*.log "$out/torch"
[ "$fail" -eq 0 ]
