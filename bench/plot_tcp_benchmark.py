#!/usr/bin/python3
"""Plots tcp_benchmark driver results (--json) as grouped bars.

One group per (GSO mode, MTU); in each group a bar for netstack as the
sender and one as the receiver, labelled with its ratio to the kernel
baseline of the same MTU. The kernel-to-kernel baseline is drawn as a
dashed line across its MTU's groups. Several JSON files (e.g. repeated
runs) are merged: rows with the same mode, MTU, role and link are averaged.

Uses Debian's python3-matplotlib (tools/dev/install-deps), hence the
explicit /usr/bin/python3.

  bench/plot_tcp_benchmark.py -o tcp.png run1.json [run2.json ...]
"""
import argparse
import collections
import json
import statistics
import sys

import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt  # noqa: E402

MODE_ORDER = {"off": 0, "sw": 1, "host": 2}
ROLE_COLORS = {"sender": "tab:blue", "receiver": "tab:orange"}


def load_rows(paths):
    rows = []
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        if not isinstance(data, list):
            sys.exit(f"{path}: expected a JSON array (tcp_benchmark --json)")
        rows.extend(r for r in data if "error" not in r)
    return rows


def average(rows):
    """{(mode, mtu, role, link): mean gbps}, failed rows left out."""
    groups = collections.defaultdict(list)
    for r in rows:
        key = (r["mode"], r["mtu"], r["netstack_role"], r.get("link", ""))
        groups[key].append(r["gbps"])
    return {k: statistics.mean(v) for k, v in groups.items()}


def plot(means, title, out):
    kernel = {mtu: g for (mode, mtu, _, _), g in means.items()
              if mode == "kernel"}
    groups = sorted({(mode, mtu, link) for (mode, mtu, _, link) in means
                     if mode != "kernel"},
                    key=lambda g: (g[1], MODE_ORDER.get(g[0], 9), g[2]))
    if not groups and not kernel:
        sys.exit("no successful measurements to plot")
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(groups) + 2), 4.8))
    width = 0.38
    for i, (mode, mtu, link) in enumerate(groups):
        for j, role in enumerate(("sender", "receiver")):
            gbps = means.get((mode, mtu, role, link))
            if gbps is None:
                continue
            x = i + (j - 0.5) * width
            ax.bar(x, gbps, width, color=ROLE_COLORS[role],
                   label=f"netstack {role}")
            if kernel.get(mtu):
                ax.annotate(f"{gbps / kernel[mtu]:.2f}x", (x, gbps),
                            ha="center", va="bottom", fontsize=8)
    draw_baselines(ax, groups, kernel)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([f"{m} GSO\nMTU {mtu}" + (f"\n{link}" if link else "")
                        for m, mtu, link in groups])
    ax.set_ylabel("Gbit/s")
    ax.set_title(title)
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))  # one legend entry per label
    ax.legend(unique.values(), unique.keys(), fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def draw_baselines(ax, groups, kernel):
    """A dashed line per MTU at the kernel's Gbit/s over that MTU's groups."""
    for mtu, gbps in sorted(kernel.items()):
        xs = [i for i, g in enumerate(groups) if g[1] == mtu]
        lo, hi = (min(xs) - 0.45, max(xs) + 0.45) if xs else (-0.45, 0.45)
        ax.hlines(gbps, lo, hi, colors="black", linestyles="dashed",
                  label="kernel -> kernel")
        ax.annotate(f"kernel {gbps:.1f} (MTU {mtu})", (lo, gbps),
                    ha="left", va="bottom", fontsize=8)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("json", nargs="+", help="tcp_benchmark --json output")
    parser.add_argument("-o", "--output", default="tcp_benchmark.png")
    parser.add_argument("--title",
                        default="tcp_benchmark: netstack vs kernel over veth")
    args = parser.parse_args()
    plot(average(load_rows(args.json)), args.title, args.output)
    print(args.output)


if __name__ == "__main__":
    main()
