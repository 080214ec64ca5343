#!/usr/bin/env python3
"""timm's side of bench/zoo.sh: timm 0.9.16 over Debian's torch 1.13, in a virtual environment
made with --system-site-packages (bench/timm_zoo.sh says how).

  timm_zoo.py script OUT FAMILY...   scripts each family's model (10 classes, scriptable=True)
                                     to OUT/FAMILY.pt and prints "FAMILY PARAMETERS", or
                                     "FAMILY refused" where its forward returns a tuple
  timm_zoo.py families [--all]       the families that script (a module of timm.models each,
                                     named by its smallest model that scripts and runs on 3x64x64,
                                     made for that size, img_size=64, where it fails as it is),
                                     on one line; --all: every module, a line each, with the
                                     model chosen or why none was (cached in ~/.cache/stalepipe)
  timm_zoo.py check                  exit 0 where timm 0.9.16 imports
"""
import enum
import inspect
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


def backport_enum_fix():
    """Lets torch 1.13 script classes that annotate an attribute with an Enum (timm's ViTs, Swin,
    BEiT, ...: `output_fmt: Format`) under Python 3.11, which put more of Enum's own methods
    into each Enum class: torch 2 skips methods that have no Python globals when it resolves a
    class's names, and drops Enum's __new__, __format__, __repr__ and __str__. The same here."""
    if sys.version_info < (3, 11) or int(torch.__version__.split(".")[0]) >= 2:
        return
    import builtins
    import torch._jit_internal as jit_internal

    def resolution_callback(cls):
        fns = [getattr(cls, name) for name in cls.__dict__ if inspect.isroutine(getattr(cls, name))]
        captures = {}
        for fn in fns:
            if not inspect.isbuiltin(fn) and hasattr(fn, "__globals__"):
                captures.update(jit_internal.get_closure(fn))
                captures.update(jit_internal.get_type_hint_captures(fn))
        return lambda key: captures[key] if key in captures else getattr(builtins, key, None)

    jit_internal.createResolutionCallbackForClassMethods = resolution_callback
    for fn in (enum.Enum.__new__, enum.Enum.__format__, enum.Enum.__repr__, enum.Enum.__str__):
        torch.jit.unused(fn)


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


def make(name, options):
    torch.manual_seed(0)
    return timm.create_model(name, num_classes=10, scriptable=True, pretrained=False, **options)


def failure(e):
    """The line of an exception that says what failed (TorchScript's first line says only that
    an operation failed in the interpreter; its last line says which and why)."""
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    if len(lines) > 1 and "failed in the TorchScript interpreter" in lines[0]:
        lines = lines[-1:]
    return f"{type(e).__name__}: {(lines or [''])[0][:160]}"


def try_model(name):
    """(parameters, options, None) where `name` scripts and runs on a 64x64 batch, as it is or
    made for 64x64 (img_size=64); else (None, None, why)."""
    why = None
    for options in ({}, {"img_size": 64}):
        try:
            net = make(name, options)
            scripted = torch.jit.script(net)
            scripted.eval()
            with torch.no_grad():
                scripted(torch.zeros(2, 3, 64, 64))  # a tuple output is fine here: zoo.sh checks its refusal
            return sum(p.numel() for p in net.parameters()), options, None
        except TypeError as e:
            if options and "img_size" in str(e):  # a model that is not made for a size
                break
            why = why or failure(e)
        except Exception as e:  # noqa: BLE001  (any failure means: not this model)
            why = why or failure(e)
    return None, None, why


def choose(module):
    names = sorted(timm.list_models(module=module), key=size_rank)
    if not names:
        return {"model": None, "why": "no model"}
    best, why = None, None
    for name in names[:CANDIDATES]:
        params, options, failed = try_model(name)
        if params is None:
            why = why or f"{name}: {failed}"
        elif best is None or params < best["parameters"]:
            best = {"model": name, "parameters": params, **options}
    return best or {"model": None, "why": why}


def load_cache():
    if not os.path.exists(CACHE):
        return {}
    with open(CACHE) as f:
        return json.load(f)


def families(show_all):
    cache = load_cache()
    warnings.filterwarnings("ignore")
    for module in sorted(timm.list_modules()):
        if module not in cache:
            cache[module] = choose(module)
            os.makedirs(os.path.dirname(CACHE), exist_ok=True)
            with open(CACHE, "w") as f:  # after each module: a long listing resumes
                json.dump(cache, f, indent=1)
    if show_all:
        for module, c in sorted(cache.items()):
            made = " (img_size=64)" if "img_size" in c else ""
            print(module, c["model"] or "-", f'{c["parameters"]}{made}' if c["model"] else c["why"])
    else:
        print(" ".join(sorted(c["model"] for c in cache.values() if c["model"])))


def script(out, names):
    os.makedirs(out, exist_ok=True)
    warnings.filterwarnings("ignore")
    options = {c["model"]: {"img_size": c["img_size"]} for c in load_cache().values() if "img_size" in c}
    for name in names:
        net = make(name, options.get(name, {}))
        scripted = torch.jit.script(net)
        scripted.save(os.path.join(out, name + ".pt"))
        returns = scripted.forward.schema.returns
        refused = len(returns) != 1 or str(returns[0].type) != "Tensor"
        print(name, "refused" if refused else sum(p.numel() for p in net.parameters()))


if __name__ == "__main__":
    backport_enum_fix()
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
