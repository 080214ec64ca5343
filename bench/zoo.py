#!/usr/bin/python3
"""The zoos' shared checks (bench/zoo.sh); needs torch.

  zoo.py same A B                 exit 0 when the last checkpoints of two run directories, or two
                                  exported networks, hold bit-identical tensors
  zoo.py reload ORIGINAL EXPORT   exit 0 when EXPORT (stalepipe train --export) loads in PyTorch
                                  and computes what ORIGINAL's network computes with EXPORT's
                                  weights, on a fixed batch of 3x64x64 images, in eval mode
  zoo.py middle STALEPIPE MODEL   prints the middle one of the layers a register may follow, as
                                  `stalepipe layers --model-file MODEL --image-size 64 --channels 3` lists them
"""
import json
import os
import subprocess
import sys

import torch


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


def middle(stalepipe, model):
    run = subprocess.run([stalepipe, "layers", "--model-file", model, "--image-size", "64", "--channels", "3"],
                         capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit((run.stderr.strip().splitlines() or ["layers failed"])[-1])
    lines = run.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.lstrip().startswith("unit"))
    column = lines[header].index("register after")
    cuts = []
    for line in lines[header + 1:]:
        if line.startswith("total"):
            break
        word = line[column:].split(maxsplit=1)
        if word and word[0].isdigit():
            cuts.append(int(word[0]))
    if not cuts:
        sys.exit(f"{model}: no layer may be followed by a register")
    print(cuts[len(cuts) // 2])


if __name__ == "__main__":
    command, args = sys.argv[1] if len(sys.argv) > 1 else "", sys.argv[2:]
    if command == "same" and len(args) == 2:
        same(*args)
    elif command == "reload" and len(args) == 2:
        reload(*args)
    elif command == "middle" and len(args) == 2:
        middle(*args)
    else:
        sys.exit(__doc__)
