#!/usr/bin/python3
"""The input pipeline's peer: torchvision's ImageFolder and PyTorch's DataLoader with the
transforms stalepipe applies (RandomResizedCrop + flip, or Resize + CenterCrop; ToTensor;
Normalize), N worker processes. Prints "torchvision: R img/s". Needs python3-torchvision."""
import argparse
import time

import torch
from torchvision import datasets, transforms

p = argparse.ArgumentParser()
p.add_argument("root", help="an image folder: ROOT/<class>/<image>")
p.add_argument("--image-size", type=int, default=224)
p.add_argument("--resized-crop", action="store_true")
p.add_argument("--workers", type=int, default=2)
p.add_argument("--batch-size", type=int, default=64)
p.add_argument("--batches", type=int, default=20)
args = p.parse_args()

steps = ([transforms.RandomResizedCrop(args.image_size), transforms.RandomHorizontalFlip()] if args.resized_crop
         else [transforms.Resize(args.image_size), transforms.CenterCrop(args.image_size)])
steps += [transforms.ToTensor(), transforms.Normalize([0.5] * 3, [0.25] * 3)]
data = datasets.ImageFolder(args.root, transform=transforms.Compose(steps))
loader = torch.utils.data.DataLoader(data, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                                     drop_last=True)


def forever():  # epochs after epochs, as `stalepipe data speed` wraps around
    while True:
        yield from loader


batches = forever()
# Warm-up: the workers start and fill their prefetch queues (2 batches each) before the clock.
for _ in range(2 * max(1, args.workers) + 1):
    next(batches)
start = time.perf_counter()
images = 0
for _ in range(args.batches):
    x, _ = next(batches)
    images += x.shape[0]
print("torchvision: %.0f img/s (%d images of %s in %.2f s, %d workers)"
      % (images / (time.perf_counter() - start), images, "x".join(map(str, x.shape[1:])),
         time.perf_counter() - start, args.workers))
