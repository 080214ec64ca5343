#!/usr/bin/python3
"""PyTorch's DistributedDataParallel over Gloo: the peer of `stalepipe train --replicas R
--pipeline none --executor processes`.

R processes on this machine (torch.multiprocessing), each with --threads-per-rank intra-op
threads, train the network of bench/peers.py (the same units as stalepipe's) on synthetic
batches: the global mini-batch --batch-size is split into R slices, one per process, DDP
all-reduces the gradients (its buckets overlap the backward), SGD as stalepipe's defaults.
Prints the global images/s over --steps after --warmup-steps:
    ddp lenet5 R=2 batch 128 nchw: 1234.5 img/s
Run: /usr/bin/python3 bench/ddp_peer.py --model resnet20 --replicas 2 --batch-size 128
"""
import argparse
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers  # noqa: E402  (the models and the optimizer settings)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_main(rank, args, port, rates):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(args.threads_per_rank)
    dist.init_process_group("gloo", rank=rank, world_size=args.replicas)
    torch.manual_seed(1)
    model = nn.Sequential(*[m for m, _ in peers.make_units(args.model, args.channels)])
    slice_size = args.batch_size // args.replicas
    data = peers.batches(slice_size, args.channels)
    if args.layout == "channels-last":
        model = model.to(memory_format=torch.channels_last)
        data = [(x.contiguous(memory_format=torch.channels_last), y) for x, y in data]
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = peers.sgd(ddp.parameters())

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(ddp(x), y).backward()
        opt.step()

    for i in range(args.warmup_steps):
        step(*data[i % len(data)])
    dist.barrier()
    start = time.perf_counter()
    for i in range(args.steps):
        step(*data[i % len(data)])
    dist.barrier()
    if rank == 0:
        rates.put(args.steps * slice_size * args.replicas / (time.perf_counter() - start))
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="lenet5")
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=128, help="the global mini-batch")
    ap.add_argument("--channels", type=int, default=1)
    ap.add_argument("--threads-per-rank", type=int, default=1)
    ap.add_argument("--layout", choices=["nchw", "channels-last"], default="nchw")
    ap.add_argument("--warmup-steps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=50)
    args = ap.parse_args()
    if args.replicas < 1 or args.batch_size % args.replicas:
        peers.usage_error(f"--batch-size {args.batch_size} must be a multiple of --replicas {args.replicas}")
    ctx = mp.get_context("spawn")
    rates = ctx.SimpleQueue()
    mp.start_processes(rank_main, args=(args, free_port(), rates), nprocs=args.replicas, start_method="spawn")
    print(f"ddp {args.model} R={args.replicas} batch {args.batch_size} {args.layout}: {rates.get():.1f} img/s")


if __name__ == "__main__":
    main()
