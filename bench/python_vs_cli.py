#!/usr/bin/env python3
"""What the Python front end costs: ResNet-20 written in Python (bench/peers.py's), trained by
stalepipe.Trainer and by `stalepipe train --model-file` on the same scripted file, options and
threads, and by Trainer on an in-memory TensorDataset read through a DataLoader (2 workers). The
runs alternate round by round, so that a machine whose speed drifts slows both sides of a ratio
alike, and each run is a process of its own, as a user's script or the CLI is; the rate is
summary.json's images_per_second (training only, evaluation excluded). Prints each round and the medians of Trainer / CLI and
DataLoader / built-in loader (Trainer with a data spec).

    PYTHONPATH=build/python /usr/bin/python3 bench/python_vs_cli.py [--rounds 5] [--steps 200]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers  # noqa: E402
import stalepipe  # noqa: E402


def resnet20():
    """bench/peers.py's ResNet-20, the zoo's resnet20 written in PyTorch (1 input channel)."""
    return nn.Sequential(*[m for m, _ in peers.make_units("resnet20", 1)])


def rate(out):
    with open(os.path.join(out, "summary.json")) as f:
        return json.load(f)["images_per_second"]


def options(args):
    return dict(data=f"synthetic:{args.steps * args.batch}", batch_size=args.batch, epochs=1, lr=0.05, seed=1,
                progress="none")


def run_one(args):
    """One run in this process: --one trainer|dataloader OUT, the network from --model-file."""
    kind, out = args.one
    script = torch.jit.load(args.model_file)
    if kind == "trainer":
        stalepipe.Trainer(script, out=out, **options(args)).fit()
        return
    # The DataLoader's samples: float [N, 1, 32, 32], as the built-in loader makes them of synthetic data.
    samples = args.steps * args.batch
    g = torch.Generator().manual_seed(0)
    tensors = torch.utils.data.TensorDataset(torch.randn(samples, 1, 32, 32, generator=g),
                                             torch.randint(0, 10, (samples,), generator=g))
    loader = torch.utils.data.DataLoader(tensors, batch_size=args.batch, shuffle=True, num_workers=2)
    spec_free = {k: v for k, v in options(args).items() if k != "data"}
    stalepipe.Trainer(script, out=out, **spec_free).fit(loader)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--cli", default="build/apps/stalepipe/stalepipe")
    parser.add_argument("--one", nargs=2, metavar=("KIND", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--model-file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        return run_one(args)
    work = tempfile.mkdtemp(prefix="python-vs-cli-")
    torch.manual_seed(0)
    model_file = os.path.join(work, "resnet20.pt")
    torch.jit.script(resnet20()).save(model_file)
    common = ["--steps", str(args.steps), "--batch", str(args.batch), "--model-file", model_file]

    def cli(out):
        flags = [a for k, v in options(args).items() for a in (f"--{k.replace('_', '-')}", str(v))]
        subprocess.run([args.cli, "train", "--model-file", model_file, *flags, "--out", out], check=True,
                       stdout=subprocess.DEVNULL)
        return rate(out)

    def python(kind):
        def run(out):
            subprocess.run([sys.executable, __file__, "--one", kind, out, *common], check=True)
            return rate(out)
        return run

    ratios = {"Trainer / CLI": [], "DataLoader / built-in loader": []}
    print("round | CLI img/s | Trainer img/s | Trainer + DataLoader img/s | Trainer / CLI | DataLoader / built-in")
    for r in range(1, args.rounds + 1):
        rates = {name: run(os.path.join(work, f"{name}-{r}")) for name, run in
                 (("cli", cli), ("trainer", python("trainer")), ("dataloader", python("dataloader")))}
        a, b = rates["trainer"] / rates["cli"], rates["dataloader"] / rates["trainer"]
        ratios["Trainer / CLI"].append(a)
        ratios["DataLoader / built-in loader"].append(b)
        print(f"{r} | {rates['cli']:.1f} | {rates['trainer']:.1f} | {rates['dataloader']:.1f} | {a:.3f} | {b:.3f}",
              flush=True)
    for name, values in ratios.items():
        print(f"median {name}: {statistics.median(values):.3f} ({len(values)} rounds, "
              f"{min(values):.3f}..{max(values):.3f})")


if __name__ == "__main__":
    sys.exit(main())
