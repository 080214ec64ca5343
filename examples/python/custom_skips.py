#!/usr/bin/env python3
"""Your own nn.Module with skip connections, trained from data held in Python.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/custom_skips.py [--epochs 3] [--samples 4096]

The network is a small U-shaped classifier whose early feature maps are added back in later
layers: stalepipe cuts it into three partitions and carries those skip tensors across the
pipeline registers. The data are a TensorDataset made here (stand-in for yours), read through a
DataLoader with two worker processes; a second TensorDataset is the test set. The hooks print a
line every 20 steps and every evaluation.
"""
import argparse

import torch
from torch import nn

import stalepipe


class SkipNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.down1 = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.down2 = nn.Sequential(nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU())
        self.middle = nn.Sequential(nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU())
        self.up = nn.Sequential(nn.Upsample(scale_factor=2.0), nn.Conv2d(32, 16, 3, padding=1), nn.ReLU())
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.1), nn.Linear(16, classes))

    def forward(self, x):
        a = self.down1(x)
        b = self.down2(a)
        c = self.middle(b) + b  # a skip within the low resolution
        return self.head(self.up(c) + a)  # a skip across the whole network


def made_up_data(n, seed):
    """Samples whose class is the colour they lean to: a task a network can learn quickly."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 10, (n,), generator=g)
    x = torch.randn(n, 3, 32, 32, generator=g)
    x[:, 0] += (y.float() / 5 - 1).view(n, 1, 1)
    x[:, 1] += (y % 3).float().view(n, 1, 1) / 2
    return torch.utils.data.TensorDataset(x, y)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=4096)
    args = parser.parse_args()

    net = SkipNet()
    train = torch.utils.data.DataLoader(made_up_data(args.samples, 0), batch_size=64, shuffle=True, num_workers=2)
    test = made_up_data(1024, 1)
    trainer = stalepipe.Trainer(net, partitions=3, balance="flops", batch_size=64, epochs=args.epochs, lr=0.05,
                                progress="none")
    history = trainer.fit(train, test=test,
                          on_step=lambda s: s["step"] % 20 or print(f"step {s['step']}: loss {s['loss']:.3f}"),
                          on_eval=lambda e: print(f"step {e['step']}: test accuracy {e['test_accuracy']:.3f}"))
    net.load_state_dict(trainer.state_dict())
    net.eval()
    with torch.no_grad():
        x, y = test[:256]
        print(f"the trained nn.Module itself: accuracy {(net(x).argmax(1) == y).float().mean():.3f} on 256 test samples")
    return history


if __name__ == "__main__":
    main()
