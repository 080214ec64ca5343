#!/usr/bin/env python3
"""Time to accuracy of a PyTorch eager loop on one GPU: the peer of `stalepipe train` with the
recipe of experiments/time-to-accuracy-resnet56-gpu.json (scripts/gpu-check.sh tta).

    python3 bench/gpu_tta_peer.py --seed 1 --precision fp32 --json OUT.jsonl
trains ResNet-56 on Fashion-MNIST for 4 epochs of mini-batches of 128 (the last partial one
dropped), SGD lr 0.1 (momentum 0.9, weight decay 5e-4 on every parameter; or --optimizer adamw
with --betas and --eps, its weight decay decoupled, as stalepipe's), one epoch of linear
warm-up then cosine to 0 per step as stalepipe's schedule, channels-last, evaluating the whole
test set every 156 steps and at each epoch end; it prints each evaluation and the first
training seconds at which each target (85, 90, 92 %) was reached, and appends one JSON line
(the fields of stalepipe's summary.json time_to_target and metrics.jsonl evaluations).

As stalepipe's loader: the IDX files (raw or .gz) of --data, pixels / 255 normalised by the
mean and standard deviation of all training pixels, zero-padded 28x28 -> 32x32 before
normalising (the pad reads -mean/std), no augmentation (the recipe has none), a new shuffle each
epoch. Differences: the shuffle is torch.randperm's, not stalepipe's generator, so the
mini-batches differ; the initial weights are PyTorch's draws (the same distributions); the
whole data set sits on the GPU, so the loop pays no input cost at all (stalepipe's loader
copies each batch from page-locked memory): the fastest eager loop, not a DataLoader one.
Training seconds exclude evaluation and data loading, as stalepipe's; a synchronisation ends
each timed stretch. --precision as bench/gpu_peer.py's. --device cpu runs the same loop on the
CPU with --threads intra-op threads (the AdamW comparison of docs/results.md); --train-subset /
--test-subset are for smoke tests only.
"""
import argparse
import gzip
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_peer  # noqa: E402  (model, precision, device helpers)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

IMAGES_MAGIC, LABELS_MAGIC = 2051, 2049


def read_idx(directory, base, magic):
    """An IDX file of `directory` (base or base.gz) as a uint8 tensor: [N, 1, rows, cols] images
    or [N] labels."""
    for name in (base, base + ".gz"):
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            break
    else:
        raise gpu_peer.PeerError(f"{os.path.join(directory, base)}[.gz]: file not found")
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        data = f.read()
    found = int.from_bytes(data[:4], "big")
    if found != magic:
        raise gpu_peer.PeerError(f"{path}: bad magic number: expected {magic}, found {found}")
    count = int.from_bytes(data[4:8], "big")
    if magic == LABELS_MAGIC:
        return torch.frombuffer(bytearray(data[8:8 + count]), dtype=torch.uint8).long()
    rows, cols = int.from_bytes(data[8:12], "big"), int.from_bytes(data[12:16], "big")
    pixels = torch.frombuffer(bytearray(data[16:16 + count * rows * cols]), dtype=torch.uint8)
    return pixels.view(count, 1, rows, cols)


def load(directory, train_subset, test_subset):
    train_x = read_idx(directory, "train-images-idx3-ubyte", IMAGES_MAGIC)
    train_y = read_idx(directory, "train-labels-idx1-ubyte", LABELS_MAGIC)
    test_x = read_idx(directory, "t10k-images-idx3-ubyte", IMAGES_MAGIC)
    test_y = read_idx(directory, "t10k-labels-idx1-ubyte", LABELS_MAGIC)
    if train_subset:
        train_x, train_y = train_x[:train_subset], train_y[:train_subset]
    if test_subset:
        test_x, test_y = test_x[:test_subset], test_y[:test_subset]
    return (train_x, train_y), (test_x, test_y)


def pixel_statistics(images):
    """Mean and (population) standard deviation of all pixels / 255, from the histogram of byte
    values as src/data/normalize.cpp computes them."""
    counts = torch.bincount(images.flatten(), minlength=256).double()
    values = torch.arange(256, dtype=torch.float64) / 255.0
    mean = (counts * values).sum() / counts.sum()
    std = ((counts * (values - mean) ** 2).sum() / counts.sum()).sqrt()
    return mean.item(), std.item()


def normalised(images, mean, std, device):
    """Zero-padded to 32x32, then x * 1/(255 std) - mean/std in float32, as stalepipe's loader."""
    rows, cols = images.shape[2], images.shape[3]
    top, left = (32 - rows) // 2, (32 - cols) // 2
    padded = torch.zeros(images.shape[0], 1, 32, 32, dtype=torch.uint8)
    padded[:, :, top:top + rows, left:left + cols] = images
    scale, shift = torch.tensor(1.0 / (255.0 * std)), torch.tensor(-mean / std)
    return (padded.float() * scale.float() + shift.float()).to(device)


def lr_at(step, args, steps_per_epoch, total_steps):
    """stalepipe's schedule (src/optim/lr_schedule.cpp): linear warm-up, then cosine to 0."""
    warmup = round(args.warmup_epochs * steps_per_epoch)
    if step < warmup:
        return args.lr * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
    return 0.5 * args.lr * (1.0 + math.cos(math.pi * progress))


def evaluate(model, x, y, args, device):
    model.eval()
    correct = 0
    with torch.no_grad(), gpu_peer.autocast(args.precision, device):
        for begin in range(0, x.shape[0], args.eval_batch_size):
            batch = x[begin:begin + args.eval_batch_size]
            if args.layout == "channels-last":
                batch = batch.contiguous(memory_format=torch.channels_last)
            correct += (model(batch).argmax(1) == y[begin:begin + args.eval_batch_size]).sum().item()
    model.train()
    return correct / x.shape[0]


def is_eval_point(step, steps_per_epoch, eval_every):
    return step % steps_per_epoch == 0 or (eval_every > 0 and step % eval_every == 0)


def train(args, device, data):
    """Trains and returns the evaluations: [{step, epoch, wall_seconds, test_accuracy}]."""
    (train_x, train_y), (test_x, test_y) = data
    model = gpu_peer.make_model(args.model, args.layout, device, seed=args.seed)
    if args.optimizer == "adamw":  # stalepipe's --optimizer adamw: decoupled weight decay on every parameter
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=tuple(args.beta_pair), eps=args.eps,
                                weight_decay=args.weight_decay)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay)
    step_fn = gpu_peer.train_step(model, opt, args.precision, device, compiled=False)
    n = train_x.shape[0]
    steps_per_epoch = n // args.batch_size
    total = steps_per_epoch * args.epochs
    shuffle = torch.Generator().manual_seed(args.seed)
    evaluations, seconds, step = [], 0.0, 0
    for epoch in range(args.epochs):
        order = torch.randperm(n, generator=shuffle).to(device)
        start = time.perf_counter()
        for b in range(steps_per_epoch):
            ids = order[b * args.batch_size:(b + 1) * args.batch_size]
            x = train_x[ids]
            if args.layout == "channels-last":
                x = x.contiguous(memory_format=torch.channels_last)
            for group in opt.param_groups:
                group["lr"] = lr_at(step, args, steps_per_epoch, total)
            loss = step_fn(x, train_y[ids])
            step += 1
            if is_eval_point(step, steps_per_epoch, args.eval_every):
                gpu_peer.synchronize(device)
                seconds += time.perf_counter() - start
                if not torch.isfinite(loss).item():
                    raise gpu_peer.PeerError(f"training diverged at step {step} (loss not finite)")
                accuracy = evaluate(model, test_x, test_y, args, device)
                evaluations.append({"step": step, "epoch": round(step / steps_per_epoch, 4),
                                    "wall_seconds": round(seconds, 3), "test_accuracy": accuracy})
                print(f"step {step} (epoch {step / steps_per_epoch:.2f}): test accuracy {100 * accuracy:.2f}% "
                      f"after {seconds:.1f} s training", flush=True)
                start = time.perf_counter()
    return evaluations, step


def times_to_targets(evaluations, targets):
    """The first evaluation at or above each target (%), as summary.json's time_to_target."""
    result = []
    for target in targets:
        entry = {"target": target, "reached": False}
        for e in evaluations:
            if 100 * e["test_accuracy"] >= target:
                entry.update(reached=True, step=e["step"], epoch=e["epoch"], wall_seconds=e["wall_seconds"],
                             test_accuracy=e["test_accuracy"])
                break
        result.append(entry)
    return result


def parser():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist", help="directory of the four IDX files")
    ap.add_argument("--model", default="resnet56")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--optimizer", choices=["sgd", "adamw"], default="sgd")
    ap.add_argument("--momentum", type=float, default=0.9, help="sgd")
    ap.add_argument("--betas", default="0.9,0.999", help="adamw: beta1,beta2")
    ap.add_argument("--eps", type=float, default=1e-8, help="adamw")
    ap.add_argument("--weight-decay", type=float, default=5e-4)
    ap.add_argument("--warmup-epochs", type=float, default=1.0)
    ap.add_argument("--eval-every", type=int, default=156, help="steps (also at each epoch end)")
    ap.add_argument("--eval-batch-size", type=int, default=1000)
    ap.add_argument("--targets", default="85,90,92", help="test accuracies (%%), comma-separated")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--layout", choices=["nchw", "channels-last"], default="channels-last")
    ap.add_argument("--precision", choices=gpu_peer.PRECISIONS[:3], default="fp32")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: the same loop on the CPU")
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads (torch.set_num_threads); 0: PyTorch's default")
    ap.add_argument("--train-subset", type=int, default=0, help="first N training samples (smoke tests)")
    ap.add_argument("--test-subset", type=int, default=0, help="first N test samples (smoke tests)")
    ap.add_argument("--json", help="append the result to this file (one JSON object a line)")
    return ap


def check(args):
    try:
        args.target_list = [float(t) for t in args.targets.split(",")]
    except ValueError:
        raise gpu_peer.PeerError(f"--targets {args.targets}: expected comma-separated percentages")
    try:
        args.beta_pair = [float(b) for b in args.betas.split(",")]
    except ValueError:
        raise gpu_peer.PeerError(f"--betas {args.betas}: expected beta1,beta2")
    if len(args.beta_pair) != 2 or not all(0 <= b < 1 for b in args.beta_pair) or args.eps <= 0:
        raise gpu_peer.PeerError(f"--betas {args.betas} --eps {args.eps}: betas are two rates in [0, 1), eps > 0")
    if args.threads < 0:
        raise gpu_peer.PeerError(f"--threads {args.threads}: expected 0 (PyTorch's default) or more")
    for name in ("epochs", "batch_size", "eval_batch_size"):
        if getattr(args, name) < 1:
            raise gpu_peer.PeerError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.lr <= 0 or args.warmup_epochs < 0 or args.eval_every < 0 or args.train_subset < 0 or args.test_subset < 0:
        raise gpu_peer.PeerError("--lr must be > 0; --warmup-epochs, --eval-every and the subsets >= 0")


def main():
    args = parser().parse_args()
    try:
        check(args)
        device = gpu_peer.check_device(args.device)
        if args.threads:
            torch.set_num_threads(args.threads)
        gpu_peer.set_switches(args.precision, cudnn_benchmark=False)
        (train_x, train_y), test = load(args.data, args.train_subset, args.test_subset)
        if train_x.shape[0] < args.batch_size:
            raise gpu_peer.PeerError(f"--batch-size {args.batch_size}: more than the {train_x.shape[0]} training images")
        mean, std = pixel_statistics(train_x)
        data = ((normalised(train_x, mean, std, device), train_y.to(device)),
                (normalised(test[0], mean, std, device), test[1].to(device)))
        evaluations, steps = train(args, device, data)
    except gpu_peer.PeerError as e:
        sys.exit(f"gpu_tta_peer.py: error: {e}")
    seconds = evaluations[-1]["wall_seconds"]
    result = {"who": "pytorch-eager", "config": "pytorch-eager", "seed": args.seed, "model": args.model,
              "batch_size": args.batch_size, "layout": args.layout, "precision": args.precision,
              "optimizer": args.optimizer, "threads": torch.get_num_threads(),
              **gpu_peer.switches(), "epochs": args.epochs,
              "steps": steps, "train_seconds": seconds,
              "images_per_second": round(steps * args.batch_size / seconds, 1) if seconds > 0 else None,
              "test_accuracy": evaluations[-1]["test_accuracy"], "normalization": [mean, std],
              "time_to_target": times_to_targets(evaluations, args.target_list), "evaluations": evaluations,
              "torch": torch.__version__, "gpu": gpu_peer.device_name(device)}
    for t in result["time_to_target"]:
        print(f"{t['target']:g}%: " + (f"{t['wall_seconds']:.1f} s (step {t['step']})" if t["reached"] else "not reached"))
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
