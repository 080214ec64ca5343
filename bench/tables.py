#!/usr/bin/python3
"""Markdown tables for docs/performance.md from the JSON files bench/run_all.sh writes.

Run:    /usr/bin/python3 bench/tables.py results/bench > results/bench/table.md
Prints: the speed table (images/s of every configuration, stalepipe and PyTorch), the ratios
with the speed targets (those against PyTorch's best single core in a table of their own), the ceiling (K independent runs at once) where measured, the memory table (the paper's Table 9 beside ours) and the
per-partition memory (predicted vs measured). Missing files leave their rows out.
Standard library only (no PyTorch needed).
"""
import json
import os
import sys

MODELS = ("lenet5", "resnet20", "resnet56", "resnet110")
PLACEMENTS = (("k2", "balanced (time), K=2"), ("paper", "paper's PPV"))
# The paper's Table 9 (docs/design.md): PipeDream (stashing) and this scheme, % over non-pipelined.
PAPER_T9 = {"lenet5": (2, 109, 97), "alexnet": (3, 214, 37), "vgg16": (2, 124, 75), "resnet20": (7, 61, 60)}


def load(folder, name):
    path = os.path.join(folder, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def f1(x):
    return f"{x:.1f}" if x else "-"


def f2(x):
    return f"{x:.2f}" if x else "-"


def status(value, ok):
    return f"{value:.3f} {'pass' if ok else 'MISS'}"


def print_pytorch_targets(folder, ratio_rows):
    """The targets against PyTorch, each from this run: ours against PyTorch's best layout, the pipeline
    against the ceiling, and the 2-worker pipeline's memory against non-pipelined training."""
    print("\n### targets: against PyTorch's best single core, the ceiling and memory (pass / MISS)\n")
    print("PyTorch best: the faster of NCHW and channels_last (bench/peers.py). Ceiling: the K "
          "workers as independent non-pipelined runs at once. Memory: the partitions' measured "
          "peaks together over the non-pipelined peak (`stalepipe memory`, the same cut).\n")
    print("| model (PPV) | layout | ours 1 thr / PyTorch best 1 thr (>= 1.10) | "
          "pipeline / PyTorch best 1 thr (>= 2.0) | pipeline / ceiling (>= 0.95) | memory (<= 1.3) |")
    print("|---|---|---|---|---|---|")
    for model, b, p in ratio_rows:
        compare = {c["name"]: c for c in (p or {}).get("compare", [])}
        one = compare.get("stalepipe non-pipelined 1 thread / PyTorch best 1 thread")
        pipe = compare.get("stalepipe stale pipeline / PyTorch best 1 thread")
        ceiling = b["ratios"].get("pipeline_vs_side_by_side", 0) if b["rates"].get("side_by_side") else 0
        # run_all.sh measures memory for the balanced cut only (MEMK2).
        m = None if b["pipeline_given"] else load(folder, f"memory-{model}-k2.json")
        cells = [status(one["value"], one["value"] >= 1.10) if one else "-",
                 status(pipe["value"], pipe["value"] >= 2.0) if pipe else "-",
                 status(ceiling, ceiling >= 0.95) if ceiling else "-",
                 status(m["measured_peak_ratio"], m["measured_peak_ratio"] <= 1.3) if m else "-"]
        print(f"| {model} ({b['ppv']}) | {b.get('layout', '-')} | " + " | ".join(cells) + " |")
        # The same cut choice with recomputation (RECOMPUTE): memory for speed; same peers.
        rb = None if b["pipeline_given"] else load(folder, f"{model}-k2-recompute.json")
        if rb and p and "best_plain" in p:
            pipe_rc = rb["rates"]["pipeline"] / p["best_plain"]["1"]
            ceiling_rc = rb["ratios"].get("pipeline_vs_side_by_side", 0) if rb["rates"].get("side_by_side") else 0
            m_rc = load(folder, f"memory-{model}-k2-recompute.json")
            cells = ["-", status(pipe_rc, pipe_rc >= 2.0),
                     status(ceiling_rc, ceiling_rc >= 0.95) if ceiling_rc else "-",
                     status(m_rc["measured_peak_ratio"], m_rc["measured_peak_ratio"] <= 1.3) if m_rc else "-"]
            print(f"| {model} ({rb['ppv']}, recompute {rb.get('recompute', '?')}) | {rb.get('layout', '-')} | "
                  + " | ".join(cells) + " |")


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        sys.exit("usage: tables.py RESULTS_FOLDER")
    folder = sys.argv[1]
    machine = os.path.join(folder, "machine.txt")
    if os.path.exists(machine):
        print("```\n" + open(machine).read().strip() + "\n```\n")

    print("### images/s (steady state after warm-up; batch 128 in run_all.sh)\n")
    print("Each rate is the median of the alternated rounds in the last column (ours / PyTorch's); "
          "the train column, of the alternated `--processes-repeats` runs.\n")
    print("| model | placement (PPV) | non-pip. 1 thr | non-pip. all thr | stale pipeline (threads) | "
          "emulated | profile bound | simulator | train: threads / processes | "
          "PyTorch 1 thr | PyTorch all thr | PyTorch Pipe (chunks) | rounds |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    ratio_rows = []
    for model in MODELS:
        for key, label in PLACEMENTS:
            b = load(folder, f"{model}-{key}.json")
            if not b:
                continue
            r = b["rates"]
            p = load(folder, f"peers-{model}-{key}.json")
            plain1 = plainT = pipe = "-"
            if p:
                plain1 = f1(p["plain"].get("1", 0))
                plainT = f1(p["plain"].get(str(p["threads"]), 0))
                pipe = ", ".join(f"{v:.1f} ({c})" for c, v in p["pipe"].items())
            train = f"{f1(r['threads_train'])} / {f1(r['processes'])}" if r["processes"] else "-"
            print(f"| {model} | {label} ({b['ppv']}) | {f1(r['one_thread'])} | {f1(r['all_threads'])} | "
                  f"{f1(r['pipeline'])} | {f1(r['emulated'])} | {f1(r['bound'])} | {f1(r['simulated'])} | "
                  f"{train} | {plain1} | {plainT} | {pipe} | {b.get('rounds', 1)} / {p.get('rounds', 1) if p else '-'} |")
            ratio_rows.append((model, b, p))

    print("\n### ratios against the targets (pass / MISS)\n")
    names = [t["name"] for t in ratio_rows[0][1]["targets"]] if ratio_rows else []
    peer_names = next(([f"{c['name']} (>= {c['low']})" for c in p["compare"]]
                       for _, _, p in ratio_rows if p and p.get("compare")), [])
    header = [f"{n} ({'>= ' + str(t['low']) if t['high'] is None else str(t['low']) + '..' + str(t['high'])})"
              for n, t in zip(names, ratio_rows[0][1]["targets"])] if ratio_rows else []
    print("| model (PPV) | " + " | ".join(header + peer_names) + " |")
    print("|---|" + "---|" * (len(header) + len(peer_names)))
    for model, b, p in ratio_rows:
        cells = [f"{t['value']:.2f} {'pass' if t['status'] == 'pass' else 'MISS' if t['status'] == 'miss' else '-'}"
                 for t in b["targets"]]
        compare = {c["name"]: c for c in (p or {}).get("compare", [])}
        for c in compare.values():
            cells.append(f"{c['value']:.2f} {'pass' if c['status'] == 'pass' else 'MISS'}")
        cells += ["-"] * (len(header) + len(peer_names) - len(cells))
        print(f"| {model} ({b['ppv']}) | " + " | ".join(cells) + " |")

    print_pytorch_targets(folder, ratio_rows)

    ceiling_rows = [(model, b) for model, b, _ in ratio_rows if b["rates"].get("side_by_side")]
    if ceiling_rows:
        print("\n### the hardware's ceiling: the pipeline's workers side by side, without the pipeline\n")
        print("| model (PPV) | non-pip. 1 thr | K runs at once (summed) | ceiling (x 1 thr) | stale pipeline | "
              "pipeline / ceiling |")
        print("|---|---|---|---|---|---|")
    for model, b in ceiling_rows:
        r, q = b["rates"], b["ratios"]
        print(f"| {model} ({b['ppv']}) | {f1(r['one_thread'])} | {f1(r['side_by_side'])} | "
              f"{f2(q['side_by_side_vs_one_thread'])} | {f1(r['pipeline'])} | {f2(q['pipeline_vs_side_by_side'])} |")

    print("\n### memory of 4-stage (K=2) training over non-pipelined (Table 9)\n")
    print("| network | PPV | batch | activations/sample (MB) | weights (MB) | stashing (PipeDream), computed | "
          "this scheme, computed | this scheme, measured | paper: PipeDream / this scheme |")
    print("|---|---|---|---|---|---|---|---|---|")
    parts = []
    for model, (ppv, pd, ours) in PAPER_T9.items():
        m = load(folder, f"memory-{model}.json")
        if not m:
            continue
        print(f"| {model} | {m['ppv']} | {m['batch_size']} | {m['activation_mb_per_sample']:.3f} | {m['weight_mb']:.3f} | "
              f"+{m['stash_percent']:.0f}% | +{m['scheme_percent']:.0f}% | +{m['measured_scheme_percent']:.0f}% | "
              f"+{pd}% / +{ours}% |")
        parts.append(m)

    print("\n### per-partition memory (MB): predicted from the schedule vs measured peak\n")
    print("| network | partition | in flight | predicted | measured | measured / predicted | + weight stashing |")
    print("|---|---|---|---|---|---|---|")
    for m in parts:
        for k, q in enumerate(m["partitions"]):
            ratio = q["measured_peak_bytes"] / q["predicted_bytes"] if q["predicted_bytes"] else 0
            print(f"| {m['model']} | {k + 1} | {q['max_in_flight']} | {q['predicted_bytes'] / 1e6:.2f} | "
                  f"{q['measured_peak_bytes'] / 1e6:.2f} | {f2(ratio)} | {q['stash_bytes'] / 1e6:.3f} |")


if __name__ == "__main__":
    main()
