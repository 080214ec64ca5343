#!/usr/bin/python3
"""PyTorch peers of `stalepipe bench`: the same networks trained with Debian's python3-torch.

Run (after scripts/setup.sh, which installs python3-torch):
    /usr/bin/python3 bench/peers.py --model resnet56 --pipeline 19 --json results/bench/peers-resnet56.json
    /usr/bin/python3 bench/peers.py --stalepipe-json results/bench/resnet56-k2.json --json out.json
Prints one line per configuration with images/s after warm-up (with --rounds N, one per round
and then the medians, as `stalepipe bench --rounds N`):
    plain training with 1 thread and with all cores (torch.set_num_threads), in NCHW and in
    channels_last layout ("PyTorch best": the faster of the two at each thread count),
    torch.distributed.pipeline.sync.Pipe (the GPipe schedule: micro-batches, then a flush) over
    the same partitions as ours, for each --chunks value (micro-batches per mini-batch).
With --stalepipe-json (a `stalepipe bench --json` file) it takes the model, batch size,
channels and PPV from that file and prints stalepipe's rates next to PyTorch's, with the
speed targets (stalepipe non-pipelined >= PyTorch at the same threads; stale pipeline >= 1.5x
PyTorch's Pipe).

The models mirror src/models/{lenet5,resnet_cifar,blocks}.cpp unit by unit (a model is a flat
list of units; a PPV names weight layers, a register goes after the unit whose last weight
layer it names). Before timing, the script checks each model's parameter count against the
figure `stalepipe layers` prints for the same network (kParams below) and that Pipe's
output equals the plain model's on the same input.

Pipe on CPU: all partitions sit on the one CPU device, and Pipe runs one worker thread per
device, so the partitions of a CPU Pipe do not run concurrently; this is PyTorch's pipeline
as it is, measured with the same total threads as stalepipe's pipeline.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    sys.exit("peers.py: error: PyTorch is not installed; run scripts/setup.sh (python3-torch)")


def usage_error(message):
    """A bad option: one line, exit status 2 (as the stalepipe CLI)."""
    print(f"peers.py: error: {message}", file=sys.stderr)
    sys.exit(2)


# --- models, matching src/models ------------------------------------------------------------

class ConvBlock(nn.Module):
    """conv (bias unless batch norm) -> [bn] -> relu -> [max pool]"""

    def __init__(self, cin, cout, k, padding=0, bn=False, pool=0):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, padding=padding, bias=not bn)
        self.bn = nn.BatchNorm2d(cout) if bn else None
        self.pool = nn.MaxPool2d(pool) if pool else None

    def forward(self, x):
        x = self.conv(x)
        if self.bn is not None:
            x = self.bn(x)
        x = F.relu(x, inplace=True)
        return self.pool(x) if self.pool is not None else x


class LinearBlock(nn.Module):
    def __init__(self, fin, fout, relu=True, flatten=False, gap=False):
        super().__init__()
        self.linear = nn.Linear(fin, fout)
        self.relu, self.flatten, self.gap = relu, flatten, gap

    def forward(self, x):
        if self.gap:
            x = x.mean((2, 3))
        elif self.flatten:
            x = x.flatten(1)
        x = self.linear(x)
        return F.relu(x, inplace=True) if self.relu else x


class BasicBlock(nn.Module):
    """3x3 conv-bn-relu, 3x3 conv-bn, + option-A shortcut (subsample, zero-pad channels), relu"""

    def __init__(self, cin, planes, stride):
        super().__init__()
        self.cin, self.planes, self.stride = cin, planes, stride
        self.conv1 = nn.Conv2d(cin, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)

    def shortcut(self, x):
        if self.stride == 1 and self.planes == self.cin:
            return x
        sub = x[:, :, ::self.stride, ::self.stride]
        front = (self.planes - self.cin) // 2
        return F.pad(sub, (0, 0, 0, 0, front, self.planes - self.cin - front))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)), inplace=True)
        y = self.bn2(self.conv2(y))
        return F.relu(y + self.shortcut(x), inplace=True)


def make_units(name, channels):
    """[(module, weight layers in it)] in forward order, as stalepipe's unit list."""
    if name == "lenet5":
        return [(ConvBlock(channels, 6, 5, pool=2), 1), (ConvBlock(6, 16, 5, pool=2), 1),
                (LinearBlock(16 * 5 * 5, 120, flatten=True), 1), (LinearBlock(120, 84), 1),
                (LinearBlock(84, 10, relu=False), 1)]
    if name.startswith("resnet"):
        depth = int(name[len("resnet"):])
        if depth < 8 or (depth - 2) % 6:
            usage_error(f"--model {name}: ResNet depth must be 6n+2")
        n = (depth - 2) // 6
        units = [(ConvBlock(channels, 16, 3, padding=1, bn=True), 1)]
        cin = 16
        for stage, planes in enumerate((16, 32, 64)):
            for i in range(n):
                units.append((BasicBlock(cin, planes, 2 if stage > 0 and i == 0 else 1), 2))
                cin = planes
        units.append((LinearBlock(64, 10, relu=False, gap=True), 1))
        for m in units:
            for c in m[0].modules():
                if isinstance(c, nn.Conv2d):  # init_convs_kaiming in src/models
                    nn.init.kaiming_normal_(c.weight, mode="fan_out", nonlinearity="relu")
        return units
    usage_error(f"--model {name}: expected lenet5 or resnet<6n+2>")


# Trainable parameters as `stalepipe layers --model NAME` counts them (1 input channel).
kParams = {"lenet5": 61706, "resnet20": 269434, "resnet56": 852730, "resnet110": 1727674}


def partitions(units, ppv):
    """Cuts the unit list after the units whose last weight layer is in ppv."""
    cuts, layer = [], 0
    for i, (_, w) in enumerate(units):
        layer += w
        if layer in ppv:
            cuts.append(i + 1)
    if len(cuts) != len(ppv):
        usage_error(f"--pipeline {','.join(map(str, ppv))}: not every entry "
                         "ends a unit of this model (see `stalepipe layers`)")
    bounds = [0] + cuts + [len(units)]
    return [nn.Sequential(*[units[i][0] for i in range(a, b)]) for a, b in zip(bounds, bounds[1:])]


# --- timing ---------------------------------------------------------------------------------

def batches(batch, channels, count=4):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(batch, channels, 32, 32, generator=g),
             torch.randint(0, 10, (batch,), generator=g)) for _ in range(count)]


def train_rate(step, data, warmup, steps):
    """images/s of `steps` calls of step(x, y) after `warmup` calls."""
    for i in range(warmup):
        step(*data[i % len(data)])
    start = time.perf_counter()
    for i in range(steps):
        step(*data[i % len(data)])
    return steps * data[0][0].shape[0] / (time.perf_counter() - start)


def sgd(params):
    return torch.optim.SGD(params, lr=0.01, momentum=0.9, weight_decay=5e-4)


def plain_step(model_name, channels, data, channels_last=False):
    """step(x, y) of plain training, and the batches in the layout it takes (profiles use it too)."""
    torch.manual_seed(1)
    model = nn.Sequential(*[m for m, _ in make_units(model_name, channels)])
    if channels_last:  # weights and inputs in NHWC; the layers then keep it throughout
        model = model.to(memory_format=torch.channels_last)
        data = [(x.contiguous(memory_format=torch.channels_last), y) for x, y in data]
    opt = sgd(model.parameters())

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if not torch.isfinite(loss):
            raise SystemExit("peers.py: error: plain training diverged (loss not finite)")
    return step, data


def plain(args, data, threads, channels_last=False):
    torch.set_num_threads(threads)
    step, data = plain_step(args.model, args.channels, data, channels_last)
    return train_rate(step, data, args.warmup_steps, args.steps)


def pipe(args, data, threads, chunks):
    from torch.distributed.pipeline.sync import Pipe
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    units = make_units(args.model, args.channels)
    model = Pipe(nn.Sequential(*partitions(units, args.ppv)), chunks=chunks)
    opt = sgd(model.parameters())

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).local_value(), y)
        loss.backward()
        opt.step()
    return train_rate(step, data, args.warmup_steps, args.steps)


def check_models(args):
    torch.manual_seed(1)
    units = make_units(args.model, args.channels)
    count = sum(p.numel() for m, _ in units for p in m.parameters())
    if args.channels == 1 and args.model in kParams and count != kParams[args.model]:
        raise SystemExit(f"peers.py: error: {args.model} has {count} parameters here but "
                         f"{kParams[args.model]} in stalepipe; the models differ")
    from torch.distributed.pipeline.sync import Pipe
    plain_model = nn.Sequential(*[m for m, _ in units]).eval()
    piped = Pipe(nn.Sequential(*partitions(units, args.ppv)), chunks=2).eval()
    x = torch.randn(8, args.channels, 32, 32)
    with torch.no_grad():
        if not torch.equal(plain_model(x), piped(x).local_value()):
            raise SystemExit("peers.py: error: Pipe's output differs from the plain model's")
    return count


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="lenet5")
    ap.add_argument("--pipeline", default="2", help="PPV, e.g. 19 (the same partitions as stalepipe)")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--channels", type=int, default=1)
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="cores in all")
    ap.add_argument("--chunks", default="1,4", help="Pipe micro-batches per mini-batch, a list")
    ap.add_argument("--warmup-steps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=1, help="alternated runs of every configuration; "
                    "medians are reported")
    ap.add_argument("--stalepipe-json", help="a `stalepipe bench --json` file: take model, batch, "
                    "channels and PPV from it and compare")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    ours = None
    if args.stalepipe_json:
        try:
            with open(args.stalepipe_json) as f:
                ours = json.load(f)
            args.model, args.batch_size = ours["model"], ours["batch_size"]
            args.channels, args.pipeline = ours["channels"], ours["ppv"]
            args.threads = ours["threads"]  # the same cores as stalepipe used
        except (OSError, ValueError, KeyError) as e:
            usage_error(f"--stalepipe-json {args.stalepipe_json}: {e}")
    try:
        args.ppv = [int(v) for v in args.pipeline.split(",")]
        chunks = [int(v) for v in args.chunks.split(",")]
    except ValueError:
        usage_error(f"--pipeline {args.pipeline} / --chunks {args.chunks}: "
                 "expected comma-separated integers")
    for name, value, low in (("--batch-size", args.batch_size, 1), ("--channels", args.channels, 1),
                             ("--threads", args.threads, 1), ("--steps", args.steps, 1),
                             ("--rounds", args.rounds, 1),
                             ("--warmup-steps", args.warmup_steps, 0)):
        if value < low:
            usage_error(f"{name} must be >= {low}, got {value}")
    if any(c < 1 or c > args.batch_size for c in chunks):
        usage_error(f"--chunks {args.chunks}: each must be 1..batch size")

    partitions(make_units(args.model, args.channels), args.ppv)  # bad names fail before RPC starts
    # Pipe needs the RPC framework, here a single local worker.
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    with tempfile.TemporaryDirectory() as tmp:
        torch.distributed.rpc.init_rpc("peers", rank=0, world_size=1,
                                       rpc_backend_options=torch.distributed.rpc.TensorPipeRpcBackendOptions(
                                           init_method=f"file://{tmp}/rpc"))
        params = check_models(args)
        data = batches(args.batch_size, args.channels)
        result = {"model": args.model, "batch_size": args.batch_size, "channels": args.channels,
                  "ppv": args.pipeline, "threads": args.threads, "parameters": params,
                  "warmup_steps": args.warmup_steps, "steps": args.steps,
                  "torch": torch.__version__, "plain": {}, "plain_channels_last": {}, "pipe": {}}
        # As `stalepipe bench --rounds`: every configuration once per round, the median reported.
        configs = [("plain", str(t), f"PyTorch plain, {t} thread(s)", lambda t=t: plain(args, data, t))
                   for t in sorted({1, args.threads})]
        configs += [("plain_channels_last", str(t), f"PyTorch plain channels_last, {t} thread(s)",
                     lambda t=t: plain(args, data, t, channels_last=True)) for t in sorted({1, args.threads})]
        configs += [("pipe", str(c), f"PyTorch Pipe --pipeline {args.pipeline}, chunks {c}, "
                     f"{args.threads} thread(s)", lambda c=c: pipe(args, data, args.threads, c)) for c in chunks]
        result["rounds"] = args.rounds
        result["round_rates"] = {"plain": {}, "plain_channels_last": {}, "pipe": {}}
        for r in range(args.rounds):
            for kind, key, label, run in configs:
                rate = run()
                result["round_rates"][kind].setdefault(key, []).append(rate)
                prefix = f"round {r + 1}: " if args.rounds > 1 else ""
                print(f"{prefix}{label}: {rate:8.1f} images/s", flush=True)
        for kind, key, label, _ in configs:
            result[kind][key] = statistics.median(result["round_rates"][kind][key])
            if args.rounds > 1:
                print(f"median of {args.rounds}: {label}: {result[kind][key]:8.1f} images/s")
        # PyTorch's best: the faster layout at each thread count.
        result["best_plain"] = {t: max(result["plain"][t], result["plain_channels_last"][t]) for t in result["plain"]}
        for t, rate in result["best_plain"].items():
            print(f"PyTorch best, {t} thread(s): {rate:8.1f} images/s")
        torch.distributed.rpc.shutdown()

    if ours:
        rates = ours["rates"]
        best_pipe = max(result["pipe"].values())
        one, all_ = result["best_plain"]["1"], result["best_plain"][str(args.threads)]
        checks = [("stalepipe non-pipelined 1 thread / PyTorch best 1 thread", rates["one_thread"] / one, 1.10),
                  (f"stalepipe non-pipelined {args.threads} threads / PyTorch best {args.threads} threads",
                   rates["all_threads"] / all_, 1.0),
                  ("stalepipe stale pipeline / PyTorch best 1 thread", rates["pipeline"] / one, 2.0),
                  ("stalepipe stale pipeline / PyTorch Pipe (best chunks)", rates["pipeline"] / best_pipe, 1.5)]
        result["compare"] = []
        for name, value, low in checks:
            status = "pass" if value >= low else "MISS"
            print(f"  {name:62s} {value:6.3f}  (target >= {low})  {status}")
            result["compare"].append({"name": name, "value": value, "low": low, "status": status.lower()})
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
