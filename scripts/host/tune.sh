#!/usr/bin/env bash
# Measures each algorithm (and ring chunk sizes) per size on local ranks, to set the
# tuner's crossovers on a many-core host. usage: scripts/host/tune.sh OUTDIR [build dir]
set -uo pipefail
out=${1:?usage: $0 OUTDIR}
b=${2:-build-dev}
cd "$(dirname "$0")/../.."
if [ ! -x "$b/bench/collbench" ]; then
  meson setup "$b" -Dtests=false > "$out/build.log" 2>&1 && ninja -C "$b" >> "$out/build.log" 2>&1 || { tail -20 "$out/build.log"; exit 1; }
fi
row() { # label, then env assignments; prints time (us) per size
  local label=$1; shift
  printf "%-26s" "$label"
  env "$@" timeout 120 "$b/bench/collbench" --ranks "$np" -C "$coll" -b 16K -e 16M -f 4 -n 10 -w 3 -c 0 2>/dev/null |
    awk '/^#/ {next} {printf " %9.1f", $6} END {print ""}'
}
for np in 4 8; do
  coll=allreduce
  echo "== allreduce np=$np, time (us) at 16K 64K 256K 1M 4M 16M"
  for a in auto ring rhd tree direct; do row "$a" WEFT_ALGO=$a; done
  for c in 131072 524288 2097152; do row "ring chunk $c" WEFT_ALGO=ring WEFT_CHUNK_BYTES=$c; done
  for c in 131072 524288; do row "tree chunk $c" WEFT_ALGO=tree WEFT_CHUNK_BYTES=$c; done
  for r in 262144 4194304; do row "ring shm ring $r" WEFT_ALGO=ring WEFT_SHM_RING_BYTES=$r; done
  coll=broadcast
  echo "== broadcast np=$np"
  for a in chain tree; do row "$a" WEFT_ALGO=$a; done
  row "chain chunk 2097152" WEFT_ALGO=chain WEFT_CHUNK_BYTES=2097152
  coll=allgather
  echo "== allgather np=$np"
  for a in ring rhd direct; do row "$a" WEFT_ALGO=$a; done
  coll=alltoall
  echo "== alltoall np=$np"
  for a in pairwise direct; do row "$a" WEFT_ALGO=$a; done
done 2>&1 | tee "$out/tune.txt"
