# PyTorch's plain channels_last training at one thread: images/s over 10 steps after 3, the
# counterpart of `op_profile MODEL FILE untimed` (one_core_ab.sh alternates the two).
import os, sys, time, torch
import torch.nn as nn
import torch.nn.functional as F
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../../../bench"))
import peers
torch.set_num_threads(1); torch.manual_seed(1)
model = nn.Sequential(*[u for u, _ in peers.make_units(sys.argv[1], 1)]).to(memory_format=torch.channels_last)
data = [(x.contiguous(memory_format=torch.channels_last), y) for x, y in peers.batches(128, 1)]
opt = peers.sgd(model.parameters())
def step(x, y):
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y); loss.backward(); opt.step()
for i in range(3): step(*data[i % 4])
start = time.perf_counter()
for i in range(10): step(*data[i % 4])
print(f"{10 * 128 / (time.perf_counter() - start):.1f} images/s over 10 steps")
