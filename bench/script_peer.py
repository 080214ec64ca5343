#!/usr/bin/python3
"""PyTorch's own training loop over a scripted network: the peer of `stalepipe train
--model-file FILE --pipeline none` in bench/script_vs_pytorch.sh. torch.jit.load(FILE) in
training mode, SGD as stalepipe's defaults (lr 0.05, momentum 0.9, weight decay 5e-4), cross
entropy, one batch of random 3xSxS images in memory, every step timed from the first as
stalepipe's rate is. Prints images/s.
  script_peer.py FILE BATCH STEPS THREADS SIZE CLASSES"""
import sys
import time

import torch
import torch.nn.functional as F

if len(sys.argv) != 7:
    sys.exit(__doc__)
path = sys.argv[1]
batch, steps, threads, size, classes = (int(a) for a in sys.argv[2:])
torch.set_num_threads(threads)
torch.manual_seed(1)
net = torch.jit.load(path)
net.train()
opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
x = torch.randn(batch, 3, size, size)
y = torch.randint(0, classes, (batch,))
seconds = 0.0
for _ in range(steps):
    start = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    F.cross_entropy(net(x), y).backward()
    opt.step()
    seconds += time.perf_counter() - start
print(f"{batch * steps / seconds:.2f}")
