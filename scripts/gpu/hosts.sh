#!/usr/bin/env bash
# Device communicators across 2 fake hosts on one GPU (WEFT_HOSTID per rank, so every byte
# between hosts goes through the region proxy over tcp, and ranks of one fake host use p2p):
# under MPS the oracle matrix on 2 hosts x 1 rank, 2 x 2, 2 + 1 and 2 x 5 (past 8 ranks: rings
# alone), test_dev_comm (graph replays,
# several communicators, a group over 64, abort and a rank that never joins) and test_ll (the
# small kernel's broadcasts and reduces, senders running ahead) on 2 hosts; the
# matrix and test_dev_comm again with the small low-latency kernel across hosts to 16 and 64
# KiB (WEFT_PROXY_LL_BYTES, 8 KiB by default), and the matrix with the general kernel alone; then
# (BENCH=1) collbench on 2 fake hosts against NCCL's socket transport in the same run, with the
# defaults (BENCH_ALL=1: also with 2026-12-06's sizes (64 KiB, 2 stages, 2 threads), 2 threads,
# 4 stages, and WEFT_PROXY_SPIN_US=0), and
# weft's host-buffer tcp; then the matrix on 2 x 1 time-sliced; then (TORCH=1) PyTorch through
# libnccl.so.2 on 2 fake hosts (scripts/gpu/nccl_torch.sh, PYTHON names the interpreter).
# Report in OUT/hosts.txt, sweeps in OUT/collbench_*.txt, PyTorch in OUT/torch/.
# usage: scripts/gpu/hosts.sh OUT [BUILD]   (MAXB: largest sweep size, 256M)
set -u
source "$(dirname "$0")/common.sh" # OUT, BUILD (b), the environment, mps_start and mps_stop
r=$out/hosts.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > "$r"
one() { # name, command...
  local name=$1 t0=$SECONDS rc; shift
  echo "## $name: $*" >> "$r"
  WEFT_DEBUG=INFO WEFT_DEBUG_SUBSYS=INIT timeout ${T:-240} "$@" > "$out/$name.log" 2>&1; rc=$?
  grep -c "reached by the proxy" "$out/$name.log" | sed 's/^/proxy inits: /' >> "$r"
  grep -m2 "reaches rank" "$out/$name.log" >> "$r"
  grep -v " INFO " "$out/$name.log" | grep -v "WEFT_ALGO=rign" | tail -6 >> "$r"
  echo "rc $rc ($((SECONDS - t0)) s)" >> "$r"
  [ "$rc" -eq 0 ] || fail=1
}
sweep=(-C allreduce,allgather,reduce_scatter,alltoall,broadcast,reduce -b 8 -e "${MAXB:-256M}"
  -f 4 -n 8 -w 2)
bench() { # name, VAR=value... (X=1: none): one sweep against NCCL on 2 fake hosts
  local name=$1 t0=$SECONDS rc
  shift
  env "$@" timeout 120 "$b/bench/collbench" --gpu --ranks 2 --hosts 2 --compare nccl "${sweep[@]}" \
    > "$out/collbench_$name.txt" 2>&1
  rc=$?
  echo "collbench $name ($*): rc $rc ($((SECONDS - t0)) s)" >> "$r"
  [ "$rc" -eq 0 ] || fail=1
}
t=$b/tests/gpu
mps_start "$r"
T=150 one mps_2x1 $t/test_collectives_gpu 2 --share --hosts=2
T=150 one mps_2x2 $t/test_collectives_gpu 4 --share --hosts=2
T=150 one mps_3 $t/test_collectives_gpu 3 --share --hosts=2 # ranks 0 and 2 on one host
# past 8 ranks: the ring slots, every ring step between the 2 hosts (rank % 2); one proxy thread
# a rank, so that 10 ranks' spinning workers fit the cores
WEFT_PROXY_THREADS=1 T=240 one mps_10_ring $t/test_collectives_gpu 10 --share --hosts=2
WEFT_TEST_HOSTS=2 T=150 one mps_dev_comm_2x1 "$t/test_dev_comm" 2 --share
# broadcasts and reduces by the small kernel through the proxy, ranks that only send ahead
WEFT_TEST_HOSTS=2 T=90 one mps_ll_2x1 "$t/test_ll" 2 --share
WEFT_TEST_HOSTS=2 T=90 one mps_ll_2x2 "$t/test_ll" 4 --share
WEFT_LL_ROOTED_BYTES=65536 T=150 one mps_2x2_rooted $t/test_collectives_gpu 4 --share --hosts=2
# the small low-latency kernel through the proxy to 16 and 64 KiB (8 by default), and the
# general kernel alone: the matrix and graph replays
WEFT_PROXY_LL_BYTES=0 T=150 one mps_2x1_general $t/test_collectives_gpu 2 --share --hosts=2
WEFT_PROXY_LL_BYTES=16384 T=150 one mps_2x1_ll $t/test_collectives_gpu 2 --share --hosts=2
WEFT_PROXY_LL_BYTES=65536 T=150 one mps_2x2_ll $t/test_collectives_gpu 4 --share --hosts=2
WEFT_PROXY_LL_BYTES=16384 WEFT_TEST_HOSTS=2 T=150 one mps_dev_comm_2x1_ll "$t/test_dev_comm" 2 \
  --share
if [ "${BENCH:-0}" = 1 ]; then
  bench gpu_2hosts X=1
  [ "${BENCH_ALL:-0}" = 1 ] && bench before WEFT_PROXY_CHUNK_BYTES=65536 WEFT_PROXY_STAGES=2 \
    WEFT_PROXY_THREADS=2
  [ "${BENCH_ALL:-0}" = 1 ] && bench threads2 WEFT_PROXY_THREADS=2
  [ "${BENCH_ALL:-0}" = 1 ] && bench stages4 WEFT_PROXY_STAGES=4
  [ "${BENCH_ALL:-0}" = 1 ] && bench spin0 WEFT_PROXY_SPIN_US=0
  timeout 150 "$b/bench/collbench" --cpu --ranks 2 --hosts 2 "${sweep[@]}" \
    > "$out/collbench_cpu_2hosts.txt" 2>&1 || fail=1
fi
mps_stop
T=${PLAIN_T:-150} one plain_2x1 $t/test_collectives_gpu 2 --share --hosts=2
if [ "${TORCH:-0}" = 1 ]; then
  WEFT_TORCH_HOSTS=2 WEFT_TORCH_BUDGET=${TORCH_S:-150} "$(dirname "$0")/nccl_torch.sh" \
    "$out/torch" "$b" > "$out/torch.out" 2>&1 || fail=1
  tail -12 "$out/torch.out" >> "$r"
fi
(cd "$out" && tar czf logs.tgz ./*.log && rm -f ./*.log)
cat "$r"
for f in "$out"/collbench_*.txt; do
  [ -f "$f" ] || continue
  echo "== $f: NCCL time / weft time per size"
  awk '/^# [a-z_]+$/ {c = $2} !/^#/ && NF > 15 {a[c] = a[c] " " $16} END {for (k in a) print k a[k]}' "$f"
done
exit "$fail"
