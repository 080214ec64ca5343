#!/usr/bin/python3
"""torchvision's side of bench/zoo.sh (needs python3-torch and python3-torchvision).

  torchvision_zoo.py script OUT FAMILY...   scripts each classifier (10 classes) to OUT/FAMILY.pt
                                            and prints "FAMILY PARAMETERS", or "FAMILY refused"
                                            for those whose forward returns a tuple
  torchvision_zoo.py families               the families, on one line
  torchvision_zoo.py check                  exit 0 (torchvision imported)
"""
import os
import sys
import warnings

import torch
import torchvision.models as models

# The smallest variant of each classifier family in torchvision 0.14.
FAMILIES = {
    "alexnet": models.alexnet, "vgg11_bn": models.vgg11_bn, "resnet18": models.resnet18,
    "resnet50": models.resnet50, "resnext50_32x4d": models.resnext50_32x4d,
    "wide_resnet50_2": models.wide_resnet50_2, "squeezenet1_0": models.squeezenet1_0,
    "squeezenet1_1": models.squeezenet1_1, "densenet121": models.densenet121,
    "shufflenet_v2_x0_5": models.shufflenet_v2_x0_5, "mobilenet_v2": models.mobilenet_v2,
    "mobilenet_v3_small": models.mobilenet_v3_small, "mnasnet0_5": models.mnasnet0_5,
    "efficientnet_b0": models.efficientnet_b0, "efficientnet_v2_s": models.efficientnet_v2_s,
    "regnet_x_400mf": models.regnet_x_400mf, "convnext_tiny": models.convnext_tiny,
    "googlenet": models.googlenet, "inception_v3": models.inception_v3,
}
# Their scripted forward returns a tuple: stalepipe must refuse them in one line.
REFUSED = ("googlenet", "inception_v3")


def script(out, families):
    os.makedirs(out, exist_ok=True)
    warnings.filterwarnings("ignore", message="The TorchScript type system")  # Inception v3's, harmless
    for name in families:
        if name not in FAMILIES:
            sys.exit(f"torchvision_zoo.py: unknown family '{name}'; expected one of {', '.join(FAMILIES)}")
        torch.manual_seed(0)
        kwargs = {"num_classes": 10}
        if name in ("googlenet", "inception_v3"):  # their auxiliary heads are for training at 224+
            kwargs.update(aux_logits=False, init_weights=False)
        net = FAMILIES[name](**kwargs)
        torch.jit.script(net).save(os.path.join(out, name + ".pt"))
        print(name, "refused" if name in REFUSED else sum(p.numel() for p in net.parameters()))


def check():
    """Nothing to check beyond the import above: Debian's python3-torchvision is there."""


if __name__ == "__main__":
    command, args = sys.argv[1] if len(sys.argv) > 1 else "", sys.argv[2:]
    if command == "script" and args:
        script(args[0], args[1:] or list(FAMILIES))
    elif command == "families" and not args:
        print(" ".join(FAMILIES))
    elif command == "check" and not args:
        check()
    else:
        sys.exit(__doc__)
