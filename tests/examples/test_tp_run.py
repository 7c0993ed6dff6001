#!/usr/bin/env python3
"""The tp example as a user runs it (examples/tp/main.c): 2 models of 2 shards with sequence
parallel print a line a step and the overlap figures, and --trace holds every rank's ring
gathers (one ring step per gather with 2 shards: 2 a layer and 1 for the head in each pass),
reduce-scatters (2 a layer a pass), the norms' allreduce and the data group's gradient
allreduces (every block once a step), drawn by trace_png.
usage: test_tp_run.py TP TRACE_PNG"""
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

tp, drawer = sys.argv[1], sys.argv[2]
STEPS, LAYERS = 3, 2
with tempfile.TemporaryDirectory() as d:
    trace, png = os.path.join(d, "t.json"), os.path.join(d, "t.png")
    out = subprocess.run([tp, "--ranks", "4", "--tp", "2", "--sp", "--steps", str(STEPS),
                          "--layers", str(LAYERS), "--trace", trace, "--measure-overlap"],
                         check=True, capture_output=True, text=True).stdout
    steps = re.findall(r"^step (\d+) loss ([0-9.]+) tokens/s \d+ comm_wait [0-9.]+%$", out, re.M)
    assert [int(s) for s, _ in steps] == list(range(1, STEPS + 1)), out
    assert "tensor parallel 2 (sequence parallel) x data parallel 2" in out, out
    assert re.search(r"^# overlap: step [0-9.]+ ms, compute only [0-9.]+ ms, communication only "
                     r"[0-9.]+ ms: efficiency", out, re.M), out
    events = json.load(open(trace))["traceEvents"]
    for rank in range(4):
        mine = [e for e in events if e["tid"] // 2 == rank]
        count = lambda prefix: sum(e["name"].startswith(prefix) for e in mine)
        assert count("forward") == count("backward") == STEPS, rank
        assert count("gather") == STEPS * 2 * (2 * LAYERS + 1), (rank, count("gather"))
        assert count("reduce-scatter") == STEPS * 2 * 2 * LAYERS, rank
        # per layer the norms' sum on the tensor group, and every block on the data group
        assert count("allreduce") == STEPS * (LAYERS + LAYERS + 2), (rank, count("allreduce"))
        assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in mine)
    subprocess.run([drawer, trace, png], check=True, stdout=subprocess.DEVNULL)
    head = open(png, "rb").read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", head
    w, h = struct.unpack(">II", head[16:24])
    assert w == 1400 and h > 100, (w, h)
print("test_tp_run: 4 ranks, %d steps, %d spans, drawn" % (STEPS, len(events)))
