#!/usr/bin/python3
"""Norms of the conv weights in stalepipe checkpoints, in forward order.

Usage: /usr/bin/python3 scripts/weight_norms.py RUN_DIR [RUN_DIR ...]
RUN_DIR is a run folder (what `stalepipe train --out` or `stalepipe sweep` wrote); its newest
checkpoint is read. Prints one CSV line per run: run, then the Frobenius norm of each 4-D
(conv) weight. Needs Debian's python3-torch (/usr/bin/python3), which reads the shards that
torch::save wrote.
"""
import json
import os
import sys

import torch


def conv_norms(run_dir):
    manifest_path = os.path.join(run_dir, "checkpoint", "manifest.json")
    with open(manifest_path) as f:
        manifest = json.load(f)
    norms = []
    for shard in manifest["shards"]:
        module = torch.jit.load(os.path.join(run_dir, "checkpoint", shard))
        norms += [p.norm().item() for _, p in module.named_parameters() if p.dim() == 4]
    return norms


def main(runs):
    if not runs:
        sys.exit(__doc__)
    for run in runs:
        try:
            norms = conv_norms(run)
        except (OSError, KeyError, RuntimeError, ValueError) as e:
            sys.exit(f"{run}: cannot read its checkpoint: {e}")
        print(",".join([os.path.basename(run.rstrip("/"))] + [f"{n:.2f}" for n in norms]))


if __name__ == "__main__":
    main(sys.argv[1:])
