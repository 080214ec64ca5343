#!/usr/bin/env python3
"""PyTorch on one GPU, eager or torch.compile'd: the peer of `stalepipe train --devices cuda:0`
(scripts/gpu-check.sh speed). The networks are bench/peers.py's, unit for unit stalepipe's;
training is plain SGD (lr 0.01, momentum 0.9, weight decay 5e-4) on a fixed batch already on the
device (N(0, 1) pixels, uniform labels), so the peer pays no input cost, as `stalepipe bench
--seconds` does not; steps are timed in chunks of 20 (one wait for the device after each), the
loss checked once, at the end. The JSON line states the switches read after the timed steps:
cudnn_benchmark, cudnn_tf32 and matmul_tf32, and the optimizer's kind. Eager steps use SGD's
fused kernel where this PyTorch has one for the device (else its multi-tensor kernels).

    python3 bench/gpu_peer.py --model resnet56 --batch-size 128 --layout channels-last --precision fp32
prints one line: model, batch, layout, precision, images/s; --json FILE appends it as JSON.

--precision (as stalepipe's): fp32 turns TF32 off for cuDNN and matmul, tf32 turns both on, bf16
runs forward and loss under torch.autocast(bfloat16) with fp32 weights and TF32 on for what stays
fp32. PyTorch's own default (cuDNN TF32 on, matmul TF32 off) is none of them.
--cudnn-benchmark: torch.backends.cudnn.benchmark = True (cuDNN times its algorithms per shape);
the JSON's precision then reads e.g. "tf32+benchmark".
--compile: the whole step compiled: torch.compile(model, mode="reduce-overhead") (CUDA graphs of
forward and backward) and the optimizer's step compiled on its own, as PyTorch's tutorial on
compiling the optimizer does. The compile happens in the warm-up, timed on its own
(compile_seconds), never in the rate. Needs PyTorch 2; older ones end with a one-line error.
--serve: one process for many measurements: reads one set of these options a line on stdin,
answers one JSON line on stdout, and keeps each model (compiled once) for the next request
of the same model, batch, layout and compile; the precision is the process's (--precision).
--device cpu runs the same code on the CPU, for smoke tests only (its rates mean nothing).
"""
import argparse
import contextlib
import inspect
import json
import os
import shlex
import sys
import time

if __name__ == "__main__" and "--serve" in sys.argv[1:]:
    # The answers get the real stdout; from here on (imports included) anything else printed
    # there goes to stderr, so that each stdout line is an answer.
    ANSWERS = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers  # noqa: E402  (the models)
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

PRECISIONS = ("fp32", "tf32", "bf16")


class PeerError(Exception):
    """A measurement that cannot be made: its message is the one-line error."""


def set_switches(precision, cudnn_benchmark):
    """Sets the process's TF32 flags for `precision` and cuDNN's benchmark mode."""
    tf32 = precision != "fp32"
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = cudnn_benchmark


def switches():
    """The switches in effect now, under the keys `stalepipe bench --json` gives ours."""
    flags = {"cudnn_benchmark": torch.backends.cudnn.benchmark, "cudnn_tf32": torch.backends.cudnn.allow_tf32,
             "matmul_tf32": torch.backends.cuda.matmul.allow_tf32}
    conv = getattr(getattr(torch.backends.cudnn, "conv", None), "fp32_precision", None)
    if conv is not None:  # PyTorch 2.9 and later also state it in their newer terms
        flags["fp32_precision"] = {"cudnn_conv": conv, "matmul": torch.backends.cuda.matmul.fp32_precision}
    return flags


def autocast(precision, device):
    """Forward and loss in bfloat16 for bf16 (weights stay fp32); nothing otherwise."""
    if precision != "bf16":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)


def check_device(name):
    if name == "cuda" and not torch.cuda.is_available():
        raise PeerError("no CUDA device (use --device cpu for a smoke test)")
    return torch.device(name)


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def device_name(device):
    return torch.cuda.get_device_name() if device.type == "cuda" else "cpu"


def make_model(model_name, layout, device, seed=1):
    """bench/peers.py's network on `device`, in `layout`, its weights drawn after manual_seed(seed)."""
    torch.manual_seed(seed)
    model = nn.Sequential(*[m for m, _ in peers.make_units(model_name, 1)]).to(device)
    if layout == "channels-last":
        model = model.to(memory_format=torch.channels_last)
    return model


def sgd(model, lr, device, compiled):
    """SGD with its fused kernel for eager steps where PyTorch has one for the device; compiled
    steps keep the multi-tensor kernels, which the compiler fuses itself. Returns the optimizer
    and its kind (fused, foreach)."""
    kwargs = dict(lr=lr, momentum=0.9, weight_decay=5e-4)
    fused = (not compiled and device.type == "cuda"
             and "fused" in inspect.signature(torch.optim.SGD.__init__).parameters)
    if fused:
        kwargs["fused"] = True
    return torch.optim.SGD(model.parameters(), **kwargs), "fused" if fused else "foreach"


def compile_model(model):
    if not hasattr(torch, "compile"):
        raise PeerError(f"--compile needs torch.compile (PyTorch 2.0 or later); this is PyTorch {torch.__version__}")
    return torch.compile(model, mode="reduce-overhead")


def train_step(model, opt, precision, device, compiled):
    """step(x, y) -> loss: one SGD step, without waiting for the device. Compiled: the model's
    forward and backward (compile_model) and the optimizer's step, each compiled."""
    mark_step = compiled and hasattr(torch, "compiler") and hasattr(torch.compiler, "cudagraph_mark_step_begin")
    update = opt.step
    if compiled:
        @torch.compile(fullgraph=False)
        def update():
            opt.step()

    def step(x, y):
        if mark_step:  # a new iteration: the previous step's graph outputs may be reused
            torch.compiler.cudagraph_mark_step_begin()
        opt.zero_grad(set_to_none=True)
        with autocast(precision, device):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        update()
        return loss
    return step


class Setup:
    """One configuration's model, optimizer, batch and step, built (and compiled) once."""

    def __init__(self, args, device):
        self.device, self.compiled = device, args.compile
        model = make_model(args.model, args.layout, device)
        self.x = torch.randn(args.batch_size, 1, 32, 32, device=device)
        self.y = torch.randint(0, 10, (args.batch_size,), device=device)
        if args.layout == "channels-last":
            self.x = self.x.contiguous(memory_format=torch.channels_last)
        opt, self.optimizer = sgd(model, 0.01, device, args.compile)
        if args.compile:
            model = compile_model(model)
        self.step = train_step(model, opt, args.precision, device, args.compile)
        self.compile_seconds = None  # the first step's, when compiled
        self.warmed = False

    def warm_up(self, steps):
        """Runs `steps` untimed steps (at least 3 the first time when compiled: compile, record
        the graphs, replay them); returns their seconds."""
        start = time.perf_counter()
        if self.compiled and self.compile_seconds is None:
            self.step(self.x, self.y)
            synchronize(self.device)
            self.compile_seconds = time.perf_counter() - start
            steps = max(steps, 3) - 1
        for _ in range(steps):
            self.step(self.x, self.y)
        synchronize(self.device)
        self.warmed = True
        return time.perf_counter() - start

    def rate(self, seconds):
        steps, start = 0, time.perf_counter()
        loss = None
        while time.perf_counter() - start < seconds:  # whole chunks of 20 steps between checks
            for _ in range(20):
                loss = self.step(self.x, self.y)
            steps += 20
            synchronize(self.device)
        elapsed = time.perf_counter() - start
        if not torch.isfinite(loss).item():
            raise PeerError("training diverged (loss not finite)")
        return steps * self.x.shape[0] / elapsed, steps


def cudagraph_skips():
    """How often Inductor fell back from CUDA graphs in this process so far (0: every compiled
    graph ran as one)."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return None
    return counters["inductor"]["cudagraph_skips"]


def measure(args, setups, device):
    """One measurement of args' configuration, reusing its Setup; returns the JSON object with
    the switches read after the timed steps."""
    key = (args.model, args.batch_size, args.layout, args.compile)
    if key not in setups:
        setups[key] = Setup(args, device)
    setup = setups[key]
    warmup = setup.warm_up(args.warmup_steps if not setup.warmed else min(args.warmup_steps, 10))
    images_per_second, steps = setup.rate(args.seconds)
    result = {"who": "pytorch-compile" if args.compile else "pytorch-eager", "config": args.config, "model": args.model,
              "batch_size": args.batch_size, "layout": args.layout,
              "precision": args.precision + ("+benchmark" if args.cudnn_benchmark else ""), **switches(),
              "compile": args.compile,
              "compile_mode": "reduce-overhead" if args.compile else None,
              "optimizer": ("compiled " if args.compile else "") + setup.optimizer,
              "compile_seconds": round(setup.compile_seconds, 2) if setup.compile_seconds else None,
              "warmup_seconds": round(warmup, 2), "timed_steps": steps,
              "images_per_second": round(images_per_second, 1),
              "torch": torch.__version__, "gpu": device_name(device)}
    if args.compile:
        result["cudagraph_skips"] = cudagraph_skips()
    return result


def describe(j):
    text = (f"pytorch {'compile' if j['compile'] else 'eager'} {j['model']} b{j['batch_size']} {j['layout']} "
            f"{j['precision']}: {j['images_per_second']:.0f} img/s (cuDNN benchmark {j['cudnn_benchmark']}, "
            f"cuDNN TF32 {j['cudnn_tf32']}, matmul TF32 {j['matmul_tf32']}, optimizer {j['optimizer']}")
    if j["compile_seconds"] is not None:
        text += f", compiled in {j['compile_seconds']:.0f} s"
    return text + ")"


def parser():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet56")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--layout", choices=["nchw", "channels-last"], default="channels-last")
    ap.add_argument("--precision", choices=PRECISIONS, default="fp32",
                    help="fp32: TF32 off (stalepipe's default); tf32; bf16 autocast")
    ap.add_argument("--cudnn-benchmark", action="store_true", help="torch.backends.cudnn.benchmark = True")
    ap.add_argument("--compile", action="store_true", help='torch.compile(mode="reduce-overhead")')
    ap.add_argument("--warmup-steps", type=int, default=30, help="untimed steps (10 on a kept model)")
    ap.add_argument("--seconds", type=float, default=10.0, help="timed seconds")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: smoke tests only")
    ap.add_argument("--config", help="a name for the configuration, copied into the JSON line")
    ap.add_argument("--json", help="append the result to this file (one JSON object a line)")
    ap.add_argument("--serve", action="store_true", help="read one request (these options) a line on stdin")
    return ap


def check(args):
    if args.batch_size < 1 or args.warmup_steps < 0 or args.seconds <= 0:
        raise PeerError(f"--batch-size {args.batch_size} / --warmup-steps {args.warmup_steps} / "
                        f"--seconds {args.seconds}: expected >= 1 / >= 0 / > 0")
    if args.compile and not hasattr(torch, "compile"):
        compile_model(None)  # the one-line error


class RequestError(Exception):
    pass


def serve(args, device):
    """Answers each stdin line (options of this script) with one JSON line on the original
    stdout (ANSWERS, set up before the imports)."""
    ap = parser()
    # A request names them only to check.
    ap.set_defaults(precision=args.precision, device=args.device, cudnn_benchmark=args.cudnn_benchmark)

    def fail(message):
        raise RequestError(message)
    ap.error = fail  # a bad request is answered, not the end of the process
    setups = {}
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = ap.parse_args(shlex.split(line))
            if (request.precision != args.precision or request.device != args.device or request.serve
                    or request.cudnn_benchmark != args.cudnn_benchmark):
                raise RequestError(f"a request keeps the server's --precision {args.precision}, --device "
                                   f"{args.device} and --cudnn-benchmark ({args.cudnn_benchmark}), and cannot --serve")
            check(request)
            j = measure(request, setups, device)
            print(describe(j), file=sys.stderr, flush=True)
        except (PeerError, RequestError) as e:
            j = {"error": str(e), "request": line.strip()}
        except SystemExit as e:  # peers.py's usage_error, already printed to stderr
            j = {"error": f"bad request (exit {e.code}; see the peer's stderr)", "request": line.strip()}
        except Exception as e:  # noqa: BLE001  (one failed configuration must not end the others)
            j = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", "request": line.strip()}
        ANSWERS.write(json.dumps(j) + "\n")


def main():
    args = parser().parse_args()
    try:
        check(args)
        device = check_device(args.device)
        set_switches(args.precision, args.cudnn_benchmark)
        if args.serve:
            serve(args, device)
            return
        j = measure(args, {}, device)
    except PeerError as e:
        sys.exit(f"gpu_peer.py: error: {e}")
    print(describe(j))
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(j) + "\n")


if __name__ == "__main__":
    main()
