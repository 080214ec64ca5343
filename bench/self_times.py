#!/usr/bin/env python3
# Self time per operator from a chrome trace (bench/op_profile's, or PyTorch's profiler
# export_chrome_trace as bench/pytorch_trace.py writes it): each event's duration minus its
# nested children's, per step, largest first.
#   python3 bench/self_times.py TRACE.json [STEPS=10] [TOP=25]
import collections, json, sys
if len(sys.argv) < 2:
    sys.exit("usage: self_times.py TRACE.json [STEPS=10] [TOP=25]")
events = json.load(open(sys.argv[1]))
events = events["traceEvents"] if isinstance(events, dict) else events
by_thread = collections.defaultdict(list)
for e in events:
    if e.get("ph") == "X" and "dur" in e:
        by_thread[e.get("tid")].append((float(e["ts"]), float(e["dur"]), e["name"]))
self_us, calls = collections.Counter(), collections.Counter()
for evs in by_thread.values():
    evs.sort(key=lambda e: (e[0], -e[1]))
    stack = []  # [end, name, child time]
    def pop():
        end, name, child, dur = stack.pop()
        self_us[name] += dur - child
        if stack: stack[-1][2] += dur
    for ts, dur, name in evs:
        while stack and stack[-1][0] <= ts: pop()
        stack.append([ts + dur, name, 0.0, dur]); calls[name] += 1
    while stack: pop()
total = sum(self_us.values())
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 10
print(f"total {total / 1e3 / steps:.1f} ms per step over {steps} steps")
for name, us in self_us.most_common(int(sys.argv[3]) if len(sys.argv) > 3 else 25):
    print(f"{us / 1e3 / steps:9.2f} ms  {100 * us / total:5.1f}%  {calls[name] // steps:5d}x  {name}")
