# Sourced by the GPU sweeps (bench.sh, window_bench.sh): their arguments (OUT, BUILD), the
# environment every device run keeps (NVLS off, CUDA's libraries found), and the collectives
# both sweep.
out=${1:?usage: $0 OUT [BUILD]    (ITERS: timed iterations, default 20)}
b=${2:-build-dev}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
colls=allreduce,allgather,reduce_scatter,alltoall
