#!/usr/bin/env bash
# Host-buffer run on a many-core machine (the GPU machine's CPUs): build, run the
# multi-process tests, then collbench against Open MPI in the same runs.
# usage: scripts/host/bench.sh OUTDIR
set -uo pipefail
out=${1:?usage: $0 OUTDIR}
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0
{ nproc; uname -r; mpirun --version | head -1; meson --version; } > "$out/machine.txt" 2>&1
rm -rf build-dev
meson setup build-dev -Dwerror=true > "$out/build.log" 2>&1 && ninja -C build-dev >> "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
mp="--allow-run-as-root --oversubscribe --bind-to none"
{
  for n in 2 4 8; do
    for tr in shm tcp; do timeout 300 build-dev/tests/mp/test_collectives $n $tr --big 2>&1 | tail -1; done
  done
  timeout 120 build-dev/tests/mp/test_comm 4 2>&1 | tail -1
} > "$out/tests.log" 2>&1
cat "$out/tests.log"
for np in 2 4 8; do
  timeout 400 mpirun $mp -np $np build-dev/bench/collbench -C allreduce -b 1K -e 256M -n 20 -w 5 \
    --compare mpi --json "$out/allreduce-np$np.json" > "$out/allreduce-np$np.txt" 2>&1
  echo "allreduce np=$np (size:ratio, ratio = MPI time / weft time):"
  awk '/^#/ {next} NF>=16 {printf "%s:%s ", $1, $16} END {print ""}' "$out/allreduce-np$np.txt"
done
timeout 300 mpirun $mp -np 4 build-dev/bench/collbench -C reduce_scatter,allgather,alltoall,broadcast,reduce \
  -b 1K -e 64M -f 4 -n 10 -w 3 --compare mpi --json "$out/colls-np4.json" > "$out/colls-np4.txt" 2>&1
echo "other collectives np=4:"
awk '/^# [a-z_]+$/ {printf "\n%s ", $2} /^#/ {next} NF>=16 {printf "%s:%s ", $1, $16} END {print ""}' "$out/colls-np4.txt"
