#!/usr/bin/env python3
"""timm's side of bench/zoo.sh: timm 0.9.16 over Debian's torch 1.13, in a virtual environment
made with --system-site-packages (bench/timm_zoo.sh says how).

  timm_zoo.py script OUT FAMILY...   scripts each family's model (10 classes, scriptable=True)
                                     to OUT/FAMILY.pt and prints "FAMILY PARAMETERS", or
                                     "FAMILY refused" where its forward returns a tuple
  timm_zoo.py families [--all]       the families that script (a module of timm.models each,
                                     named by its smallest model that scripts and runs on 3x64x64),
                                     on one line; --all: every module, a line each, with the
                                     model chosen or why none was (cached in ~/.cache/stalepipe)
  timm_zoo.py check                  exit 0 where timm 0.9.16 imports
"""
import json
import os
import re
import sys
import warnings

import torch

try:
    import timm
except ImportError:
    timm = None

CACHE = os.path.join(os.path.expanduser("~"), ".cache", "stalepipe", "timm-families.json")
# Size words in timm's names, smallest first: the candidates a module is tried with.
SIZES = ["atto", "femto", "pico", "nano", "tiny", "xxs", "xs", "mini", "small", "lite", "s", "b0", "t", "m",
         "base", "b1", "medium"]
CANDIDATES = 4


def check():
    if timm is None or not timm.__version__.startswith("0.9.16"):
        found = "none" if timm is None else timm.__version__
        sys.exit(f"timm_zoo.py: needs timm 0.9.16 (found {found}); see bench/timm_zoo.sh")


def size_rank(name):
    """How small the name says a model is (smaller first): its size words, then its numbers."""
    words = re.split(r"[_.]", name)
    rank = min((SIZES.index(w) for w in words if w in SIZES), default=len(SIZES))
    numbers = [int(n) for n in re.findall(r"\d+", name)] or [0]
    return rank, numbers[0], len(name), name


def make(name):
    torch.manual_seed(0)
    return timm.create_model(name, num_classes=10, scriptable=True, pretrained=False)


def try_model(name):
    """(parameters, None) where `name` scripts and runs on a 64x64 batch; else (None, why)."""
    try:
        net = make(name)
        scripted = torch.jit.script(net)
        scripted.eval()
        with torch.no_grad():
            scripted(torch.zeros(2, 3, 64, 64))  # a tuple output is fine here: zoo.sh checks its refusal
        return sum(p.numel() for p in net.parameters()), None
    except Exception as e:  # noqa: BLE001  (any failure means: not this model)
        return None, f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:120]}"


def choose(module):
    names = sorted(timm.list_models(module=module), key=size_rank)
    if not names:
        return {"model": None, "why": "no model"}
    best, why = None, None
    for name in names[:CANDIDATES]:
        params, failure = try_model(name)
        if params is None:
            why = why or f"{name}: {failure}"
        elif best is None or params < best[1]:
            best = (name, params)
    return {"model": best[0], "parameters": best[1]} if best else {"model": None, "why": why}


def families(show_all):
    cache = {}
    if os.path.exists(CACHE):
        with open(CACHE) as f:
            cache = json.load(f)
    warnings.filterwarnings("ignore")
    for module in sorted(timm.list_modules()):
        if module not in cache:
            cache[module] = choose(module)
            os.makedirs(os.path.dirname(CACHE), exist_ok=True)
            with open(CACHE, "w") as f:  # after each module: a long listing resumes
                json.dump(cache, f, indent=1)
    if show_all:
        for module, c in sorted(cache.items()):
            print(module, c["model"] or "-", c.get("parameters", "-") if c["model"] else c["why"])
    else:
        print(" ".join(sorted(c["model"] for c in cache.values() if c["model"])))


def script(out, names):
    os.makedirs(out, exist_ok=True)
    warnings.filterwarnings("ignore")
    for name in names:
        net = make(name)
        scripted = torch.jit.script(net)
        scripted.save(os.path.join(out, name + ".pt"))
        returns = scripted.forward.schema.returns
        refused = len(returns) != 1 or str(returns[0].type) != "Tensor"
        print(name, "refused" if refused else sum(p.numel() for p in net.parameters()))


if __name__ == "__main__":
    command, args = sys.argv[1] if len(sys.argv) > 1 else "", sys.argv[2:]
    if command == "check" and not args:
        check()
    elif command == "script" and args:
        check()
        script(args[0], args[1:])
    elif command == "families" and args in ([], ["--all"]):
        check()
        families(args == ["--all"])
    else:
        sys.exit(__doc__)
