#!/usr/bin/python3
"""The Python side of bench/torchvision_zoo.sh (needs python3-torch and python3-torchvision).

  torchvision_zoo.py script OUT FAMILY...   scripts each classifier (10 classes) to OUT/FAMILY.pt
  torchvision_zoo.py same A B                exit 0 when the last checkpoints of two run
                                            directories, or two exported networks, hold
                                            bit-identical tensors
  torchvision_zoo.py reload ORIGINAL EXPORT exit 0 when EXPORT (stalepipe train --export) loads in
                                            PyTorch and computes what ORIGINAL's network computes
                                            with EXPORT's weights, on a fixed batch, in eval mode
"""
import json
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
        print(name, sum(p.numel() for p in net.parameters()))


def last_checkpoint(run):
    with open(os.path.join(run, "checkpoint", "manifest.json")) as f:
        manifest = json.load(f)
    tensors = {}
    for shard in manifest["shards"]:
        for key, value in torch.jit.load(os.path.join(run, "checkpoint", shard)).state_dict().items():
            tensors[f"{shard.split('/')[-1]}:{key}"] = value
    return manifest["step"], tensors


def same(run_a, run_b):
    if os.path.isfile(run_a) and os.path.isfile(run_b):  # two exports: the networks' own tensors
        a, b = (torch.jit.load(f).state_dict() for f in (run_a, run_b))
        differing = [key for key in a if key not in b or not torch.equal(a[key], b[key])]
        if differing or a.keys() != b.keys():
            sys.exit(f"{(differing or sorted(a.keys() ^ b.keys()))[0]} differs between {run_a} and {run_b}")
        return
    step_a, a = last_checkpoint(run_a)
    step_b, b = last_checkpoint(run_b)
    if step_a != step_b:
        sys.exit(f"{run_a} ends at step {step_a}, {run_b} at step {step_b}")
    if a.keys() != b.keys():
        sys.exit(f"{run_a} and {run_b} hold different tensors: {sorted(a.keys() ^ b.keys())[:3]}")
    for key in a:
        if a[key].dtype != b[key].dtype or not torch.equal(a[key], b[key]):
            sys.exit(f"{key} differs between {run_a} and {run_b}")


def reload(original, exported):
    net = torch.jit.load(original)
    trained = torch.jit.load(exported)
    net.load_state_dict(trained.state_dict())
    net.eval()
    trained.eval()
    x = torch.randn(4, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        if not torch.equal(net(x), trained(x)):
            sys.exit(f"{exported} computes other outputs than {original} with its weights")


if __name__ == "__main__":
    command, args = sys.argv[1] if len(sys.argv) > 1 else "", sys.argv[2:]
    if command == "script" and args:
        script(args[0], args[1:] or list(FAMILIES))
    elif command == "same" and len(args) == 2:
        same(*args)
    elif command == "reload" and len(args) == 2:
        reload(*args)
    else:
        sys.exit(__doc__)
