#!/usr/bin/python3
"""PyTorch's own training loop over a scripted network: the peer of `stalepipe train
--model-file FILE --pipeline none` in bench/script_vs_pytorch.sh. torch.jit.load(FILE) in
training mode, SGD (momentum 0.9, weight decay 5e-4, constant lr), cross entropy, one batch of
random 3xSxS images in memory, in NCHW or channels-last; STEPS steps of warm-up (as
stalepipe's first epoch), then STEPS steps timed. Prints images/s.
  script_peer.py FILE BATCH STEPS THREADS SIZE CLASSES LR nchw|channels-last"""
import sys
import time

import torch
import torch.nn.functional as F

if len(sys.argv) != 9 or sys.argv[8] not in ("nchw", "channels-last"):
    sys.exit(__doc__)
path = sys.argv[1]
batch, steps, threads, size, classes = (int(a) for a in sys.argv[2:7])
lr, layout = float(sys.argv[7]), sys.argv[8]
torch.set_num_threads(threads)
torch.manual_seed(1)
net = torch.jit.load(path)
net.train()
x = torch.randn(batch, 3, size, size)
if layout == "channels-last":
    net = net.to(memory_format=torch.channels_last)
    x = x.contiguous(memory_format=torch.channels_last)
y = torch.randint(0, classes, (batch,))
opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9, weight_decay=5e-4)


def step():
    opt.zero_grad(set_to_none=True)
    F.cross_entropy(net(x), y).backward()
    opt.step()


for _ in range(steps):
    step()
start = time.perf_counter()
for _ in range(steps):
    step()
print(f"{batch * steps / (time.perf_counter() - start):.2f}")
