#!/usr/bin/env python3
"""collbench --plot: runs a short sweep on 2 CPU ranks and checks the PNG it writes: the
signature, every chunk's CRC, the image data inflating to the declared size, and weft's
blue line actually drawn in each collective's panel.
usage: test_plot.py COLLBENCH"""
import os
import struct
import subprocess
import sys
import tempfile
import zlib

collbench = sys.argv[1]
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "sweep.png")
    subprocess.run([collbench, "--cpu", "--ranks", "2", "-C", "allreduce,allgather", "-e", "256K",
                    "-n", "2", "-w", "1", "--plot", path], check=True, stdout=subprocess.DEVNULL)
    data = open(path, "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG signature"
pos, chunks = 8, {}
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    (crc,) = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
    assert zlib.crc32(kind + body) == crc, f"bad CRC in {kind}"
    chunks.setdefault(kind, b"")
    chunks[kind] += body
    pos += 12 + n
w, h, depth, color = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
assert (depth, color) == (8, 2), "expected 8-bit RGB"
raw = zlib.decompress(chunks[b"IDAT"])
assert len(raw) == h * (3 * w + 1), "image data has the wrong size"
assert b"IEND" in chunks
panels = 2
assert h % panels == 0
for p in range(panels):
    blue = 0
    for y in range(p * h // panels, (p + 1) * h // panels):
        row = raw[y * (3 * w + 1) + 1:(y + 1) * (3 * w + 1)]
        blue += sum(1 for x in range(w) if row[3 * x:3 * x + 3] == bytes((20, 90, 200)))
    assert blue > 100, f"panel {p}: weft's line is missing ({blue} blue pixels)"
print(f"plot ok: {w}x{h}, {panels} panels")
