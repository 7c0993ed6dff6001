# Sourced by the GPU sweeps and checks (bench.sh, window_bench.sh, moe_*.sh): their arguments
# (OUT, BUILD), the environment every device run keeps (NVLS off, CUDA's libraries found), the
# collectives the sweeps cover, and the checks' step runner and MPS daemon.
out=${1:?usage: $0 OUT [BUILD]    (ITERS: timed iterations, default 20)}
b=${2:-build-dev}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
colls=allreduce,allgather,reduce_scatter,alltoall

fail=0
step() { # log, command...: runs it under STEP_S seconds (150), its output into log
  local log=$1
  shift
  echo "## $*" >> "$log"
  timeout "${STEP_S:-150}" "$@" >> "$log" 2>&1 || { echo "FAILED ($?): $*" >> "$log"; fail=1; }
}
mps_start() { # log: ranks sharing the GPU run concurrently under CUDA MPS
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d || { echo "no MPS" >> "$1"; fail=1; }
}
mps_stop() { echo quit | nvidia-cuda-mps-control; }
