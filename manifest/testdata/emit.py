#!/usr/bin/env python3
"""Writes {"bytes": n} bytes of output: 'x' repeated, or "é" (2 bytes) repeated with
{"utf8": true}, in chunks, then exits 0."""
import json
import sys

args = json.load(sys.stdin)
unit = "é".encode() if args.get("utf8") else b"x"
n = args["bytes"] // len(unit)
out = sys.stdout.buffer
chunk = unit * 65536
while n > 0:
    k = min(n, 65536)
    out.write(chunk[: k * len(unit)])
    n -= k
out.flush()
