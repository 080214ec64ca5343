"""Small networks and data for the Python tests: quick to train on two cores."""
import os
import subprocess

import torch
from torch import nn


class SmallNet(nn.Module):
    """A CNN with batch-norm, dropout and a skip connection, for 1x32x32 inputs."""

    def __init__(self, classes=10, channels=1):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(channels, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.block = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8))
        self.tail = nn.Sequential(nn.ReLU(), nn.MaxPool2d(4), nn.Flatten(), nn.Dropout(0.25), nn.Linear(8 * 8 * 8, classes))

    def forward(self, x):
        y = self.stem(x)
        return self.tail(y + self.block(y))


def tensor_data(n=256, channels=1, size=32, classes=10, seed=0):
    """A TensorDataset of n samples whose class shows in their mean, so that it can be learnt."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, classes, (n,), generator=g)
    x = torch.randn(n, channels, size, size, generator=g) * 0.5 + (y.float() / classes).view(n, 1, 1, 1)
    return torch.utils.data.TensorDataset(x, y)


def cli():
    """The stalepipe program of this build (ctest sets STALEPIPE_CLI)."""
    path = os.environ.get("STALEPIPE_CLI", "")
    if not path:
        import pytest
        pytest.skip("STALEPIPE_CLI is not set (ctest sets it)")
    return path


def run_cli(*args):
    done = subprocess.run([cli(), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done


def assert_same_tensors(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
