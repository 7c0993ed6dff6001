#!/usr/bin/env bash
# PyTorch on weft: unmodified PyTorch jobs whose libnccl.so.2 is weft's NCCL-ABI library
# (src/nccl), put in by LD_PRELOAD, with all ranks sharing one GPU (cuda:0; WEFT_TORCH_DEVICE
# picks another). Steps, each recorded in OUTDIR/summary.txt (and a table on stdout):
#   env          torch imports under the preload; torch.__version__, torch.cuda.nccl.version()
#                (the NCCL PyTorch was compiled against) and ncclGetVersion() as the process
#                resolves it, with the file that provides it: must be BUILDDIR's library
#   coll_w2/w3   tests/nccl/torch_collectives.py on 2, then 3 ranks (every collective against
#                exact oracles)
#   train_*      tests/nccl/torch_train.py: single (one process, no preload), ddp and fsdp on
#                2 ranks under the preload, then each compared with single (per-step losses)
#   kill         tests/nccl/torch_kill.py: rank 1 SIGKILLs itself; rank 0 must see an error
#                (or be torn down by PyTorch's watchdog) within 90 s (see that file's header)
# Every rank of a preloaded run must log at least one "weft INFO" line (WEFT_DEBUG=INFO): the
# proof that weft, not NVIDIA's NCCL, served it; the counts per rank are in the summary.
# Each rank runs under `timeout` (300 s at most, less when the run's time budget is short) and
# logs to OUTDIR/<test>.rank<r>.log; when a rank fails, the others get 20 s, then are stopped.
# usage: scripts/gpu/nccl_torch.sh OUTDIR BUILDDIR
#   BUILDDIR: a build made with -Dcuda=enabled (src/nccl/libnccl.so.2 in it)
#   env: PYTHON (python3), WEFT_TORCH_BUDGET (seconds for everything, default 450),
#        WEFT_TORCH_HOSTS=K (rank r on fake host r % K: WEFT_HOSTID, so weft's device
#        communicators span hosts and their bytes between hosts go through the proxy)
# Exit status: 0 when every step passed, 1 otherwise (2: bad usage).
set -u
usage="usage: scripts/gpu/nccl_torch.sh OUTDIR BUILDDIR"
[ $# -eq 2 ] || { echo "$usage" >&2; exit 2; }
mkdir -p "$1" || exit 2
out=$(cd "$1" && pwd)
build=$(cd "$2" 2>/dev/null && pwd) || { echo "no build dir $2" >&2; exit 2; }
root=$(cd "$(dirname "$0")/../.." && pwd)
tests=$root/tests/nccl
lib=$build/src/nccl/libnccl.so.2
py=${PYTHON:-python3}
budget=${WEFT_TORCH_BUDGET:-450}
summary=$out/summary.txt
export NCCL_NVLS_ENABLE=0 WEFT_DEBUG=INFO PYTHONUNBUFFERED=1
unset LD_PRELOAD WEFT_DEBUG_FILE TORCH_NCCL_ASYNC_ERROR_HANDLING

names=() results=() details=()
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
record() { # test, PASS|FAIL, detail
  names+=("$1") results+=("$2") details+=("$3")
  say "$2 $1: $3"
}

{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; } \
  >> "$summary" 2>&1
if [ ! -f "$lib" ]; then
  record build FAIL "$lib is missing (build with -Dcuda=enabled)"
  exit 1
fi
# The library needs CUDA's runtime; add CUDA's folder (last, so that PyTorch keeps its own
# CUDA libraries) only when the loader cannot find it otherwise.
if ldd "$lib" 2>/dev/null | grep -q "not found"; then
  export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64
  say "note: LD_LIBRARY_PATH gets /usr/local/cuda/lib64 for $(ldd "$lib" | grep "not found" | awk '{print $1}' | xargs)"
fi

free_port() {
  "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

left() { echo $((budget - SECONDS)); }

# launch NAME NRANKS PRELOAD(0|1) GRACE SCRIPT ARGS...: NRANKS processes with torchrun's
# environment, each under `timeout`, logging to OUTDIR/NAME.rank<r>.log; its exit status in
# NAME.rank<r>.rc (124: timed out) and its end time (epoch seconds) in NAME.rank<r>.end. When a
# rank ends nonzero, the rest get GRACE seconds, then TERM. Returns 0 when every rank exited 0.
launch() {
  local name=$1 n=$2 pre=$3 grace=$4
  shift 4
  local limit r rc port alive bad_since="" stopped=0 status=0
  limit=$(left)
  limit=$((limit - 15))
  [ "$limit" -gt 300 ] && limit=300
  if [ "$limit" -lt 30 ]; then
    echo "no time left for $name (budget ${budget} s)"
    return 1
  fi
  port=$(free_port)
  rm -f "$out/$name".rank*
  local pre_env=()
  [ "$pre" = 1 ] && pre_env=("LD_PRELOAD=$lib")
  for ((r = 0; r < n; r++)); do
    local host_env=()
    [ -n "${WEFT_TORCH_HOSTS:-}" ] && host_env=("WEFT_HOSTID=torch-host-$((r % WEFT_TORCH_HOSTS))")
    (
      MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r \
        LOCAL_WORLD_SIZE=$n timeout -k 5 "$limit" \
        env ${pre_env[@]+"${pre_env[@]}"} ${host_env[@]+"${host_env[@]}"} "$py" "$@" \
        > "$out/$name.rank$r.log" 2>&1 &
      echo $! > "$out/$name.rank$r.pid"
      wait $!
      rc=$?
      date +%s.%N > "$out/$name.rank$r.end"
      echo $rc > "$out/$name.rank$r.rc"
    ) 2> /dev/null & # (bash's own "Killed"/"Aborted" notes; the rank's output is in its log)
  done
  while :; do
    alive=0
    for ((r = 0; r < n; r++)); do
      if [ -s "$out/$name.rank$r.rc" ]; then
        rc=$(cat "$out/$name.rank$r.rc")
        [ "$rc" != 0 ] && [ -z "$bad_since" ] && bad_since=$SECONDS
      else
        alive=$((alive + 1))
      fi
    done
    [ "$alive" -eq 0 ] && break
    if [ -n "$bad_since" ] && [ "$stopped" = 0 ] && [ $((SECONDS - bad_since)) -ge "$grace" ]; then
      stopped=1
      echo "$name: a rank failed; stopping the $alive still running"
      for ((r = 0; r < n; r++)); do
        [ -s "$out/$name.rank$r.rc" ] || kill -TERM "$(cat "$out/$name.rank$r.pid" 2>/dev/null)" 2>/dev/null
      done
    fi
    sleep 1
  done
  wait
  for ((r = 0; r < n; r++)); do
    rc=$(cat "$out/$name.rank$r.rc")
    [ "$rc" = 0 ] || status=1
  done
  return $status
}

rcs() { # NAME NRANKS: "rank0=rc rank1=rc"
  local r s=""
  for ((r = 0; r < $2; r++)); do s+="rank$r=$(cat "$out/$1.rank$r.rc" 2>/dev/null || echo not-run) "; done
  echo "${s% }"
}

# weft_served NAME NRANKS: every rank's log has a "weft INFO" line; sets $served to the counts.
served=""
weft_served() {
  local r c ok=0
  served=""
  for ((r = 0; r < $2; r++)); do
    c=$(grep -c " weft INFO " "$out/$1.rank$r.log" 2>/dev/null)
    c=${c:-0}
    served+="rank$r=$c "
    [ "$c" -gt 0 ] || ok=1
  done
  served="weft INFO lines ${served% }"
  return $ok
}

show_failure() { # NAME NRANKS: the failures and the end of each rank's log, on stdout
  local r
  for ((r = 0; r < $2; r++)); do
    echo "--- $1 rank $r (exit $(cat "$out/$1.rank$r.rc" 2>/dev/null)), its FAIL lines and log end:"
    grep -m 10 "^FAIL" "$out/$1.rank$r.log" 2>/dev/null
    tail -n 12 "$out/$1.rank$r.log" 2>/dev/null
  done
}

# ---- (a) torch under the preload ----
t0=$SECONDS
timeout -k 5 120 env LD_PRELOAD="$lib" "$py" - "$lib" > "$out/env.log" 2>&1 <<'EOF'
import ctypes, os, sys
lib = os.path.realpath(sys.argv[1])
import torch
print("torch_version", torch.__version__, "cuda", torch.version.cuda)
print("cuda_available", torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
print("torch.cuda.nccl.version()", torch.cuda.nccl.version(),
      "(compiled into PyTorch; not asked of the library)")
g = ctypes.CDLL(None)  # the process's global scope: LD_PRELOAD comes first
v = ctypes.c_int(0)
rc = g.ncclGetVersion(ctypes.byref(v))
code = v.value
print("ncclGetVersion()", rc, code, "= %d.%d.%d" % (code // 10000, code // 100 % 100, code % 100))

class DlInfo(ctypes.Structure):
    _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p),
                ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]

info = DlInfo()
addr = ctypes.cast(g.ncclGetVersion, ctypes.c_void_p)
provider = ""
try:
    if g.dladdr(addr, ctypes.byref(info)) and info.fname:
        provider = os.path.realpath(info.fname.decode())
except AttributeError:  # no dladdr in the global scope: judge by the mapped files alone
    provider = "(dladdr unavailable)"
print("ncclGetVersion_from", provider)
with open("/proc/self/maps") as f:
    maps = sorted({os.path.realpath(l.split()[-1]) for l in f if "libnccl" in l})
print("libnccl_mapped", " ".join(maps))
if provider == "(dladdr unavailable)" and maps == [lib]:
    provider = lib
ok = torch.cuda.is_available() and rc == 0 and provider == lib
print("RESULT", "PASS" if ok else "FAIL", "torch %s, NCCL compiled %s, ncclGetVersion %d from %s"
      % (torch.__version__, ".".join(map(str, torch.cuda.nccl.version())), code, provider))
sys.exit(0 if ok else 1)
EOF
rc=$?
grep -v "^RESULT" "$out/env.log" | grep -E "^(torch|cuda|ncclGet|libnccl)" >> "$summary"
line=$(grep "^RESULT" "$out/env.log" | cut -d' ' -f3-)
if [ "$rc" = 0 ]; then
  record env PASS "$line ($((SECONDS - t0)) s)"
else
  record env FAIL "exit $rc: ${line:-$(tail -n 3 "$out/env.log" | tr '\n' ' ')}"
fi

# ---- (b) collectives on 2 and 3 ranks ----
for n in 2 3; do
  name=coll_w$n
  t0=$SECONDS
  launch "$name" "$n" 1 20 "$tests/torch_collectives.py"
  st=$?
  tallyline=$(grep -h "^torch_collectives:" "$out/$name.rank0.log" 2>/dev/null | tail -n 1)
  weft_served "$name" "$n"
  ws=$?
  if [ "$st" = 0 ] && [ "$ws" = 0 ] && echo "$tallyline" | grep -q " 0 failed"; then
    record "$name" PASS "${tallyline#torch_collectives: }; $served ($((SECONDS - t0)) s)"
  else
    record "$name" FAIL "${tallyline:-no tally}; exits $(rcs "$name" "$n"); $served ($((SECONDS - t0)) s)"
    show_failure "$name" "$n"
  fi
done

# ---- (c) training: single, ddp, fsdp; each distributed run against single ----
train_run() { # mode nranks preload
  local name=train_$1 t=$SECONDS st lossline
  launch "$name" "$2" "$3" 20 "$tests/torch_train.py" --mode "$1" --out "$out/train_$1.json"
  st=$?
  lossline=$(grep -h "^torch_train:" "$out/$name.rank0.log" 2>/dev/null | tail -n 1)
  local ws=0
  served="(no preload)"
  if [ "$3" = 1 ]; then
    weft_served "$name" "$2"
    ws=$?
  fi
  if [ "$st" = 0 ] && [ "$ws" = 0 ] && [ -s "$out/train_$1.json" ]; then
    record "$name" PASS "${lossline#torch_train: }; $served ($((SECONDS - t)) s)"
  else
    record "$name" FAIL "${lossline:-no result}; exits $(rcs "$name" "$2"); $served ($((SECONDS - t)) s)"
    show_failure "$name" "$2"
  fi
}
train_run single 1 0
train_run ddp 2 1
train_run fsdp 2 1
for mode in ddp fsdp; do
  if [ -s "$out/train_single.json" ] && [ -s "$out/train_$mode.json" ]; then
    line=$("$py" "$tests/torch_train.py" --mode compare --ref "$out/train_single.json" \
      --cand "$out/train_$mode.json" 2>&1)
    st=$?
    echo "$line" > "$out/compare_$mode.log"
    line=$(echo "$line" | tail -n 1)
    if [ "$st" = 0 ]; then
      record "compare_$mode" PASS "${line#PASS compare }"
    else
      record "compare_$mode" FAIL "${line#FAIL compare }"
    fi
  else
    record "compare_$mode" FAIL "no losses to compare (single or $mode did not finish)"
  fi
done

# ---- (d) a rank SIGKILLed mid-job ----
t0=$SECONDS
kfile=$out/kill.time
rm -f "$kfile"
export TORCH_NCCL_ASYNC_ERROR_HANDLING=1 TORCH_NCCL_DUMP_ON_TIMEOUT=0 WEFT_KILL_FILE=$kfile
launch kill 2 1 100000 "$tests/torch_kill.py"
unset TORCH_NCCL_ASYNC_ERROR_HANDLING TORCH_NCCL_DUMP_ON_TIMEOUT WEFT_KILL_FILE
rc0=$(cat "$out/kill.rank0.rc" 2>/dev/null || echo not-run)
rc1=$(cat "$out/kill.rank1.rc" 2>/dev/null || echo not-run)
weft_served kill 2
ws=$?
verdict=FAIL
if ! grep -q "^KILL rank 1" "$out/kill.rank1.log" 2>/dev/null || [ "$rc1" != 137 ]; then
  why="rank 1 did not die by its own SIGKILL (exit $rc1)"
elif line=$(grep -m 1 "^PASS kill:" "$out/kill.rank0.log"); then
  verdict=PASS why="rank 0: ${line#PASS kill: }"
elif line=$(grep -m 1 "^FAIL kill:" "$out/kill.rank0.log"); then
  why="rank 0: ${line#FAIL kill: }"
elif [ "$rc0" = 124 ] || [ "$rc0" = 137 ] || [ "$rc0" = 0 ] || [ "$rc0" = not-run ]; then
  why="rank 0 gave no verdict and exited $rc0 (124/137: stopped by timeout)"
else
  # Torn down by PyTorch's watchdog: its message in the log, and in time.
  pat="taking the entire process down|Watchdog caught collective operation timeout|watchdog thread terminated with exception|Some NCCL operations have failed or timed out|NCCL communicator was aborted|NCCL error|DistBackendError"
  msg=$(grep -m 1 -E "$pat" "$out/kill.rank0.log" | cut -c1-200)
  dt=$(awk -v a="$(cat "$out/kill.rank0.end" 2>/dev/null)" -v b="$(cat "$kfile" 2>/dev/null)" \
    'BEGIN { if (a == "" || b == "") print "none"; else printf "%.1f", a - b }')
  if [ -z "$msg" ]; then
    why="rank 0 exited $rc0 without a verdict or a watchdog message"
  elif [ "$dt" = none ] || awk -v d="$dt" 'BEGIN { exit !(d > 90) }'; then
    why="rank 0 torn down (exit $rc0) ${dt} s after the kill (bound 90 s): $msg"
  else
    verdict=PASS why="rank 0 torn down by PyTorch's watchdog (exit $rc0) $dt s after the kill: $msg"
  fi
fi
[ "$ws" = 0 ] || { verdict=FAIL; why="$why; no weft INFO line in a rank's log"; }
record kill "$verdict" "$why; $served ($((SECONDS - t0)) s)"
[ "$verdict" = PASS ] || show_failure kill 2

# ---- the table ----
fails=0
{
  echo
  printf '%-14s %s\n' test result
  for i in "${!names[@]}"; do
    printf '%-14s %s\n' "${names[$i]}" "${results[$i]}"
    [ "${results[$i]}" = PASS ] || fails=$((fails + 1))
  done
  echo "nccl_torch: $((${#names[@]} - fails)) passed, $fails failed in $SECONDS s; logs in $out"
} > "$out/table.txt"
cat "$out/table.txt" | tee -a "$summary"
rm -f "$out/table.txt"
[ "$fails" = 0 ]
