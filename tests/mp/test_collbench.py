#!/usr/bin/env python3
"""collbench's claims about its own rows: -c 0 says n/a (null in JSON), not 0 wrong and "no
errors"; alltoallv runs, is checked, and counts the bytes it moves; every row names the
algorithm that ran, which follows a forced WEFT_ALGO; a misspelt WEFT_ALGO stops the run with
the library's message naming the valid algorithms. Short sweeps on 2-3 CPU ranks.
usage: test_collbench.py COLLBENCH"""
import json
import os
import subprocess
import sys
import tempfile

collbench = sys.argv[1]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run(args, algo=None, ranks=2):
    """(returncode, stdout, stderr, json or None) of one short sweep."""
    env = dict(os.environ)
    env.pop("WEFT_ALGO", None)
    if algo is not None:
        env["WEFT_ALGO"] = algo
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "rows.json")
        p = subprocess.run([collbench, "--cpu", "--ranks", str(ranks), "-b", "1K", "-e", "4K",
                            "-n", "2", "-w", "1", "--json", path] + args,
                           env=env, capture_output=True, text=True, timeout=120)
        js = json.load(open(path)) if os.path.exists(path) else None
    return p.returncode, p.stdout, p.stderr, js


def table(out):
    """Data lines of the text output, split into columns."""
    return [ln.split() for ln in out.splitlines() if ln.strip() and not ln.startswith("#")]


# -c 0: nothing checked, so nothing claimed
rc, out, err, js = run(["-c", "0", "-C", "allreduce,alltoallv,sendrecv"])
check(rc == 0, f"-c 0 run exits 0 (got {rc}: {err.strip()[-300:]})")
rows = table(out)
check(len(rows) >= 6, f"-c 0 prints rows ({len(rows)})")
check(all(r[8] == "n/a" and r[12] == "n/a" for r in rows),
      "-c 0: both #wrong columns read n/a")
check("no errors" not in out and "not checked" in out,
      "-c 0: the last line says the results were not checked, not 'no errors'")
check(js is not None and js.get("check") == 0 and js["rows"] and
      all(r.get("wrong", 0) is None for r in js["rows"]),
      "-c 0: every JSON row has \"wrong\": null")

# alltoallv: checked rows with no wrong elements, out of place only, bytes actually moved;
# part of the default sweep (-C all); WEFT_ALGO=ring forced for the collectives that have it
rc, out, err, js = run([], algo="ring", ranks=3)
check(rc == 0, f"WEFT_ALGO=ring default sweep exits 0 (got {rc}: {err.strip()[-300:]})")
rows = js["rows"] if js else []
check(js is not None and js.get("check") == 1, "the default sweep is checked")
a2av = [r for r in rows if r["coll"] == "alltoallv"]
check(len(a2av) == 3, f"alltoallv is in the default sweep, one row per size ({len(a2av)})")
check(a2av and all(r["wrong"] == 0 for r in a2av), "alltoallv rows have wrong == 0")
check(all(r["in_place"] == 0 for r in a2av), "alltoallv has no in-place rows")
n = 3
for r in a2av:  # each rank p sends q ceil(count * k / 4), k in 2,3,5,6 by (3p + 5q) % 4
    moved = sum((r["count"] * (2, 3, 5, 6)[(3 * p + 5 * q) % 4] + 3) // 4
                for p in range(n) for q in range(n))
    check(r["bytes"] == round(moved / n) * 4,
          f"alltoallv row of count {r['count']}: bytes {r['bytes']} are the mean bytes sent")
check(all("algo" in r and r["algo"] not in ("", "none", "n/a") for r in rows),
      "every JSON row names its algorithm")
ar = [r for r in rows if r["coll"] == "allreduce"]
check(len(ar) == 6 and all(r.get("algo") == "ring" for r in ar),
      "WEFT_ALGO=ring: allreduce rows (both ways) say ring: " + str([r.get("algo") for r in ar]))
check(all(r["wrong"] == 0 for r in rows), "WEFT_ALGO=ring: every row is right")
text_ar = [ln for ln in (out.split("# allreduce") + [""])[1].split("#\n")[0].splitlines()
           if ln.strip() and not ln.startswith("#")]
check(text_ar and all(ln.split()[-2:] == ["ring", "ring"] for ln in text_ar),
      "the text rows' algo columns say ring")

# the same with direct: the field follows what ran, it is not a constant
rc, out, err, js = run(["-C", "allreduce,alltoallv"], algo="direct", ranks=3)
ar = [r for r in (js["rows"] if js else []) if r["coll"] == "allreduce"]
check(rc == 0 and ar and all(r.get("algo") == "direct" for r in ar),
      "WEFT_ALGO=direct: allreduce rows say direct")

# a misspelt algorithm: the run stops, nonzero, with the library's message
rc, out, err, js = run(["-C", "allreduce"], algo="rign")
check(rc != 0, "WEFT_ALGO=rign exits nonzero")
check("rign" in err and "valid:" in err and "ring" in err.split("valid:")[-1],
      "WEFT_ALGO=rign: stderr names the valid algorithms: " + err.strip()[-300:])
check("FAILED" in out and "no errors" not in out, "WEFT_ALGO=rign: stdout says FAILED")
check(js is not None and "valid:" in js.get("error", "") and not js["rows"],
      "WEFT_ALGO=rign: the JSON has the error and no rows")

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("collbench rows ok")
