#!/usr/bin/env python3
"""libweft.so exports exactly the functions the public headers (include/weft.h,
include/weft_moe.h) declare with WEFT_API: no internal symbol leaks out (the library is built
with hidden visibility), and no public function is missing.
usage: test_exports.py LIBWEFT_SO HEADER..."""
import re
import subprocess
import sys

lib, headers = sys.argv[1], sys.argv[2:]
declared = set()
for header in headers:
    declared |= set(re.findall(r"^WEFT_API [^(]*?\b(weft_\w+)\(", open(header).read(), re.M))
out = subprocess.run(["nm", "-D", "--defined-only", lib], check=True, capture_output=True,
                     text=True).stdout
exported = {f[2] for f in (l.split() for l in out.splitlines()) if len(f) == 3 and f[1] == "T"}
ok = True
for name in sorted(exported - declared):
    print(f"exported but not public: {name}")
    ok = False
for name in sorted(declared - exported):
    print(f"public but not exported: {name}")
    ok = False
if len(declared) < 30:
    print(f"only {len(declared)} public functions found in {headers}: the pattern is stale")
    ok = False
print(f"{len(declared)} public functions, {len(exported)} exported functions: "
      f"{'ok' if ok else 'FAILED'}")
sys.exit(0 if ok else 1)
