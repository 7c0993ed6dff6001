#!/usr/bin/env python3
"""zero started as separate processes from the environment (WEFT_ROOT, WEFT_RANK,
WEFT_NRANKS; torchrun's MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE) prints the same losses as
zero --ranks 2 forking its own ranks; and the command line's --save and --load resume a run
where it stopped (steps 4-5 of 3 + 2 are those of 5). usage: test_launch.py ZERO"""
import os
import socket
import subprocess
import sys
import tempfile

zero = sys.argv[1]
args = ["--stage", "1", "--steps", "5"]


def losses(text):
    return [l.split()[3] for l in text.splitlines() if l.startswith("step ")]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


want = losses(subprocess.run([zero, "--ranks", "2"] + args, check=True, capture_output=True,
                             text=True).stdout)
assert len(want) == 5, want
for style in ("weft", "torchrun"):
    port = free_port()
    procs = []
    for rank in (0, 1):
        if style == "weft":
            env = {"WEFT_ROOT": "127.0.0.1:%d" % port, "WEFT_RANK": str(rank), "WEFT_NRANKS": "2"}
        else:
            env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
                   "WORLD_SIZE": "2"}
        procs.append(subprocess.Popen([zero] + args, env=env, stdout=subprocess.PIPE, text=True))
    try:
        outs = [p.communicate(timeout=120)[0] for p in procs]
    finally:  # a rank left waiting for a peer that failed is not left behind
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert all(p.returncode == 0 for p in procs), [p.returncode for p in procs]
    got = losses(outs[0])
    assert got == want, (style, got, want)
    assert losses(outs[1]) == [], "only rank 0 prints steps"
print("test_launch: WEFT_* and torchrun environments match --ranks 2:", " ".join(want))

with tempfile.TemporaryDirectory() as d:
    prefix = os.path.join(d, "ckpt")
    first = subprocess.run([zero, "--ranks", "2", "--stage", "1", "--steps", "3", "--save", prefix],
                           check=True, capture_output=True, text=True).stdout
    rest = subprocess.run([zero, "--ranks", "2", "--stage", "1", "--steps", "2", "--load", prefix],
                          check=True, capture_output=True, text=True).stdout
    assert losses(first) + losses(rest) == want, (losses(first), losses(rest), want)
    assert rest.startswith("step 4 "), rest.splitlines()[:1]
print("test_launch: --save after 3 steps and --load for 2 more give the 5 steps' losses")
