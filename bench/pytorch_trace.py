#!/usr/bin/python3
# PyTorch's profiler over 10 steps of plain channels_last training of bench/peers.py's model,
# one thread, written as a chrome trace for bench/self_times.py (the counterpart of
# bench/op_profile for stalepipe's step):
#   taskset -c 0 /usr/bin/python3 bench/pytorch_trace.py resnet56 /tmp/pytorch.json
# A third argument, inplace-add, adds each block's shortcut in place (`y += shortcut(x)`), so that
# forward frees no activation buffer between convolutions.
import os, sys, torch
import torch.nn.functional as F
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "."))
import peers
if len(sys.argv) > 3 and sys.argv[3] == "inplace-add":
    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)), inplace=True)
        y = self.bn2(self.conv2(y))
        y += self.shortcut(x)
        return F.relu(y, inplace=True)
    peers.BasicBlock.forward = forward
torch.set_num_threads(1)
step, data = peers.plain_step(sys.argv[1], 1, peers.batches(128, 1), channels_last=True)
for i in range(3): step(*data[i % 4])
from torch.profiler import profile, ProfilerActivity
with profile(activities=[ProfilerActivity.CPU]) as p:
    for i in range(10): step(*data[i % 4])
p.export_chrome_trace(sys.argv[2])
