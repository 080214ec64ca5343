# The option-A shortcut in LibTorch 1.13 (session 14), one thread: the layout of its input
# gradient and its cost, and the cost of adding a channels-last and an NCHW tensor.
#   taskset -c 0 /usr/bin/python3 results/bench/session14/shortcut_layout.py
import time
import torch

torch.set_num_threads(1)
cl = torch.channels_last


def ms(f, n=20):
    for _ in range(3):
        f()
    start = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - start) / n * 1e3


a = torch.randn(128, 16, 32, 32).contiguous(memory_format=cl)
b = torch.randn(128, 16, 32, 32)
print("add: CL+CL %.2f  CL+NCHW %.2f  NCHW+CL %.2f ms" % (ms(lambda: a + a), ms(lambda: a + b), ms(lambda: b + a)))

x = torch.randn(128, 16, 32, 32).contiguous(memory_format=cl).requires_grad_()
g = torch.randn(128, 32, 16, 16).contiguous(memory_format=cl)


def shortcut(x):  # as bench/peers.py and stalepipe before session 14
    return torch.nn.functional.pad(x[:, :, ::2, ::2], (0, 0, 0, 0, 8, 8))


def forward_backward():
    (grad,) = torch.autograd.grad(shortcut(x), x, g)
    return grad


grad = forward_backward()
print("shortcut output channels-last:", shortcut(x).is_contiguous(memory_format=cl),
      "; input gradient channels-last:", grad.is_contiguous(memory_format=cl))
print("shortcut forward %.2f ms, forward + backward %.2f ms" % (ms(lambda: shortcut(x)), ms(forward_backward)))
