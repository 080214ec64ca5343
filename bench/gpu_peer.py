#!/usr/bin/env python3
"""PyTorch eager on one GPU: the peer of `stalepipe train --devices cuda:0` (scripts/gpu-check.sh
speed). The networks are bench/peers.py's, unit for unit stalepipe's; training is plain SGD
(lr 0.01, momentum 0.9, weight decay 5e-4) on a fixed batch already on the device, so the peer
pays no input cost, and no step waits for the device (the loss is checked once, at the end).

    python3 bench/gpu_peer.py --model resnet56 --batch-size 128 --layout channels-last
prints one line: model, batch, layout, images/s, TF32 setting; --json FILE appends it as JSON.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers  # noqa: E402  (the models)
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def rate(model_name, batch, layout, warmup, seconds):
    torch.manual_seed(1)
    model = nn.Sequential(*[m for m, _ in peers.make_units(model_name, 1)]).cuda()
    x = torch.randn(batch, 1, 32, 32, device="cuda")
    y = torch.randint(0, 10, (batch,), device="cuda")
    if layout == "channels-last":
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:  # whole chunks of 20 steps between checks
        for _ in range(20):
            loss = step()
        steps += 20
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    if not torch.isfinite(loss):
        sys.exit("gpu_peer.py: error: training diverged (loss not finite)")
    return steps * batch / elapsed


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet56")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--layout", choices=["nchw", "channels-last"], default="channels-last")
    ap.add_argument("--warmup-steps", type=int, default=30)
    ap.add_argument("--seconds", type=float, default=10.0, help="timed seconds")
    ap.add_argument("--json", help="append the result to this file (one JSON object a line)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpu_peer.py: error: no CUDA device")
    r = rate(args.model, args.batch_size, args.layout, args.warmup_steps, args.seconds)
    tf32 = torch.backends.cudnn.allow_tf32
    result = {"who": "pytorch-eager", "model": args.model, "batch_size": args.batch_size,
              "layout": args.layout, "images_per_second": round(r, 1), "cudnn_tf32": tf32,
              "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}
    print(f"pytorch eager {args.model} b{args.batch_size} {args.layout}: {r:.0f} img/s (cuDNN TF32 {tf32})")
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
