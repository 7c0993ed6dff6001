#!/usr/bin/env bash
# Device communicators across 2 fake hosts on one GPU (WEFT_HOSTID per rank, so every byte
# between hosts goes through the region proxy over tcp): the oracle matrix on 2 hosts x 1
# rank and 2 x 2 under MPS, and 2 x 1 time-sliced, each rank's log counted for the proxy's
# INFO line; test_dev_comm (graph replays, several communicators, a group over 64, abort and
# a rank that never joins) on 2 hosts; then (BENCH=1) collbench on 2 fake hosts against
# NCCL's socket transport in the same run, and weft's host-buffer TCP for the proxy's ratio.
# Report in OUT/hosts.txt, sweeps in OUT/collbench_*.txt. usage: scripts/gpu/hosts.sh OUT [BUILD]
set -u
source "$(dirname "$0")/common.sh" # OUT, BUILD (b), the environment, mps_start and mps_stop
r=$out/hosts.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > "$r"
one() { # name, command...
  local name=$1 t0=$SECONDS rc; shift
  echo "## $name: $*" >> "$r"
  WEFT_DEBUG=INFO WEFT_DEBUG_SUBSYS=INIT timeout ${T:-240} "$@" > "$out/$name.log" 2>&1; rc=$?
  grep -c "reached by the proxy" "$out/$name.log" | sed 's/^/proxy inits: /' >> "$r"
  grep -v " INFO " "$out/$name.log" | tail -6 >> "$r"; echo "rc $rc ($((SECONDS - t0)) s)" >> "$r"
  [ "$rc" -eq 0 ] || fail=1
}
t=$b/tests/gpu
mps_start "$r"
T=150 one mps_2x1 $t/test_collectives_gpu 2 --share --hosts=2
T=150 one mps_2x2 $t/test_collectives_gpu 4 --share --hosts=2
WEFT_TEST_HOSTS=2 T=150 one mps_dev_comm_2x1 "$t/test_dev_comm" 2 --share
if [ "${BENCH:-0}" = 1 ]; then
  sweep=(-C allreduce,allgather,reduce_scatter,alltoall,broadcast,reduce -b 8 -e "${MAXB:-256M}"
    -f 4 -n 10 -w 3)
  timeout 300 "$b/bench/collbench" --gpu --ranks 2 --hosts 2 --compare nccl "${sweep[@]}" \
    > "$out/collbench_gpu_2hosts.txt" 2>&1 || fail=1
  timeout 150 "$b/bench/collbench" --cpu --ranks 2 --hosts 2 "${sweep[@]}" \
    > "$out/collbench_cpu_2hosts.txt" 2>&1 || fail=1
fi
mps_stop
T=${PLAIN_T:-150} one plain_2x1 $t/test_collectives_gpu 2 --share --hosts=2
(cd "$out" && tar czf logs.tgz ./*.log && rm -f ./*.log)
cat "$r"
exit "$fail"
