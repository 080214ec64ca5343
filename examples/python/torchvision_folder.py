#!/usr/bin/env python3
"""A torchvision classifier trained on a folder of photos as a 2-partition stale pipeline.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/torchvision_folder.py PHOTOS [--epochs 5]

PHOTOS holds one folder per class of JPEG or PNG files, as torchvision's ImageFolder reads them.
The network is torchvision's ResNet-18, cut in two where the FLOPs balance; the images are read,
resized to 64x64 and augmented by stalepipe's own loader (data="folder:PHOTOS"). The run directory
keeps the checkpoints: after Ctrl-C, `--resume` continues it.
"""
import argparse

import torch
import torchvision

import stalepipe


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("photos")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--out", default="runs/resnet18-photos")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out")
    args = parser.parse_args()

    net = torchvision.models.resnet18(num_classes=len(torchvision.datasets.folder.find_classes(args.photos)[0]))
    if args.resume:
        trainer = stalepipe.Trainer(resume=args.out)
    else:
        trainer = stalepipe.Trainer(net, data=f"folder:{args.photos}", val_fraction=0.1, image_size=64, augment=True,
                                    partitions=2, balance="flops", batch_size=32, epochs=args.epochs, lr=0.05,
                                    out=args.out)
    for epoch in trainer.fit():
        print(f"epoch {epoch['epoch']}: test accuracy {epoch['test_accuracy']:.3f}, "
              f"{epoch['images_per_second']:.0f} images/s")
    net.load_state_dict(trainer.state_dict())
    torch.save(net.state_dict(), f"{args.out}/resnet18.pth")
    print(f"trained weights in {args.out}/resnet18.pth (torchvision.models.resnet18().load_state_dict reads them)")


if __name__ == "__main__":
    main()
