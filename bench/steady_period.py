#!/usr/bin/env python3
"""Steady period of a 2-worker pipeline from a Chrome trace of `stalepipe train --trace`.

Usage: steady_period.py TRACE N [BATCH]   (N: the run's mini-batches, at least 10; BATCH: 128)
Prints the mean time between the ends of worker 1's backward ops over mini-batches 6..N-3
(the steady state), its images/s, and each worker's traced compute per mini-batch (ms; waits
for a neighbour or the data are not traced)."""
import json
import sys

if len(sys.argv) < 3:
    sys.exit(__doc__)
events = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
first, last = 6, int(sys.argv[2]) - 3
batch = int(sys.argv[3]) if len(sys.argv) > 3 else 128
if last <= first:
    sys.exit(f"steady_period.py: N must be at least 10, got {sys.argv[2]}")
ends = {e["args"]["step"]: e["ts"] + e["dur"] for e in events if e["tid"] == 1 and e["cat"] == "backward"}
if first not in ends or last not in ends:
    sys.exit(f"steady_period.py: {sys.argv[1]} has no backward of worker 1 at mini-batch {first} or {last}")
period_ms = (ends[last] - ends[first]) / (last - first) / 1e3
busy = {}
for e in events:
    if first < e["args"]["step"] <= last and e["cat"] != "update":
        busy[e["tid"]] = busy.get(e["tid"], 0) + e["dur"] / 1e3 / (last - first)
print("period %.1f ms  %.1f img/s  compute per mini-batch (ms): %s"
      % (period_ms, batch * 1e3 / period_ms, ", ".join("worker %d %.1f" % kv for kv in sorted(busy.items()))))
