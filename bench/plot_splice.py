#!/usr/bin/python3
"""Plots and tabulates //bench:splice_benchmark JSON output.

Usage:
  splice_benchmark --benchmark_format=json > splice.json
  /usr/bin/python3 bench/plot_splice.py splice.json --out-dir docs/img [--markdown] [--ci]
      [--title-suffix TEXT] [--prefix splice]

Writes one PNG per case (<prefix>_<case>.png: MB/s and relay CPU seconds
per GB against the chunk size, one line per mode) and prints, per case, a
table of chunk x mode, the ratios the issue's goals are about (each from
this one run) and the crossover chunk sizes. With --benchmark_repetitions,
every figure is the median of the repetitions (aggregate rows are ignored
and recomputed from the iteration rows); --ci adds each goal ratio's 95%
bootstrap interval, which says whether the run can tell it from the goal.
"""

import argparse
import collections
import json
import math
import os
import random
import statistics
import sys

MODES = ("splice", "copy", "auto")
CASES = ("tcp_to_tcp", "unix_to_tcp", "tcp_to_unix")
METRICS = ("MBps", "cpu_s_per_gb", "real_time", "writer_cpu_s_per_gb",
           "reader_cpu_s_per_gb", "splice_frac", "syscalls_per_op")


def load(path):
    """{(case, mode, chunk): {metric: median}} and the list of errors."""
    with open(path) as f:
        data = json.load(f)
    samples = collections.defaultdict(lambda: collections.defaultdict(list))
    errors = []
    for b in data["benchmarks"]:
        if b.get("run_type", "iteration") != "iteration":
            continue
        name = b.get("run_name", b["name"])
        parts = name.split("/")
        if len(parts) != 4 or parts[0] != "BM_Relay":
            continue
        key = (parts[1], parts[2], int(parts[3]))
        if b.get("error_occurred"):
            errors.append((name, b.get("error_message", "")))
            continue
        for m in METRICS:
            if m in b:
                samples[key][m].append(float(b[m]))
    result = {}
    for key, metrics in samples.items():
        result[key] = {m: statistics.median(v) for m, v in metrics.items()}
        result[key]["n"] = len(metrics["MBps"])
        result[key]["samples"] = metrics
    return data.get("context", {}), result, errors


def ratio_ci(num, den, rounds=2000, seed=1):
    """Median(num) / median(den) with a 95% bootstrap interval.

    Each group is resampled on its own (the runs of two benchmarks are not
    paired), so the interval says how far the ratio of medians could move
    with other draws of the same noise. Seeded: the output is reproducible.
    """
    rng = random.Random(seed)
    point = statistics.median(num) / statistics.median(den)
    if len(num) < 3 or len(den) < 3:
        return point, math.nan, math.nan
    draws = sorted(
        statistics.median(rng.choices(num, k=len(num)))
        / statistics.median(rng.choices(den, k=len(den)))
        for _ in range(rounds))
    return point, draws[int(0.025 * rounds)], draws[int(0.975 * rounds) - 1]


def report_ci(case, results, out):
    """Per chunk: auto/copy MB/s and splice/copy CPU, with 95% intervals."""
    chunks = sorted({k[2] for k in results if k[0] == case})
    print(f"\n#### {case}: ratios with 95% bootstrap intervals\n", file=out)
    print("| chunk | n | auto/copy MB/s | splice/copy MB/s | "
          "splice/copy CPU per GB | auto/copy CPU per GB |", file=out)
    print("|---:|---:|---|---|---|---|", file=out)

    def cell(a, b, metric):
        ka, kb = (case, a, c), (case, b, c)
        if ka not in results or kb not in results:
            return "-"
        p, lo, hi = ratio_ci(results[ka]["samples"][metric],
                             results[kb]["samples"][metric])
        return f"{p:.2f} [{lo:.2f}, {hi:.2f}]"

    for c in chunks:
        n = min(results.get((case, m, c), {}).get("n", 0) for m in MODES
                if (case, m, c) in results)
        print(f"| {chunk_label(c)} | {n} | {cell('auto', 'copy', 'MBps')} | "
              f"{cell('splice', 'copy', 'MBps')} | "
              f"{cell('splice', 'copy', 'cpu_s_per_gb')} | "
              f"{cell('auto', 'copy', 'cpu_s_per_gb')} |", file=out)


def quartile_range(values):
    """(25th, 75th) percentile, or None for fewer than 2 values."""
    if len(values) < 2:
        return None
    q = statistics.quantiles(values, n=4)
    return q[0], q[2]


def chunk_label(c):
    return f"{c // 1048576} MiB" if c >= 1048576 else f"{c // 1024} KiB"


def crossover(chunks, better):
    """Smallest chunk from which better(chunk) holds at every larger chunk."""
    found = None
    for c in reversed(chunks):
        if better(c):
            found = c
        else:
            break
    return found


def report_case(case, results, out):
    chunks = sorted({k[2] for k in results if k[0] == case})
    if not chunks:
        return
    get = lambda mode, c, m: results.get((case, mode, c), {}).get(m, math.nan)
    print(f"\n#### {case}\n", file=out)
    print("| chunk | MB/s splice | MB/s copy | MB/s auto | "
          "CPU s/GB splice | CPU s/GB copy | CPU s/GB auto | "
          "auto/copy MB/s | splice/copy CPU |", file=out)
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|", file=out)
    for c in chunks:
        s, cp, a = (get(m, c, "MBps") for m in MODES)
        cs, cc, ca = (get(m, c, "cpu_s_per_gb") for m in MODES)
        print(f"| {chunk_label(c)} | {s:.0f} | {cp:.0f} | {a:.0f} | "
              f"{cs:.3f} | {cc:.3f} | {ca:.3f} | {a / cp:.2f} | "
              f"{cs / cc:.2f} |", file=out)

    big = [c for c in chunks if c >= 65536]
    cpu_ratio = [get("splice", c, "cpu_s_per_gb") / get("copy", c, "cpu_s_per_gb")
                 for c in big]
    auto_all = [(get("auto", c, "MBps") / get("copy", c, "MBps"), c)
                for c in chunks]
    auto_big = [(r, c) for r, c in auto_all if c >= 65536]
    worst_cpu = max(zip(cpu_ratio, big))
    worst_auto = min(auto_all)
    worst_auto_big = min(auto_big)
    print("", file=out)
    print(f"- splice/copy CPU per GB at >= 64 KiB: worst "
          f"{worst_cpu[0]:.2f} ({chunk_label(worst_cpu[1])}) -> goal <= 0.5: "
          f"{'met' if worst_cpu[0] <= 0.5 else 'MISSED'}", file=out)
    print(f"- auto/copy MB/s, all chunks: worst {worst_auto[0]:.2f} "
          f"({chunk_label(worst_auto[1])}) -> goal >= 0.95: "
          f"{'met' if worst_auto[0] >= 0.95 else 'MISSED'}", file=out)
    print(f"- auto/copy MB/s at >= 64 KiB: worst {worst_auto_big[0]:.2f} "
          f"({chunk_label(worst_auto_big[1])}) -> goal >= 1.0: "
          f"{'met' if worst_auto_big[0] >= 1.0 else 'MISSED'}", file=out)
    x_speed = crossover(chunks, lambda c: get("splice", c, "MBps")
                        > get("copy", c, "MBps"))
    x_cpu = crossover(chunks, lambda c: get("splice", c, "cpu_s_per_gb")
                      < get("copy", c, "cpu_s_per_gb"))
    fmt = lambda c: chunk_label(c) if c else "none"
    print(f"- crossover (splice beats copy from this chunk up): MB/s "
          f"{fmt(x_speed)}, CPU per GB {fmt(x_cpu)}", file=out)


def plot_case(case, results, path, title_suffix):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    chunks = sorted({k[2] for k in results if k[0] == case})
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    styles = {"splice": ("tab:blue", "o"), "copy": ("tab:orange", "s"),
              "auto": ("tab:green", "^")}
    for mode in MODES:
        xs = [c for c in chunks if (case, mode, c) in results]
        if not xs:
            continue
        color, marker = styles[mode]
        for ax, metric in ((ax1, "MBps"), (ax2, "cpu_s_per_gb")):
            ax.plot(xs, [results[(case, mode, c)][metric] for c in xs],
                    color=color, marker=marker, label=mode)
            # The spread of the repetitions: interquartile range.
            quartiles = [quartile_range(results[(case, mode, c)]["samples"]
                                        [metric]) for c in xs]
            if all(q is not None for q in quartiles):
                ax.fill_between(xs, [q[0] for q in quartiles],
                                [q[1] for q in quartiles], color=color,
                                alpha=0.15, linewidth=0)
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xticks(chunks)
        ax.set_xticklabels([chunk_label(c).replace(" ", "\n") for c in chunks],
                           fontsize=7)
        ax.set_xlabel("chunk size (one op)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    ax1.set_ylabel("MB/s (wall)")
    ax1.set_ylim(bottom=0)
    ax1.set_title("throughput")
    ax2.set_ylabel("relay CPU s per GB (log)")
    ax2.set_yscale("log")
    ax2.yaxis.set_major_locator(
        matplotlib.ticker.FixedLocator([0.05, 0.1, 0.2, 0.5, 1, 2, 5]))
    ax2.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax2.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax2.set_title("relay service demand (lower is better)")
    fig.text(0.5, 0.005, "lines: medians; bands: interquartile range of the "
             "repetitions", ha="center", fontsize=8, color="gray")
    fig.suptitle(f"BM_Relay/{case}{title_suffix}")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("json")
    p.add_argument("--out-dir", default=None, help="write PNGs here")
    p.add_argument("--prefix", default="splice")
    p.add_argument("--title-suffix", default="")
    p.add_argument("--markdown", action="store_true",
                   help="print the per-case tables and goal checks")
    p.add_argument("--ci", action="store_true",
                   help="print the goal ratios with 95%% bootstrap intervals")
    args = p.parse_args()

    context, results, errors = load(args.json)
    for name, msg in errors:
        print(f"error: {name}: {msg}", file=sys.stderr)
    if args.markdown:
        reps = sorted({v["n"] for v in results.values()})
        print(f"<!-- {args.json}: {context.get('date', '?')}, "
              f"repetitions per benchmark: {reps} (medians) -->")
        for case in CASES:
            report_case(case, results, sys.stdout)
    if args.ci:
        for case in CASES:
            if any(k[0] == case for k in results):
                report_ci(case, results, sys.stdout)
    if args.out_dir:
        os.makedirs(args.out_dir, exist_ok=True)
        for case in CASES:
            if any(k[0] == case for k in results):
                path = os.path.join(args.out_dir, f"{args.prefix}_{case}.png")
                plot_case(case, results, path, args.title_suffix)
                print(f"wrote {path}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
