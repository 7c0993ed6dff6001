#!/usr/bin/env bash
# The tuning experiments behind the device defaults, as they ran on nvidia-h200-x2 (2026-11-30)
# from a copy of the build (BUILD=.devbin there). Progress lines ("sizes done") were dropped.
#   1 -> bench/results/2026-11-30-h200x2-tuning-1.txt: staging chunk / stages / channels at
#        256 MiB (busbw), then small allreduce as CUDA-graph replays and reduce_scatter/alltoall
#        at 1M/16M/256M. This ran on the build that allowed at most 32 collective channels.
#   2 -> bench/results/2026-11-30-h200x2-tuning-2.txt: the same at 64 MiB and 1 GiB with up
#        to 64 channels; then allreduce 16 KiB-4 MiB for each WEFT_ONESHOT_MAX_BYTES.
#   3 -> bench/results/2026-11-30-h200x2-tuning-3.txt: split roles (WEFT_P2P_SPLIT) off and
#        on, 1 MiB-1 GiB; chunk size and block bytes with split roles; the low-latency
#        kernel's block bytes; small allreduce as graph replays; the host's queueing time
#        per call (submit_us in the JSON) against the stream time. Raw outputs in RAW.
#        It ran twice: *-tuning-3.txt before the two-input reduction loop (prims.cuh,
#        reduce_multi with NIN = 2), *-tuning-3b.txt after it.
#   4 -> bench/results/2026-11-30-h200x2-tuning-4.txt: the host cost of each CUDA call on
#        the launch path (scripts/probes/api_cost.cu), then small operations' queueing time.
#   5 -> bench/results/2026-11-30-h200x2-tuning-5.txt: rounds per channel (WEFT_P2P_ROUNDS)
#        1, 4 and 8 on the four collectives, then allreduce one-shot against two-shot (with
#        and without split roles), 256 KiB-1 GiB.
#   6 -> bench/results/2026-11-30-h200x2-tuning-6.txt: rounds for allreduce one-shot 2-64
#        MiB; allgather, reduce_scatter, alltoall as graph replays (weft/NCCL time, us);
#        split roles off at small sizes; block bytes 8 and 32 KiB from 64 KiB to 4 MiB.
#   7 -> bench/results/2026-11-30-h200x2-tuning-7.txt: the low-latency kernel's limit
#        (WEFT_LL_MAX_BYTES, per peer) for the four collectives from 128 KiB to 4 MiB; then 4
#        and 8 ranks on the 2 GPUs (2 and 4 per GPU): the oracle matrix and a short sweep.
#   8 -> bench/results/2026-11-30-h200x2-tuning-8.txt: the launch path again, with the
#        runtime's cudaLaunchKernel and the driver's cuLaunchKernel; host-staged regions
#        (WEFT_P2P_DISABLE=1) against NCCL without peer-to-peer (NCCL_P2P_DISABLE=1, its
#        shared-memory transport), 8 B-256 MiB; rounds 1, 2 and 4 for reduce_scatter 2-64 MiB;
#        which NVLink metrics ncu offers here.
#   9 -> bench/results/2026-11-30-h200x2-tuning-9.txt: host-staged regions: channels (4, 8,
#        16), chunk bytes (64 and 128 KiB) and the low-latency limit (64 KiB-1 MiB per peer),
#        the four collectives 64 KiB-64 MiB; NCCL_P2P_DISABLE=1 alongside once; then one
#        allreduce and reduce_scatter kernel at 16 MiB under ncu (NVLink bytes, duration).
#   10 -> bench/results/2026-11-30-h200x2-tuning-10.txt: the low-latency kernel with 128
#        channels of 8 KiB and, on 2 ranks, a thread's lines read together (this build)
#        against 64 channels of 16 KiB read one by one (BASE=collbench of the build before),
#        128 KiB-4 MiB, three alternating rounds, stream launches and graph replays.
#   11 -> bench/results/2026-11-30-h200x2-tuning-11.txt: the low-latency kernel's limit at
#        2 MiB per peer (128 channels of 16 KiB slots) against 1 MiB (WEFT_LL_MAX_BYTES),
#        the four collectives 512 KiB-8 MiB, three alternating rounds, stream and graph.
#   12 -> bench/results/2026-11-30-h200x2-tuning-12.txt: the allgather stalls, traced: allgather
#        and alltoall 256 KiB-4 MiB, 200 calls a loop, four rounds of: with NCCL in the
#        process (--compare nccl), alone, and with NCCL and one of WEFT_LL_MAX_BYTES=262144
#        (no low-latency kernel past 256 KiB), CUDA_DEVICE_MAX_CONNECTIONS=32 (streams share
#        fewer hardware queues), NCCL_CUMEM_ENABLE=0 (NCCL maps peers through legacy IPC) or
#        NCCL_P2P_DISABLE=1 (NCCL maps no peer memory); --trace stamps of every loop on both
#        ranks (scripts/gpu/trace_stalls.py lists the slow ones with the call that was slowest)
#        and the machine's steal time (/proc/stat) around each run; the CUDA contexts on each
#        GPU; then send/recv with 4-32 channels a message (WEFT_P2P_SETS). Raw traces in RAW.
#   13 -> bench/results/2026-11-30-h200x2-tuning-13.txt: tuning 12's loops with NCCL in the
#        process (its default, cuMem peer mappings), eight rounds, after the low-latency
#        kernel's waits stopped reading host memory from every thread; then sendrecv and
#        broadcast against NCCL with the default WEFT_P2P_SETS.
#   14 -> bench/results/2026-11-30-h200x2-tuning-14.txt: broadcast (its root out of place on two
#        roles) and reduce, 64 MiB-1 GiB, against NCCL; then reduce with WEFT_P2P_ROUNDS 1 and
#        2, WEFT_P2P_STAGES 4 and WEFT_P2P_CHUNK_BYTES 512 KiB.
#   15 -> bench/results/2026-11-30-h200x2-tuning-15.txt: the stalls left after tuning 13, counted:
#        the four collectives 8 B-4 MiB, 20 calls a loop, with NCCL in the process, three runs
#        with its defaults and three with NCCL_CUMEM_ENABLE=0, alternating; traced.
# Columns of the size lines: in "size:A/B" A is weft's time (us) and B weft's busbw (GB/s), out
# of place (until tuning 12 this line said B was NCCL's; it never was);
# in the space-separated ones of experiment 1: size, weft time (us), then NCCL's columns
# (time or busbw as awk picked them: $14 time, $15 busbw, $16 ratio, $17 empty).
# usage: scripts/gpu/tune.sh 1|2|3|4|5|6|7|8|9|10|11|12|13|14|15 [BUILD] [RAW]
set -uo pipefail
exp=${1:?usage: scripts/gpu/tune.sh 1|2|3|4|5|6|7|8|9|10|11|12|13|14|15 [BUILD] [RAW]}
b=${2:-build-dev}
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
cb=$b/bench/collbench
# size:time(us)/busbw(GB/s) per line of a collbench table, one line per collective
pairs() { awk '/^# [a-z_]+$/ {if (l) print l; l = $2 ":"} !/^#/ && NF > 8 {l = l " " $1 ":" $6 "/" $8}
  END {if (l) print l}'; }
api_cost() { # raw dir: builds and runs scripts/probes/api_cost.cu there
  mkdir -p "$1"
  nvcc -O2 -gencode arch=compute_90,code=sm_90 -o "$1/api_cost" "$(dirname "$0")/../probes/api_cost.cu" &&
    "$1/api_cost"
}
submit_table() { # json: coll bytes time submit peer_time peer_submit (out of place)
  python3 -c "
import json, sys
for r in json.load(open(sys.argv[1]))['rows']:
    if not r['in_place']:
        print(r['coll'], r['bytes'], r['time_us'], r.get('submit_us'), r.get('peer_time_us'),
              r.get('peer_submit_us'))" "$1"
}
if [ "$exp" = 15 ]; then
  raw=${3:-/tmp/tune15}
  mkdir -p "$raw"
  for round in 1 2 3; do
    for mode in default nocumem; do
      envs=""
      [ "$mode" = nocumem ] && envs="NCCL_CUMEM_ENABLE=0"
      env $envs timeout 120 $cb -C allreduce,allgather,reduce_scatter,alltoall -b 8 -e 4M -n 20 -w 5 \
        -c 0 --compare nccl --trace > "$raw/$mode-$round.txt" 2> "$raw/$mode-$round.trace"
      echo "$mode round $round: $(python3 "$(dirname "$0")/trace_stalls.py" "$raw/$mode-$round.trace" |
        grep -E "^loop|stalled loops" | tr '\n' ' ')"
    done
  done
  exit 0
fi
if [ "$exp" = 14 ]; then
  echo "broadcast, reduce against NCCL (size:weft busbw/NCCL busbw/ratio):"
  timeout 60 $cb -C broadcast,reduce -b 64M -e 1G -f 4 -n 10 -w 3 -c 0 --compare nccl |
    awk '/^# [a-z_]+$/ {if (l) print l; l = $2 ":"} !/^#/ && NF > 14 {l = l " " $1 ":" $8 "/" $15 "/" $16}
      END {if (l) print l}'
  for v in "WEFT_P2P_ROUNDS=1" "WEFT_P2P_ROUNDS=2" "WEFT_P2P_STAGES=4" "WEFT_P2P_CHUNK_BYTES=524288"; do
    echo "reduce, $v (weft us / weft busbw):"
    env $v timeout 60 $cb -C reduce -b 64M -e 1G -f 4 -n 10 -w 3 -c 0 | pairs
  done
  exit 0
fi
if [ "$exp" = 13 ]; then
  raw=${3:-/tmp/tune13}
  mkdir -p "$raw"
  for round in 1 2 3 4 5 6 7 8; do
    timeout 120 $cb -C allgather,alltoall -b 256K -e 4M -f 2 -n 200 -w 20 -c 0 --compare nccl \
      --trace > "$raw/nccl-$round.txt" 2> "$raw/nccl-$round.trace"
    echo "nccl round $round: $(pairs < "$raw/nccl-$round.txt" | tr '\n' ' ')"
    python3 "$(dirname "$0")/trace_stalls.py" "$raw/nccl-$round.trace" | tail -20
  done
  echo "sendrecv and broadcast against NCCL (default sets):"
  timeout 60 $cb -C sendrecv,broadcast -b 1M -e 1G -f 4 -n 10 -w 3 -c 0 --compare nccl | pairs
  exit 0
fi
if [ "$exp" = 12 ]; then
  raw=${3:-/tmp/tune12}
  mkdir -p "$raw"
  steal() { awk '/^cpu / {print $9}' /proc/stat; }
  for round in 1 2 3 4; do
    for mode in nccl alone ll256k conn32 nocumem ncclshm; do
      cmp="--compare nccl" envs=""
      [ "$mode" = alone ] && cmp=""
      [ "$mode" = ll256k ] && envs="WEFT_LL_MAX_BYTES=262144"
      [ "$mode" = conn32 ] && envs="CUDA_DEVICE_MAX_CONNECTIONS=32"
      [ "$mode" = nocumem ] && envs="NCCL_CUMEM_ENABLE=0"
      [ "$mode" = ncclshm ] && envs="NCCL_P2P_DISABLE=1"
      s0=$(steal)
      env $envs timeout 120 $cb -C allgather,alltoall -b 256K -e 4M -f 2 -n 200 -w 20 -c 0 $cmp \
        --trace > "$raw/$mode-$round.txt" 2> "$raw/$mode-$round.trace"
      echo "$mode round $round (steal +$(($(steal) - s0)) ticks): $(pairs < "$raw/$mode-$round.txt" | tr '\n' ' ')"
      python3 "$(dirname "$0")/trace_stalls.py" "$raw/$mode-$round.trace" | tail -20
    done
  done
  echo "contexts per GPU while one run goes on (a rank's pid on both GPUs would time-slice):"
  $cb -C allgather -b 1M -e 1M -n 200000 -w 5 -c 0 --compare nccl > /dev/null 2>&1 &
  sleep 4
  nvidia-smi --query-compute-apps=pid,gpu_bus_id,used_memory --format=csv
  wait
  for sets in 8 4 2 1; do
    echo "sendrecv, WEFT_P2P_SETS=$sets (32/$sets channels a message):"
    WEFT_P2P_SETS=$sets timeout 60 $cb -C sendrecv -b 1M -e 1G -f 4 -n 10 -w 3 -c 0 | pairs
  done
  for sets in 8 2; do
    echo "sendrecv, WEFT_P2P_SETS=$sets, WEFT_P2P_STAGES=4:"
    WEFT_P2P_SETS=$sets WEFT_P2P_STAGES=4 timeout 60 $cb -C sendrecv -b 1M -e 1G -f 4 -n 10 -w 3 \
      -c 0 | pairs
  done
  echo "sendrecv and broadcast against NCCL (default sets):"
  timeout 60 $cb -C sendrecv,broadcast -b 1M -e 1G -f 4 -n 10 -w 3 -c 0 --compare nccl | pairs
  exit 0
fi
if [ "$exp" = 7 ]; then
  for lim in 131072 262144 524288 1048576; do
    echo "WEFT_LL_MAX_BYTES=$lim, 128K-4M:"
    WEFT_LL_MAX_BYTES=$lim timeout 60 $cb -C allreduce,allgather,reduce_scatter,alltoall -b 128K \
      -e 4M -f 2 -n 50 -w 10 -c 0 | pairs
  done
  for n in 4 8; do
    echo "$n ranks on 2 GPUs: oracle matrix"
    timeout 300 $b/tests/gpu/test_collectives_gpu $n 2>&1 | tail -2
    echo "$n ranks on 2 GPUs: sweep (checked)"
    timeout 120 $cb -C allreduce,allgather,reduce_scatter,alltoall -b 8 -e 64M -f 64 -n 10 -w 3 \
      --ranks $n | pairs
  done
  exit 0
fi
if [ "$exp" = 6 ]; then
  for r in 1 2 4; do
    echo "allreduce one-shot, rounds=$r:"
    WEFT_P2P_ROUNDS=$r timeout 60 $cb -C allreduce -b 2M -e 64M -f 2 -n 20 -w 5 -c 0 | pairs
  done
  echo "graph replays, 8 B-1 MiB, weft time/nccl time:"
  timeout 90 $cb -C allgather,reduce_scatter,alltoall -b 8 -e 1M -f 8 -n 50 -w 10 -c 0 -G 1 \
    --compare nccl | awk '/^# [a-z_]+$/ {if (l) print l; l = $2 ":"}
      !/^#/ && NF > 8 {l = l " " $1 ":" $6 "/" $14} END {if (l) print l}'
  echo "split=0, stream, 8 B-1 MiB:"
  WEFT_P2P_SPLIT=0 timeout 60 $cb -C allgather,reduce_scatter -b 8 -e 1M -f 8 -n 50 -w 10 -c 0 |
    pairs
  for bb in 8192 32768; do
    echo "block bytes $bb, 64K-4M:"
    WEFT_P2P_BLOCK_BYTES=$bb timeout 60 $cb -C allgather,reduce_scatter,alltoall -b 64K -e 4M \
      -f 4 -n 50 -w 10 -c 0 | pairs
  done
  exit 0
fi
if [ "$exp" = 5 ]; then
  raw=${3:-raw}
  mkdir -p "$raw"
  for r in 1 4 8; do
    echo "rounds=$r, 1M-1G, f32:"
    WEFT_P2P_ROUNDS=$r timeout 120 $cb -C allreduce,allgather,reduce_scatter,alltoall -b 1M -e 1G \
      -f 4 -n 10 -w 3 -c 0 > "$raw/rounds$r.txt" 2>&1
    pairs < "$raw/rounds$r.txt"
  done
  for v in "oneshot 1" "twoshot 1" "twoshot 0"; do
    set -- $v
    echo "allreduce $1, split=$2, rounds=4:"
    WEFT_ALGO=$1 WEFT_P2P_SPLIT=$2 timeout 120 $cb -C allreduce -b 2M -e 1G -f 2 -n 10 -w 3 -c 0 \
      > "$raw/ar-$1-$2.txt" 2>&1
    pairs < "$raw/ar-$1-$2.txt"
  done
  exit 0
fi
if [ "$exp" = 11 ]; then
  four=allreduce,allgather,reduce_scatter,alltoall
  for round in 1 2 3; do
    for lim in 1048576 2097152; do
      for g in 0 1; do
        echo "round $round, ll_max=$lim, graph=$g (size:us):"
        WEFT_LL_MAX_BYTES=$lim timeout 60 $cb -C $four -b 512K -e 8M -f 2 -n 50 -w 10 -c 0 -G $g |
          pairs | sed 's#/[0-9.]*##g'
      done
    done
  done
  exit 0
fi
if [ "$exp" = 10 ]; then
  base=${BASE:?BASE=collbench binary of the build to compare against}
  four=allreduce,allgather,reduce_scatter,alltoall
  for round in 1 2 3; do
    for v in "base $base" "new $cb"; do
      set -- $v
      echo "round $round, $1, stream (size:us):"
      timeout 60 $2 -C $four -b 128K -e 4M -f 2 -n 50 -w 10 -c 0 | pairs | sed 's#/[0-9.]*##g'
      echo "round $round, $1, graph (size:us):"
      timeout 60 $2 -C $four -b 128K -e 4M -f 2 -n 50 -w 10 -c 0 -G 1 | pairs | sed 's#/[0-9.]*##g'
    done
  done
  exit 0
fi
if [ "$exp" = 9 ]; then
  raw=${3:-raw}
  mkdir -p "$raw"
  four=allreduce,allgather,reduce_scatter,alltoall
  echo "host-staged defaults and NCCL_P2P_DISABLE=1 (size:weft us/nccl us):"
  WEFT_P2P_DISABLE=1 NCCL_P2P_DISABLE=1 timeout 120 $cb -C $four -b 64K -e 64M -f 4 -n 10 -w 3 \
    --compare nccl > "$raw/host-nccl.txt" 2>&1
  awk '/^# [a-z_]+$/ {if (l) print l; l = $2 ":"} !/^#/ && NF > 8 {l = l " " $1 ":" $6 "/" $14}
    END {if (l) print l}' "$raw/host-nccl.txt"
  for v in "4 131072 0" "8 131072 0" "16 131072 0" "8 65536 0" "16 65536 0" "8 131072 65536" \
    "8 131072 262144" "16 131072 262144"; do
    set -- $v
    echo "host-staged channels=$1 chunk=$2 ll_max=$3 (size:us):"
    WEFT_P2P_DISABLE=1 WEFT_P2P_CHANNELS=$1 WEFT_P2P_CHUNK_BYTES=$2 WEFT_LL_MAX_BYTES=$3 \
      timeout 100 $cb -C $four -b 64K -e 64M -f 4 -n 10 -w 3 -c 0 > "$raw/host-$1-$2-$3.txt" 2>&1
    pairs < "$raw/host-$1-$2-$3.txt" | sed 's#/[0-9.]*##g'
  done
  for c in allreduce reduce_scatter; do
    echo "ncu, $c 16 MiB, one kernel of rank 0 (application replay):"
    timeout 150 ncu --target-processes all --replay-mode application -k regex:kernel \
      --launch-skip 6 --launch-count 1 --metrics gpu__time_duration.sum,nvltx__bytes.sum,nvlrx__bytes.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes.sum,sm__warps_active.avg.pct_of_peak_sustained_active \
      $cb -C $c -b 16M -e 16M -n 2 -w 5 -c 0 --ranks 2 > "$raw/ncu-$c.txt" 2>&1
    grep -E "==PROF==|kernel|duration|bytes|throughput|warps_active" "$raw/ncu-$c.txt" | head -30
  done
  exit 0
fi
if [ "$exp" = 8 ]; then
  raw=${3:-raw}
  api_cost "$raw"
  echo "host-staged (weft WEFT_P2P_DISABLE=1, NCCL NCCL_P2P_DISABLE=1), f32, weft us:nccl us:ratio:"
  WEFT_P2P_DISABLE=1 NCCL_P2P_DISABLE=1 timeout 240 $cb -C allreduce,allgather,reduce_scatter,alltoall \
    -b 8 -e 256M -f 8 -n 10 -w 3 --compare nccl --json "$raw/hoststaged.json" \
    > "$raw/hoststaged.txt" 2>&1
  grep "^#" "$raw/hoststaged.txt" | grep -v "sizes done" | head -8
  awk '/^# [a-z_]+$/ {if (l) print l; l = $2 ":"} !/^#/ && NF > 8 {l = l " " $1 ":" $6 ":" $14 ":" $16}
    END {if (l) print l}' "$raw/hoststaged.txt"
  for r in 1 2 4; do
    echo "reduce_scatter rounds=$r, 2M-64M (size:us):"
    WEFT_P2P_ROUNDS=$r timeout 60 $cb -C reduce_scatter -b 2M -e 64M -f 2 -n 20 -w 5 -c 0 |
      grep -v "^#" | awk '{printf "%s:%s ", $1, $6} END {print ""}'
  done
  echo "ncu NVLink metrics offered:"
  timeout 120 ncu --query-metrics 2>&1 | grep -i "nvl" | head -20
  exit 0
fi
if [ "$exp" = 4 ]; then
  raw=${3:-raw}
  api_cost "$raw"
  echo "host queueing per call (us) against stream time, weft then nccl:"
  timeout 120 $cb -C allreduce,allgather,reduce_scatter,alltoall -b 8 -e 64K -f 64 -n 200 -w 20 \
    --compare nccl --json "$raw/submit.json" > "$raw/submit.txt" 2>&1
  submit_table "$raw/submit.json"
  exit 0
fi
if [ "$exp" = 3 ]; then
  raw=${3:-raw}
  mkdir -p "$raw"
  four=allreduce,allgather,reduce_scatter,alltoall
  for split in 0 1; do
    echo "split=$split, 1M-1G, f32:"
    WEFT_P2P_SPLIT=$split timeout 120 $cb -C $four -b 1M -e 1G -f 4 -n 10 -w 3 -c 0 \
      > "$raw/split$split.txt" 2>&1
    pairs < "$raw/split$split.txt"
  done
  echo "split=1, allreduce forced one-shot (general kernel above 1 MiB):"
  WEFT_ALGO=oneshot timeout 120 $cb -C allreduce -b 1M -e 1G -f 4 -n 10 -w 3 -c 0 \
    > "$raw/oneshot.txt" 2>&1
  pairs < "$raw/oneshot.txt"
  for v in "524288 32768" "262144 8192" "262144 16384" "131072 8192"; do
    set -- $v
    echo "split=1 chunk=$1 block_bytes=$2:"
    WEFT_P2P_CHUNK_BYTES=$1 WEFT_P2P_BLOCK_BYTES=$2 timeout 120 $cb -C $four -b 256K -e 1G -f 4 \
      -n 10 -w 3 -c 0 > "$raw/chunk$1-bb$2.txt" 2>&1
    pairs < "$raw/chunk$1-bb$2.txt"
  done
  for llb in 1024 4096 16384; do
    echo "low-latency block bytes $llb (stream launches, then graph replays):"
    WEFT_LL_BLOCK_BYTES=$llb timeout 60 $cb -C allreduce -b 8 -e 1M -f 4 -n 50 -w 10 -c 0 \
      > "$raw/ll$llb.txt" 2>&1
    pairs < "$raw/ll$llb.txt"
    WEFT_LL_BLOCK_BYTES=$llb timeout 60 $cb -C allreduce -b 8 -e 1M -f 4 -n 50 -w 10 -c 0 -G 1 \
      > "$raw/ll$llb-graph.txt" 2>&1
    pairs < "$raw/ll$llb-graph.txt"
  done
  echo "host queueing per call (us) against stream time, weft then nccl:"
  timeout 120 $cb -C $four -b 8 -e 64K -f 64 -n 200 -w 20 --compare nccl \
    --json "$raw/submit.json" > "$raw/submit.txt" 2>&1
  submit_table "$raw/submit.json"
  exit 0
fi
if [ "$exp" = 1 ]; then
  for v in "65536 4 32" "262144 4 32" "1048576 2 32" "262144 2 32" "131072 4 16"; do
    set -- $v
    for c in allgather allreduce; do
      r=$(WEFT_P2P_CHUNK_BYTES=$1 WEFT_P2P_STAGES=$2 WEFT_P2P_CHANNELS=$3 timeout 60 $cb -C $c \
        -b 256M -e 256M -n 5 -w 2 -c 0 | grep -v "^#" | awk '{print $8}')
      echo "chunk=$1 stages=$2 ch=$3 $c busbw=$r"
    done
  done
  echo "graph mode small allreduce:"
  timeout 60 $cb -C allreduce -b 8 -e 64K -f 8 -n 50 -w 10 -G 1 --compare nccl | grep -v "^#" |
    awk '{print $1, $6, $15, $17}'
  echo "rs/a2a quick:"
  timeout 90 $cb -C reduce_scatter,alltoall -b 1M -e 256M -f 16 -n 5 -w 2 --compare nccl |
    grep -v "^#" | awk '{print $1, $6, $8, $10, $15, $16, $17}'
  exit 0
fi
for v in "262144 2 32" "262144 2 64" "524288 2 64" "1048576 2 64" "131072 4 64"; do
  set -- $v
  for c in allgather allreduce; do
    r=$(WEFT_P2P_CHUNK_BYTES=$1 WEFT_P2P_STAGES=$2 WEFT_P2P_CHANNELS=$3 timeout 60 $cb -C $c \
      -b 64M -e 1G -f 16 -n 5 -w 2 -c 0 | grep -v "^#" | awk '{printf "%s ", $8}')
    echo "chunk=$1 stages=$2 ch=$3 $c busbw(64M,1G)=$r"
  done
done
for lim in 1 65536 131072 262144 524288 1048576; do
  echo "oneshot max $lim:"
  WEFT_ONESHOT_MAX_BYTES=$lim timeout 60 $cb -C allreduce -b 16K -e 4M -n 20 -w 5 --compare nccl |
    grep -v "^#" | awk '{printf "%s:%s/%s ", $1, $6, $15} END {print ""}'
done
echo "small, stream mode:"
timeout 60 $cb -C allreduce,allgather,reduce_scatter,alltoall -b 8 -e 1M -f 32 -n 50 -w 10 \
  --compare nccl | grep -v "^#" | awk '{printf "%s:%s/%s ", $1, $6, $15} END {print ""}'
