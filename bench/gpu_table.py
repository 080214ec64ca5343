#!/usr/bin/env python3
"""The tables of scripts/gpu-check.sh's GPU checks, from the JSON lines its modes write:

    python3 bench/gpu_table.py speed OUT/speed.jsonl [--json OUT/speed.json]
        medians over the alternated rounds of stalepipe's rates and PyTorch's, per precision:
        ours against eager's best layout and against torch.compile's best (reduce-overhead),
        each side's switches (cuDNN benchmark, TF32), two partitions on one GPU against one,
        --cuda-graphs against without in speed and in peak reserved GPU memory. Ends with
        status 1 after a FAIL line: the two sides' switches differ, or a -graphs row has a
        partition that ran no pass as a CUDA graph.
    python3 bench/gpu_table.py tta OUT/tta.jsonl [--json OUT/tta.json]
        time to each target, per seed, of stalepipe's configurations and the PyTorch eager
        loop (bench/gpu_tta_peer.py), and how many times sooner ours reached the last target
        (target >= 1.5x).
    python3 bench/gpu_table.py precision OUT/precision.jsonl [--json OUT/precision.json]
        final test accuracy of bf16 against fp32 per seed and of the means (target: within
        0.3 points), and the rates.
Standard library only.
"""
import argparse
import collections
import json
import math
import statistics
import sys

TTA_TARGET = 1.5
PRECISION_POINTS = 0.3


def read_lines(path):
    rows = []
    try:
        f = open(path)
    except OSError as e:
        sys.exit(f"gpu_table.py: error: {path}: {e.strerror} (no run of this mode finished?)")
    with f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except ValueError as e:
                sys.exit(f"gpu_table.py: error: {path}: line {number} is not JSON: {e}")
    if not rows:
        sys.exit(f"gpu_table.py: error: {path}: no results")
    return rows


def ratio_text(value, target=None):
    if value is None:
        return "-"
    return f"{value:.2f}" + ("" if target is None else (" pass" if value >= target else " MISS"))


def best(median, who, config, precision):
    """The fastest layout of `who` for a peer configuration: (images/s, layout) or (None, "")."""
    found = [(v, k[3]) for k, v in median.items() if k[:3] == (who, config, precision)]
    return max(found) if found else (None, "")


# The process-wide switches both sides state (stalepipe bench --json, gpu_peer.py), as named
# in PyTorch: torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32,
# torch.backends.cudnn.allow_tf32.
SWITCHES = ("cudnn_benchmark", "matmul_tf32", "cudnn_tf32")
SWITCHES_TEXT = "cudnn.benchmark/matmul TF32/cuDNN TF32"


def switches_text(j):
    """ "off/off/off": the row's switches in SWITCHES' order ("?" where it states none)."""
    return "/".join(("on" if j[k] else "off") if k in j else "?" for k in SWITCHES)


def graphs_failure(j):
    """The one-line failure of a -graphs row whose partitions did not all run passes as CUDA
    graphs in the timed part; None when they did."""
    parts = j.get("partitions") or []
    idle = [str(k) for k, p in enumerate(parts, 1) if p.get("graphed_passes", 0) <= 0]
    if parts and not idle:
        return None
    which = f"partition(s) {', '.join(idle)}" if idle else "no partition"
    eager = sum(p.get("eager_passes", 0) for p in parts)
    return (f"FAIL: {j['config']} ({j.get('precision', '?')}): --cuda-graphs, but {which} ran no pass as a CUDA "
            f"graph in the timed part ({eager} eager pass(es))")


def mib(value):
    return f"{value / 2**20:.0f}" if value is not None else "-"


def speed_memory(rows):
    """Peak reserved GPU memory of each configuration with --cuda-graphs beside its eager one
    (medians over the rounds)."""
    peaks = collections.defaultdict(list)  # (config, precision) -> bytes per round
    for j in rows:
        if j["who"] == "stalepipe" and j.get("peak_reserved_bytes") is not None:
            peaks[(j["config"], j["precision"])].append(j["peak_reserved_bytes"])
    lines, result = [], []
    for (config, precision) in sorted(k for k in peaks if k[0].endswith("-graphs")):
        eager_values = peaks.get((config.removesuffix("-graphs"), precision))
        graphed = statistics.median(peaks[(config, precision)])
        eager = statistics.median(eager_values) if eager_values else None
        ratio = graphed / eager if eager else None
        result.append({"config": config, "precision": precision, "eager_peak_reserved_bytes": eager,
                       "graphs_peak_reserved_bytes": graphed, "ratio": ratio})
        lines.append(f"| {config.removesuffix('-graphs')} | {precision} | {mib(eager)} | {mib(graphed)} | {ratio_text(ratio)} |")
    if lines:
        lines = ["", "| configuration | precision | peak reserved, eager (MiB) | peak reserved, --cuda-graphs (MiB) "
                 "| graphs / eager |", "|---|---|---|---|---|"] + lines
    return lines, result


def speed_switches(rows, ours_keys, peer_of):
    """Each configuration's switches, ours and its peer's ("off/off/off; off/off/off"), and a
    failure line where they differ or vary between rounds."""
    seen = collections.defaultdict(set)  # (who-side, config, precision) -> switch texts
    for j in rows:
        side = "ours" if j["who"] == "stalepipe" else "peer"
        seen[(side, j["config"], j.get("precision", "?"))].add(switches_text(j))
    texts, failures = {}, []
    for (_, config, precision, _) in ours_keys:
        ours = seen[("ours", config, precision)]
        peer = seen.get(("peer", peer_of[config], precision), set())
        texts[(config, precision)] = f"{'|'.join(sorted(ours))}; {'|'.join(sorted(peer)) or '-'}"
        if peer and (len(ours | peer) > 1 or "?" in "".join(ours | peer)):
            failures.append(f"FAIL: {config} ({precision}): the switches ({SWITCHES_TEXT}) differ: stalepipe "
                            f"{', '.join(sorted(ours))}, PyTorch {', '.join(sorted(peer))}")
    return texts, failures


def speed_table(rows):
    rates = collections.defaultdict(list)  # (who, config, precision, layout) -> images/s per round
    peer_of, compile_seconds = {}, {}
    for j in rows:
        key = (j["who"], j["config"], j.get("precision", "?"), j.get("layout", ""))
        rates[key].append(j["images_per_second"])
        if j["who"] == "stalepipe":
            peer_of[j["config"]] = j.get("peer", j["config"].rsplit("-", 1)[0])
        if j.get("compile_seconds"):
            compile_seconds[key] = j["compile_seconds"]
    median = {k: statistics.median(v) for k, v in rates.items()}
    ours_keys = sorted(k for k in median if k[0] == "stalepipe")
    switches, failures = speed_switches(rows, ours_keys, peer_of)
    lines = ["| configuration | precision | stalepipe (img/s) | PyTorch eager, best layout (img/s) | ratio "
             f"| torch.compile, best layout (img/s) | ratio | rounds | {SWITCHES_TEXT}: stalepipe; PyTorch |",
             "|---|---|---|---|---|---|---|---|---|"]
    result = {"medians": [], "ratios": []}
    for (who, config, precision, layout), value in sorted(median.items()):
        result["medians"].append({"who": who, "config": config, "precision": precision, "layout": layout,
                                  "images_per_second": value, "rounds": len(rates[(who, config, precision, layout)])})
    for key in ours_keys:
        _, config, precision, _ = key
        rate, peer = median[key], peer_of[config]
        eager, eager_layout = best(median, "pytorch-eager", peer, precision)
        compiled, compiled_layout = best(median, "pytorch-compile", peer, precision)
        r_eager = rate / eager if eager else None
        r_compile = rate / compiled if compiled else None
        result["ratios"].append({"config": config, "precision": precision, "stalepipe": rate, "peer": peer,
                                 "eager_best": eager, "eager_layout": eager_layout, "ratio_eager": r_eager,
                                 "compile_best": compiled, "compile_layout": compiled_layout,
                                 "ratio_compile": r_compile, "switches": switches[(config, precision)]})
        lines.append(f"| {config} | {precision} | {rate:.0f} | "
                     + (f"{eager:.0f} ({eager_layout})" if eager else "-") + f" | {ratio_text(r_eager)} | "
                     + (f"{compiled:.0f} ({compiled_layout})" if compiled else "-")
                     + f" | {ratio_text(r_compile)} | {len(rates[key])} | {switches[(config, precision)]} |")
    for precision in sorted({k[2] for k in ours_keys}):
        one = median.get(("stalepipe", "resnet56-b128-1p", precision, ""))
        two = median.get(("stalepipe", "resnet56-b128-2p", precision, ""))
        if one and two:
            lines.append(f"\nTwo partitions on one GPU against one, ResNet-56 b128, {precision}: {two / one:.2f}x")
    for (_, config, precision, _) in ours_keys:
        plain = median.get(("stalepipe", config.removesuffix("-graphs"), precision, ""))
        if config.endswith("-graphs") and plain:
            graphed = median[("stalepipe", config, precision, "")]
            lines.append(f"--cuda-graphs against without, {config.removesuffix('-graphs')}, {precision}: "
                         f"{graphed / plain:.2f}x")
    memory_lines, result["memory"] = speed_memory(rows)
    lines += memory_lines
    skips = max((j.get("cudagraph_skips") or 0 for j in rows), default=0)
    if skips:
        lines.append(f"note: torch.compile fell back from CUDA graphs {skips} time(s) in the peer's process "
                     "(OUT/peer.log, with TORCH_LOGS=perf_hints, says why)")
    for (who, config, precision, layout), seconds in sorted(compile_seconds.items()):
        lines.append(f"torch.compile (reduce-overhead) of {config} {layout} {precision}: {seconds:.0f} s, once per "
                     "process, outside the rates")
    failures += [f for f in map(graphs_failure, (j for j in rows if j["who"] == "stalepipe"
                                                  and j["config"].endswith("-graphs"))) if f]
    result["failures"] = failures
    return lines + failures, result


def geometric_mean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def time_to(j, target):
    for t in j.get("time_to_target", []):
        if t["target"] == target and t["reached"]:
            return t["wall_seconds"]
    return None


def tta_table(rows):
    targets = [t["target"] for t in rows[0]["time_to_target"]]
    last = targets[-1]
    header = "| seed | run | precision | images/s | test accuracy (%) | " + " | ".join(f"to {t:g}%" for t in targets)
    lines = [header + f" | to {last:g}%: PyTorch's time / ours |", "|---" * (6 + len(targets)) + "|"]
    peers = {(j["seed"], j["precision"]): j for j in rows if j["who"] != "stalepipe"}
    ratios = collections.defaultdict(list)  # (config, precision) -> per-seed ratios
    for j in sorted(rows, key=lambda j: (j["precision"], j["seed"], j["who"] != "stalepipe", j["config"])):
        peer = peers.get((j["seed"], j["precision"]))
        ratio = None
        if j["who"] == "stalepipe" and peer and time_to(j, last) and time_to(peer, last):
            ratio = time_to(peer, last) / time_to(j, last)
            ratios[(j["config"], j["precision"])].append(ratio)
        times = " | ".join(f"{time_to(j, t):.1f} s" if time_to(j, t) is not None else "not reached" for t in targets)
        rate = f"{j['images_per_second']:.0f}" if j.get("images_per_second") else "-"
        lines.append(f"| {j['seed']} | {j['config']} | {j['precision']} | {rate} | {100 * j['test_accuracy']:.2f} | "
                     f"{times} | {ratio_text(ratio)} |")
    result = {"target": last, "ratios": []}
    lines.append("")
    for (config, precision), values in sorted(ratios.items()):
        g = geometric_mean(values)
        result["ratios"].append({"config": config, "precision": precision, "per_seed": values, "geometric_mean": g})
        lines.append(f"{config} ({precision}) reached {last:g}% {g:.2f}x sooner than the PyTorch eager loop "
                     f"(geometric mean over {len(values)} seed(s); target >= {TTA_TARGET}): "
                     + ("pass" if g >= TTA_TARGET else "MISS"))
    if not ratios:
        lines.append(f"No pair of a stalepipe run and the peer on one seed where both reached {last:g}%.")
    return lines, result


def precision_table(rows):
    by = {(j["seed"], j["precision"]): j for j in rows if j["who"] == "stalepipe"}
    seeds = sorted({s for s, p in by if (s, "fp32") in by and (s, "bf16") in by})
    lines = ["| seed | fp32 test accuracy (%) | bf16 test accuracy (%) | difference (points) "
             "| fp32 images/s | bf16 images/s | bf16 / fp32 speed |", "|---|---|---|---|---|---|---|"]
    result = {"seeds": [], "target_points": PRECISION_POINTS}
    for s in seeds:
        fp32, bf16 = by[(s, "fp32")], by[(s, "bf16")]
        diff = 100 * (bf16["test_accuracy"] - fp32["test_accuracy"])
        speed = bf16["images_per_second"] / fp32["images_per_second"]
        result["seeds"].append({"seed": s, "fp32": fp32["test_accuracy"], "bf16": bf16["test_accuracy"],
                                "difference_points": diff, "fp32_images_per_second": fp32["images_per_second"],
                                "bf16_images_per_second": bf16["images_per_second"], "speed_ratio": speed})
        lines.append(f"| {s} | {100 * fp32['test_accuracy']:.2f} | {100 * bf16['test_accuracy']:.2f} | {diff:+.2f} | "
                     f"{fp32['images_per_second']:.0f} | {bf16['images_per_second']:.0f} | {speed:.2f} |")
    if not seeds:
        lines.append("\nNo seed has both an fp32 and a bf16 run.")
        return lines, result
    mean = statistics.mean(e["difference_points"] for e in result["seeds"])
    result["mean_difference_points"] = mean
    worst = max(abs(e["difference_points"]) for e in result["seeds"])
    lines.append(f"\nbf16 - fp32, mean over {len(seeds)} seed(s): {mean:+.2f} points (target: within "
                 f"{PRECISION_POINTS}): " + ("pass" if abs(mean) <= PRECISION_POINTS else "MISS")
                 + f"; largest single-seed difference {worst:.2f} points")
    return lines, result


def precision_warnings(rows):
    """Where our run's config.json does not record the precision the row says it ran at."""
    lines = []
    for j in rows:
        if j["who"] == "stalepipe" and j.get("config_precision") != j.get("precision"):
            seed = f" (seed {j['seed']})" if "seed" in j else ""
            lines.append(f"warning: {j['config']}{seed} asked for {j.get('precision')} but its "
                         f"config.json records {j.get('config_precision')}")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("table", choices=["speed", "tta", "precision"])
    ap.add_argument("jsonl", help="the mode's JSON lines")
    ap.add_argument("--json", help="also write the table's figures and every row here")
    args = ap.parse_args()
    rows = read_lines(args.jsonl)
    try:
        lines, result = {"speed": speed_table, "tta": tta_table, "precision": precision_table}[args.table](rows)
    except (KeyError, TypeError, ZeroDivisionError) as e:
        sys.exit(f"gpu_table.py: error: {args.jsonl}: a row lacks what the {args.table} table needs ({e!r})")
    print("\n".join(lines + precision_warnings(rows)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, **result}, f, indent=1)
            f.write("\n")
    if result.get("failures"):
        sys.exit(1)


if __name__ == "__main__":
    main()
