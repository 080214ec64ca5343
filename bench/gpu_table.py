#!/usr/bin/env python3
"""The one-GPU speed table from scripts/gpu-check.sh speed's speed.jsonl: medians over the
alternated rounds of stalepipe's rates and PyTorch eager's best layout, and the ratios the GPU
work is judged by (one partition against eager; two partitions on one GPU against one).

    python3 bench/gpu_table.py OUT/speed.jsonl
Standard library only.
"""
import collections
import json
import statistics
import sys


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: gpu_table.py SPEED.jsonl")
    rates = collections.defaultdict(list)  # (who, config, layout) -> images/s per round
    with open(sys.argv[1]) as f:
        for line in f:
            j = json.loads(line)
            rates[(j["who"], j["config"], j.get("layout", ""))].append(j["images_per_second"])
    median = {k: statistics.median(v) for k, v in rates.items()}

    def ours(config):
        return median.get(("stalepipe", config, ""))

    def eager_best(config):
        found = [(v, k[2]) for k, v in median.items() if k[0] == "pytorch-eager" and k[1] == config]
        return max(found) if found else (None, "")

    print("| configuration | stalepipe (img/s) | PyTorch eager, best layout (img/s) | ratio | rounds |")
    print("|---|---|---|---|---|")
    for config in sorted({k[1] for k in median if k[0] == "stalepipe"}):
        peer_config = config.rsplit("-", 1)[0]  # resnet56-b128-1p -> resnet56-b128
        rate, (peer, layout) = ours(config), eager_best(peer_config)
        ratio = f"{rate / peer:.2f}" if rate and peer else "-"
        peer_text = f"{peer:.0f} ({layout})" if peer else "-"
        print(f"| {config} | {rate:.0f} | {peer_text} | {ratio} | {len(rates[('stalepipe', config, '')])} |")
    one, two = ours("resnet56-b128-1p"), ours("resnet56-b128-2p")
    if one and two:
        print(f"\nTwo partitions on one GPU against one, ResNet-56 b128: {two / one:.2f}x")


if __name__ == "__main__":
    main()
