#!/usr/bin/env bash
# Same-run before/after of host buffers: builds an older tree (OLD_SRC, e.g. from
# `git archive OLD | tar -x -C OLD_SRC`) and this one without CUDA, then runs collbench on
# RANKS local ranks, every collective both trees have, alternating old and new REPS times,
# and writes OUTDIR/ratios.txt: per collective and size, the median time of each and
# new/old (under 1: the new tree is faster).
# usage: scripts/host/before_after.sh OLD_SRC OUTDIR [RANKS] [REPS]  (BA_MAX_BYTES: largest size)
set -uo pipefail
old=$(realpath "${1:?usage: $0 OLD_SRC OUTDIR [RANKS] [REPS]}")
out=$(realpath -m "${2:?usage: $0 OLD_SRC OUTDIR [RANKS] [REPS]}")
ranks=${3:-4}
reps=${4:-3}
cd "$(dirname "$0")/../.."
mkdir -p "$out"
{ nproc; uname -r; git log -1 --format='new: %h %s' 2> /dev/null || echo "new: (no git)"; } \
  > "$out/machine.txt"
for t in old new; do
  src=$([ $t = old ] && echo "$old" || pwd)
  rm -rf "$out/build-$t"
  (meson setup "$out/build-$t" "$src" -Dcuda=disabled -Dmpi=disabled -Dtests=false \
    > "$out/build-$t.log" 2>&1 && ninja -C "$out/build-$t" bench/collbench >> "$out/build-$t.log" 2>&1) ||
    { tail -30 "$out/build-$t.log"; exit 1; }
done
colls=allreduce,reduce_scatter,allgather,broadcast,reduce,alltoall,sendrecv
for r in $(seq 1 "$reps"); do
  for t in old new; do
    timeout 600 "$out/build-$t/bench/collbench" --cpu --ranks "$ranks" -C $colls -b 1K -e "${BA_MAX_BYTES:-16M}" \
      -f 4 -n 20 -w 5 --json "$out/$t-$r.json" > "$out/$t-$r.txt" 2>&1 ||
      { echo "collbench ($t, rep $r) failed:"; tail -20 "$out/$t-$r.txt"; exit 1; }
  done
done
python3 - "$out" "$reps" << 'EOF' | tee "$out/ratios.txt"
import json, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
times = {}
for t in ("old", "new"):
    for r in range(1, reps + 1):
        for row in json.load(open(f"{out}/{t}-{r}.json"))["rows"]:
            if row.get("wrong"):
                sys.exit(f"{t} rep {r}: {row['coll']} {row['bytes']} B had wrong results")
            key = (row["coll"], row["bytes"], row["in_place"])
            times.setdefault(key, {}).setdefault(t, []).append(row["time_us"])
print(f"# {reps} alternating runs each; median time (us); ratio = new / old")
print(f"# {'collective':<15}{'bytes':>10}{'ip':>4}{'old':>11}{'new':>11}{'ratio':>8}")
ratios = []
for (coll, size, ip), v in sorted(times.items()):
    if "old" not in v or "new" not in v:
        continue
    o, n = statistics.median(v["old"]), statistics.median(v["new"])
    ratios.append(n / o)
    print(f"  {coll:<15}{size:>10}{ip:>4}{o:>11.2f}{n:>11.2f}{n / o:>8.3f}")
g = statistics.geometric_mean(ratios)
print(f"# {len(ratios)} rows: geometric mean of new/old {g:.3f}, "
      f"min {min(ratios):.3f}, max {max(ratios):.3f}")
EOF
