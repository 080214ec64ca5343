#!/usr/bin/python3
"""Writes networks whose forward is not a chain, for `stalepipe train --model-file`:

    /usr/bin/python3 make_dag_models.py [DIR]   # DIR/resnet18.pt, DIR/unet.pt

resnet18.pt is torchvision's ResNet-18 for 1-channel 32x32 inputs and 10 classes; unet.pt a
two-level U-Net with 4 classes per pixel (for --data synthetic-masks). stalepipe cuts each
forward before every Conv/Linear layer; a tensor that jumps a piece (a residual's shortcut,
the U-Net's encoder features) becomes a skip tensor, so a register may sit inside a block
(`stalepipe layers --model-file DIR/resnet18.pt` shows the pieces). Needs PyTorch 1.13 and
torchvision 0.14 (Debian: apt-get install python3-torch python3-torchvision).
"""
import os
import sys

import torch
import torchvision
from torch import nn


class UNet(nn.Module):
    def __init__(self, channels=1, classes=4):
        super().__init__()
        self.enc1 = nn.Sequential(nn.Conv2d(channels, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.enc2 = nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU())
        self.pool = nn.MaxPool2d(2)
        self.bottom = nn.Sequential(nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU())
        self.up2 = nn.ConvTranspose2d(64, 32, 2, stride=2)
        self.dec2 = nn.Sequential(nn.Conv2d(64, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU())
        self.up1 = nn.ConvTranspose2d(32, 16, 2, stride=2)
        self.dec1 = nn.Sequential(nn.Conv2d(32, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.head = nn.Conv2d(16, classes, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(self.pool(e1))
        b = self.bottom(self.pool(e2))
        d2 = self.dec2(torch.cat([self.up2(b), e2], 1))
        d1 = self.dec1(torch.cat([self.up1(d2), e1], 1))
        return self.head(d1)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(1)
    resnet = torchvision.models.resnet18(num_classes=10)
    resnet.conv1 = nn.Conv2d(1, 64, 7, 2, 3, bias=False)  # gray images
    torch.jit.script(resnet).save(os.path.join(out, "resnet18.pt"))
    torch.jit.script(UNet()).save(os.path.join(out, "unet.pt"))
    print(f"wrote {out}/resnet18.pt and {out}/unet.pt (PyTorch {torch.__version__}, torchvision {torchvision.__version__})")


if __name__ == "__main__":
    main()
