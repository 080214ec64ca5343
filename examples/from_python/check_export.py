#!/usr/bin/python3
"""Loads the network stalepipe trained and exported, and scores it on the Fashion-MNIST test
set exactly as stalepipe's loader feeds it (pad 28x28 to 32x32 with zeros, then normalise with
the training set's mean and std), so the accuracy must equal what `stalepipe train` printed.

    /usr/bin/python3 check_export.py trained.pt [--data DIR] [--train-subset N]
    # prints: test_accuracy 0.xxxx  (compare with stalepipe's "test_accuracy" line)

Give the --train-subset the run used: stalepipe normalises with the statistics of the training
samples it trains on.
"""
import argparse
import gzip

import numpy as np
import torch


def idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="trained.pt")
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--train-subset", type=int, default=0, help="as stalepipe's (0: all)")
    args = parser.parse_args()
    data_dir = args.data
    train = idx(f"{data_dir}/train-images-idx3-ubyte.gz")
    train = train[:args.train_subset] if args.train_subset > 0 else train
    train = train.astype(np.float64) / 255.0
    mean, std = train.mean(), train.std()  # population std over all training pixels
    images = torch.from_numpy(idx(f"{data_dir}/t10k-images-idx3-ubyte.gz").copy())
    labels = torch.from_numpy(idx(f"{data_dir}/t10k-labels-idx1-ubyte.gz").astype(np.int64))
    x = torch.nn.functional.pad(images.unsqueeze(1), (2, 2, 2, 2)).float()
    x = x * float(1.0 / (255.0 * std)) + float(-mean / std)

    model = torch.jit.load(args.model)
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(x[i:i + 1000]).argmax(1) == labels[i:i + 1000]).sum())
                      for i in range(0, len(labels), 1000))
    print(f"test_accuracy {correct / len(labels):.4f}")


if __name__ == "__main__":
    main()
