#!/usr/bin/env python3
"""The moe example as a user runs it (examples/moe/main.c): 2 ranks of 4 experts, top 2,
print a line a step and the overlap figures, and --trace holds every rank's exchanges: per
layer and step, each of the 2 micro-batches' layout, its dispatch and combine in the forward,
its dispatch and two combines in the backward, and the data-parallel allreduce of every
block, drawn by trace_png; a wrong shape is refused with a reason.
usage: test_ep_run.py MOE TRACE_PNG"""
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

moe, drawer = sys.argv[1], sys.argv[2]
STEPS, LAYERS, MICRO = 3, 2, 2
with tempfile.TemporaryDirectory() as d:
    trace, png = os.path.join(d, "t.json"), os.path.join(d, "t.png")
    out = subprocess.run([moe, "--ranks", "2", "--steps", str(STEPS), "--layers", str(LAYERS),
                          "--trace", trace, "--measure-overlap"],
                         check=True, capture_output=True, text=True).stdout
    steps = re.findall(r"^step (\d+) loss ([0-9.]+) tokens/s \d+ comm_wait [0-9.]+%$", out, re.M)
    assert [int(s) for s, _ in steps] == list(range(1, STEPS + 1)), out
    assert "4 experts (2 a rank), top 2, dropless" in out, out
    assert re.search(r"^# overlap: step [0-9.]+ ms, compute only [0-9.]+ ms, communication only "
                     r"[0-9.]+ ms: efficiency", out, re.M), out
    events = json.load(open(trace))["traceEvents"]
    for rank in range(2):
        mine = [e for e in events if e["tid"] // 2 == rank and e["cat"] == "comm"]
        count = lambda prefix: sum(e["name"].startswith(prefix) for e in mine)
        per = STEPS * LAYERS * MICRO
        assert count("layout") == per, (rank, count("layout"))
        assert count("dispatch") == 2 * per, (rank, count("dispatch"))
        assert count("combine") == 3 * per, (rank, count("combine"))
        assert count("allreduce") == STEPS * (LAYERS + 2), (rank, count("allreduce"))
        assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in mine)
    subprocess.run([drawer, trace, png], check=True, stdout=subprocess.DEVNULL)
    head = open(png, "rb").read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", head
    w, h = struct.unpack(">II", head[16:24])
    assert w == 1400 and h > 100, (w, h)
bad = subprocess.run([moe, "--ranks", "3", "--steps", "1"], capture_output=True, text=True)
assert bad.returncode != 0 and "multiple of the ranks" in bad.stderr, bad.stderr
print("test_ep_run: 2 ranks, %d steps, %d spans, drawn; 3 ranks of 4 experts refused"
      % (STEPS, len(events)))
