#!/usr/bin/python3
"""Writes cnn.pt: a small CNN as a scripted torch.nn.Sequential, for `stalepipe train --model-file`.

    /usr/bin/python3 make_model.py [cnn.pt] [--dropout P]   # prints the units stalepipe will see

Each top-level child is one stalepipe unit; a pipeline register may follow any unit with a
Conv or Linear layer (`stalepipe layers --model-file cnn.pt` shows where). Inputs are
[N, 1, 32, 32]: stalepipe pads 28x28 images (Fashion-MNIST, MNIST) to 32x32. Use
torch.nn.Flatten as a layer; a flatten written in a forward is not a unit. Needs PyTorch 1.13
(Debian: apt-get install python3-torch), the release stalepipe's LibTorch is.
"""
import argparse
from collections import OrderedDict

import torch
from torch import nn


def make_cnn(num_classes=10, dropout=0.0):
    # A dropout inside a Sequential unit (or as a unit) is replaced by stalepipe's exact
    # dropout, same p; one inside a module of your own is refused (it cannot be made exact).
    fc2 = [nn.Linear(120, 84), nn.ReLU()] + ([nn.Dropout(dropout)] if dropout > 0 else [])
    return nn.Sequential(OrderedDict([
        ("conv1", nn.Sequential(nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2))),    # 6x14x14
        ("conv2", nn.Sequential(nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2))),   # 16x5x5
        ("fc1", nn.Sequential(nn.Flatten(), nn.Linear(400, 120), nn.ReLU())),
        ("fc2", nn.Sequential(*fc2)),
        ("fc3", nn.Linear(84, num_classes)),
    ]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", default="cnn.pt")
    parser.add_argument("--dropout", type=float, default=0.0, help="p of a Dropout in fc2 (0: none)")
    args = parser.parse_args()
    torch.manual_seed(1)
    scripted = torch.jit.script(make_cnn(dropout=args.dropout))
    scripted.save(args.path)
    print(f"wrote {args.path} (PyTorch {torch.__version__}): units",
          ", ".join(name for name, _ in scripted.named_children()))


if __name__ == "__main__":
    main()
