# Sourced by the GPU sweeps and checks (bench.sh, window_bench.sh, moe_*.sh): their arguments
# (OUT, BUILD), the environment every device run keeps (NVLS off, CUDA's libraries found), the
# collectives the sweeps cover, and the checks' step runner, MPS daemon and kernel timer. The
# GPU suite (suite.sh) sources it too.
out=${1:?usage: $0 OUT [BUILD]    (ITERS: timed iterations, default 20)}
b=${2:-build-dev}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
colls=allreduce,allgather,reduce_scatter,alltoall

fail=0
step() { # log, command...: runs it under STEP_S seconds (150), its output into log
  local log=$1
  shift
  local t0=$(date +%s)
  echo "## $*" >> "$log"
  timeout "${STEP_S:-150}" "$@" >> "$log" 2>&1 || { echo "FAILED ($?): $*" >> "$log"; fail=1; }
  echo "# $(($(date +%s) - t0)) s" >> "$log"
}
# CUDA MPS for this script's runs only (pipe and log in a directory of the script's own). The
# control daemon forks itself away: its pid file says which process to wait for once it is
# asked to quit (where there is none, its control socket going away says it).
mps_start() { # log: ranks sharing the GPU run concurrently under CUDA MPS
  export CUDA_MPS_PIPE_DIRECTORY="${TMPDIR:-/tmp}/weft-mps.$$/pipe"
  export CUDA_MPS_LOG_DIRECTORY="${TMPDIR:-/tmp}/weft-mps.$$/log"
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d && echo get_server_list | nvidia-cuda-mps-control > /dev/null ||
    { echo "no MPS" >> "$1"; fail=1; return 1; }
}
mps_stop() {
  local pid dir=$CUDA_MPS_PIPE_DIRECTORY
  pid=$(cat "$dir/nvidia-cuda-mps-control.pid" 2> /dev/null)
  echo quit | nvidia-cuda-mps-control
  for _ in $(seq 100); do
    if [ -n "$pid" ]; then kill -0 "$pid" 2> /dev/null || break; else [ -e "$dir/control" ] || break; fi
    sleep 0.1
  done
  cp "$CUDA_MPS_LOG_DIRECTORY/control.log" "$out/mps_control.log" 2> /dev/null
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}
ncu_kernels() { # file, command...: each kernel's time (Nsight Compute) of one run of command
  local file=$1 ncu
  shift
  ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2> /dev/null | head -1)
  [ -n "$ncu" ] || { echo "no ncu" > "$file"; return; }
  timeout 120 "$ncu" --clock-control none --target-processes all \
    --metrics gpu__time_duration.sum --csv "$@" 2>&1 |
    python3 -c '
import csv, sys
rows = [r for r in csv.reader(l for l in sys.stdin if l.startswith("\"")) if len(r) > 10]
k, v = rows[0].index("Kernel Name"), rows[0].index("Metric Value")
for r in rows[1:]:
    print("%9.2f us  %s" % (float(r[v].replace(",", "")) / 1000, r[k][:70]))
' > "$file" || fail=1
}
