#!/usr/bin/env python3
"""Reads collbench --trace lines (stderr of one run, every rank) and prints the timed loops
that took far longer than the fastest loop of the same kind, with both ranks' stamps side by
side: who left the barrier late, whose first call queued late, and what the GPU saw.
usage: trace_stalls.py TRACE.txt [FACTOR]   (a stall: total > FACTOR x that kind's fastest)"""
import re
import sys

LINE = re.compile(
    r"# trace rank (\d+) (\w+) (\w+) count (\d+): host barrier left at ([\d.]+) us, then "
    r"\+([-\d.]+) event, \+([-\d.]+) first call queued, \+([-\d.]+) all queued, \+([-\d.]+) "
    r"synced; gpu first ([-\d.]+) us, slowest call (-?\d+) of ([-\d.]+) us, total ([-\d.]+) us")


def main():
    factor = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
    by_rank = {}
    for line in open(sys.argv[1], errors="replace"):
        m = LINE.search(line)
        if not m:
            continue
        g = m.groups()
        rank = int(g[0])
        by_rank.setdefault(rank, []).append({
            "lib": g[1], "coll": g[2], "count": int(g[3]), "bar": float(g[4]),
            "event": float(g[5]), "first": float(g[6]), "queued": float(g[7]),
            "synced": float(g[8]), "gpu_first": float(g[9]), "slow_at": int(g[10]),
            "slow": float(g[11]), "total": float(g[12])})
    if not by_rank:
        print("no trace lines")
        return
    ranks = sorted(by_rank)
    nloops = min(len(v) for v in by_rank.values())
    fastest = {}
    for i in range(nloops):
        r0 = by_rank[ranks[0]][i]
        key = (r0["lib"], r0["coll"], r0["count"])
        t = max(by_rank[r][i]["total"] for r in ranks)
        fastest[key] = min(fastest.get(key, t), t)
    stalls = 0
    for i in range(nloops):
        r0 = by_rank[ranks[0]][i]
        key = (r0["lib"], r0["coll"], r0["count"])
        worst = max(by_rank[r][i]["total"] for r in ranks)
        if worst <= factor * fastest[key] or worst - fastest[key] < 50:
            continue
        stalls += 1
        print(f"loop {i}: {r0['lib']} {r0['coll']} count {r0['count']}: "
              f"{worst:.0f} us against {fastest[key]:.0f} at best")
        base = min(by_rank[r][i]["bar"] for r in ranks)
        for r in ranks:
            x = by_rank[r][i]
            print(f"  rank {r}: left barrier +{x['bar'] - base:.1f} us, event +{x['event']:.1f}, "
                  f"first queued +{x['first']:.1f}, all queued +{x['queued']:.1f}, synced "
                  f"+{x['synced']:.1f}; gpu first {x['gpu_first']:.1f}, slowest call "
                  f"{x['slow_at']} ({x['slow']:.1f}), total {x['total']:.1f}")
    skews = [max(by_rank[r][i]["bar"] for r in ranks) - min(by_rank[r][i]["bar"] for r in ranks)
             for i in range(nloops)]
    late = [x for x in skews if x > 1000]
    print(f"{stalls} stalled loops of {nloops}; host barrier left over 1 ms apart in "
          f"{len(late)} (worst {max(skews) / 1000:.1f} ms)")


if __name__ == "__main__":
    main()
