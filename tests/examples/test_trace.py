#!/usr/bin/env python3
"""zero --trace and trace_png (examples/common/trace.c, examples/trace_png.c): the timeline is
valid Chrome-trace JSON with compute, wait and communication spans for every rank, each step's
forward before its backward, and trace_png draws it into a PNG of the right size.
usage: test_trace.py ZERO TRACE_PNG"""
import json
import os
import struct
import subprocess
import sys
import tempfile

zero, drawer = sys.argv[1], sys.argv[2]
with tempfile.TemporaryDirectory() as d:
    trace, png = os.path.join(d, "t.json"), os.path.join(d, "t.png")
    subprocess.run([zero, "--ranks", "2", "--stage", "3", "--steps", "3", "--trace", trace],
                   check=True, stdout=subprocess.DEVNULL)
    events = json.load(open(trace))["traceEvents"]
    assert not [p for p in os.listdir(d) if ".part" in p], "rank files left behind"
    for rank in (0, 1):
        mine = [e for e in events if e["tid"] // 2 == rank]
        cats = {e["cat"] for e in mine}
        assert {"compute", "comm", "wait"} <= cats, (rank, cats)
        fw = [e["ts"] for e in mine if e["name"] == "forward"]
        bw = [e["ts"] for e in mine if e["name"] == "backward"]
        assert len(fw) == len(bw) == 3 and all(f < b for f, b in zip(fw, bw)), (fw, bw)
        # ZeRO-3: every layer gathered in each pass, every block reduce-scattered once a step
        assert sum(e["name"].startswith("reduce-scatter") for e in mine) == 3 * 4, rank
        assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in mine)
        assert all((e["cat"] == "comm") == (e["tid"] % 2 == 1) for e in mine)
    subprocess.run([drawer, trace, png], check=True, stdout=subprocess.DEVNULL)
    head = open(png, "rb").read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", head
    w, h = struct.unpack(">II", head[16:24])
    assert w == 1400 and h > 100, (w, h)
print("test_trace: 2 ranks, %d spans, drawn" % len(events))
