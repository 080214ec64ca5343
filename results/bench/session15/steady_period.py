#!/usr/bin/env python3
"""Steady period of a 2-worker pipeline from a Chrome trace of `stalepipe train --trace`.

Usage: steady_period.py TRACE N   (N: the run's mini-batches)
Prints the mean time between the ends of worker 1's backward ops over mini-batches 6..N-3
(the steady state), its images/s at batch 128, and each worker's traced compute per
mini-batch (ms; waits for a neighbour or the data are not traced)."""
import json
import sys

events = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
first, last = 6, int(sys.argv[2]) - 3
ends = {e["args"]["step"]: e["ts"] + e["dur"] for e in events if e["tid"] == 1 and e["cat"] == "backward"}
period_ms = (ends[last] - ends[first]) / (last - first) / 1e3
busy = {}
for e in events:
    if first < e["args"]["step"] <= last and e["cat"] != "update":
        busy[e["tid"]] = busy.get(e["tid"], 0) + e["dur"] / 1e3 / (last - first)
print("period %.0f ms  %.1f img/s  compute per mini-batch (ms): %s"
      % (period_ms, 128e3 / period_ms, ", ".join("worker %d %.0f" % kv for kv in sorted(busy.items()))))
