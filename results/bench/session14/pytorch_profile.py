# PyTorch 1.13 profiler over 10 steps of plain channels_last training, one thread (session 14):
#   taskset -c 0 /usr/bin/python3 results/bench/session14/pytorch_profile.py resnet20
import os, sys, types, torch
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../../bench"))
import peers
import torch.nn as nn, torch.nn.functional as F
torch.set_num_threads(1); torch.manual_seed(1)
m = sys.argv[1]
model = nn.Sequential(*[u for u, _ in peers.make_units(m, 1)]).to(memory_format=torch.channels_last)
data = [(x.contiguous(memory_format=torch.channels_last), y) for x, y in peers.batches(128, 1)]
opt = peers.sgd(model.parameters())
def step(x, y):
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y); loss.backward(); opt.step()
for i in range(3): step(*data[i % 4])
from torch.profiler import profile, ProfilerActivity
with profile(activities=[ProfilerActivity.CPU]) as p:
    for i in range(10): step(*data[i % 4])
print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=30))
