#!/usr/bin/env python3
"""Prints collbench --compare JSON files as one table: a row per collective, a column per size,
each cell the peer's time over weft's (out of place), as the range over the files given.
usage: ratios.py RUN.json [RUN2.json ...]"""
import json
import sys


def size_name(b):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= div and b % div == 0:
            return "%d %s" % (b // div, unit)
    return "%d B" % b


def main():
    cells, colls, sizes = {}, [], set()
    for path in sys.argv[1:]:
        for row in json.load(open(path)).get("rows", []):
            if row.get("in_place") or "ratio" not in row:
                continue
            k = (row["coll"], row["bytes"])
            if row["coll"] not in colls:
                colls.append(row["coll"])
            sizes.add(row["bytes"])
            cells.setdefault(k, []).append((row["ratio"], row["time_us"], row["peer_time_us"]))
    if not cells:
        print("no rows with a peer")
        return 1
    sizes = sorted(sizes)
    print("| ratio | " + " | ".join(size_name(s) for s in sizes) + " |")
    print("| --- " * (len(sizes) + 1) + "|")
    for c in colls:
        out = []
        for s in sizes:
            v = [r for r, _, _ in cells.get((c, s), [])]
            if not v:
                out.append("-")
            elif len(v) == 1 or min(v) == max(v):
                out.append("%.2f" % v[0])
            else:
                out.append("%.2f-%.2f" % (min(v), max(v)))
        print("| %s | %s |" % (c, " | ".join(out)))
    low = sorted((r, c, s, t, p) for (c, s), v in cells.items() for r, t, p in v if r < 1.0)
    for r, c, s, t, p in low:
        print("under 1.0: %s %s: %.2f (weft %.1f us, peer %.1f us)" % (c, size_name(s), r, t, p))
    return 0


if __name__ == "__main__":
    sys.exit(main())
