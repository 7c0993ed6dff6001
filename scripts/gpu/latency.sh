#!/usr/bin/env bash
# Small sizes on 2 fake hosts under MPS (8 B to 64 KiB: allgather, broadcast, sendrecv,
# allreduce), in variants that isolate where the time goes: against NCCL's sockets with the
# small low-latency kernel through the proxy (the default to 8 KiB a peer) and without it
# (WEFT_PROXY_LL_BYTES=0, the general kernel alone), each also as CUDA-graph replays (no host
# launch cost); one proxy thread, one proxy channel, no spinning
# proxy (WEFT_PROXY_SPIN_US=0), and on one host over p2p and host-staged regions (the floor
# without the network). One line per variant and collective: "time/ratio" per size.
# usage: scripts/gpu/latency.sh OUT [BUILD]   (report in OUT/lat.txt, sweeps in OUT/lat.tgz)
source "$(dirname "$0")/common.sh" # OUT, BUILD (b), the environment, mps_start and mps_stop
mps_start "$out/lat.txt"
sw=(-C allgather,broadcast,sendrecv,allreduce -b 8 -e 64K -f 8 -n 40 -w 10)
v() { # name, collbench options, VAR=value... (X=1: none)
  local name=$1 args=$2
  shift 2
  echo "== $name: $args $*" >> "$out/lat.txt"
  # shellcheck disable=SC2086 # args holds several options
  env "$@" timeout 60 "$b/bench/collbench" --gpu --ranks 2 $args "${sw[@]}" > "$out/lat_$name.txt" 2>&1
  echo "rc $?" >> "$out/lat.txt"
  awk '/^# [a-z_]+$/ {c = $2} !/^#/ && NF > 10 {printf "%s %s %s %s\n", c, $1, $6, $16}' \
    "$out/lat_$name.txt" | awk '{a[$1] = a[$1] " " $3 "/" $4} END {for (k in a) print k a[k]}' \
    >> "$out/lat.txt"
}
v base "--hosts 2 --compare nccl" X=1
v general "--hosts 2 --compare nccl" WEFT_PROXY_LL_BYTES=0
v graph "--hosts 2 --compare nccl -G 1" X=1
v general_graph "--hosts 2 --compare nccl -G 1" WEFT_PROXY_LL_BYTES=0
v t1 "--hosts 2" WEFT_PROXY_THREADS=1
v ch1 "--hosts 2" WEFT_PROXY_CHANNELS=1
v spin0 "--hosts 2" WEFT_PROXY_SPIN_US=0
v onehost_p2p "" X=1
v onehost_hs "" WEFT_P2P_DISABLE=1
v onehost_hs_graph "-G 1" WEFT_P2P_DISABLE=1
mps_stop
(cd "$out" && tar czf lat.tgz lat_*.txt && rm -f lat_*.txt)
cat "$out/lat.txt"
