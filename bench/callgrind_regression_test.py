#!/usr/bin/env python3
"""Instruction counts from callgrind, against a baseline for this machine.

The figures of bench/callgrind_tx.sh and bench/callgrind_rx.sh as a test:
  - instructions per MiB sent over TCP between two in-process stacks, with
    GSO off and with software GSO (bench/tcp_tx_callgrind);
  - instructions per received ICMP echo request, IPv4 and IPv6
    (bench/stack_rx_callgrind);
  - with --udp, instructions per 1,400-byte UDP datagram through the UDP
    flow table, guest to host (one datagram a frame, and USO super-frames)
    and host to guest (one datagram a send, UDP_SEGMENT sends, and those
    to a link with USO), as the Backend runs it (bench/udp_callgrind,
    bench/callgrind_udp.sh). That binary also fails when its measured
    rounds allocate.
Each is the difference of two runs of different sizes, divided by the
difference, so set-up cancels out. The counts are nearly exact (a few
instructions apart between runs) but depend on the CPU, since glibc picks
its memcpy by CPU features and netstack picks its checksum loop the same
way, and on the compiler and the compilation mode. So a baseline is kept
per key: the CPU's model name (/proc/cpuinfo, as lscpu prints it), the
glibc memcpy variant the run used (named in callgrind's output), the
compiler that built the binary and the compilation mode (opt: BUILD.bazel
builds the binaries optimised whatever the build's mode).

A count more than TOLERANCE above its baseline fails. One more than
TOLERANCE below passes with a note to lower the baseline. With no baseline
for this machine's key the test prints the counts and the lines to add,
and passes, saying that it checked nothing. Record this machine's lines:
  bazel run //bench:callgrind_regression_test -- --record
(they replace the lines of the same key in bench/callgrind_baselines.txt).

A binary built with AddressSanitizer (--config=asan) cannot run under
valgrind: the test then passes and says so.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

TOLERANCE = 0.03
BASELINES = "bench/callgrind_baselines.txt"

# (measure, binary argument list for the small run, for the large run,
#  units between them, unit name). The sizes are small enough that a
# fastbuild binary under callgrind takes a few seconds per run.
TX_SMALL, TX_LARGE = 4, 12  # MiB
RX_SMALL, RX_LARGE = 1024, 5120  # packets
UDP_SMALL, UDP_LARGE = 1024, 5120  # datagrams


def measures(tx, rx, udp=None):
    span_tx = TX_LARGE - TX_SMALL
    span_rx = RX_LARGE - RX_SMALL
    return [
        (f"tx GSO off, per MiB ({TX_SMALL}..{TX_LARGE} MiB)", tx,
         ["off", str(TX_SMALL)], ["off", str(TX_LARGE)], span_tx),
        (f"tx GSO software, per MiB ({TX_SMALL}..{TX_LARGE} MiB)", tx,
         ["sw", str(TX_SMALL)], ["sw", str(TX_LARGE)], span_tx),
        (f"rx IPv4 echo, per packet ({RX_SMALL}..{RX_LARGE})", rx,
         ["4", str(RX_SMALL)], ["4", str(RX_LARGE)], span_rx),
        (f"rx IPv6 echo, per packet ({RX_SMALL}..{RX_LARGE})", rx,
         ["6", str(RX_SMALL)], ["6", str(RX_LARGE)], span_rx),
    ] + ([] if udp is None else [
        (f"udp {name}, per datagram ({UDP_SMALL}..{UDP_LARGE})", udp,
         [mode, "coalesce", str(UDP_SMALL)],
         [mode, "coalesce", str(UDP_LARGE)], UDP_LARGE - UDP_SMALL)
        for name, mode in (("guest to host", "g2h"),
                           ("guest to host USO", "g2h-uso"),
                           ("host to guest", "h2g"),
                           ("host to guest GSO", "h2g-gso"),
                           ("host to guest USO", "h2g-uso"))])


MEMCPY_RE = re.compile(rb"^c?fn=\(\d+\) (__mem(?:cpy|move)_[a-z0-9_]+)$",
                       re.M)


def callgrind(binary, args, tmp):
    """(total instructions, set of glibc memcpy variants seen)."""
    out = os.path.join(tmp, "callgrind.out")
    p = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
         binary] + args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if p.returncode != 0:
        sys.exit(f"FAIL: valgrind {binary} {' '.join(args)} exited "
                 f"{p.returncode}:\n{p.stderr.decode(errors='replace')[-2000:]}")
    with open(out, "rb") as f:
        data = f.read()
    os.unlink(out)
    m = re.search(rb"^summary: (\d+)", data, re.M)
    if m is None:
        sys.exit(f"FAIL: no summary line in callgrind's output for {binary}")
    # __memcpy_chk_avx_... (a _FORTIFY_SOURCE caller) is the same variant
    # as __memcpy_avx_...: one name, or an added caller would change the key.
    variants = {v.decode().replace("_chk", "")
                for v in MEMCPY_RE.findall(data) if not v.endswith(b"_chk")}
    return int(m.group(1)), variants


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


def compiler(binary):
    """The compiler named in the binary's .comment strings: "clang N" if
    any object says clang (glibc's own objects say GCC), else "GCC N"."""
    with open(binary, "rb") as f:
        data = f.read()
    m = re.search(rb"clang version (\d+[.\d]*)", data)
    if m:
        return f"clang {m.group(1).decode()}"
    m = re.search(rb"GCC: \([^)]*\) (\d+[.\d]*)", data)
    if m:
        return f"GCC {m.group(1).decode()}"
    return "unknown compiler"


def load_baselines(path):
    """{(model, memcpy, compiler, mode, measure): count}"""
    table = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            fields = [x.strip() for x in line.split("|")]
            if len(fields) != 6 or not fields[5].isdigit():
                sys.exit(f"FAIL: {path}:{n}: want 6 fields separated by '|', "
                         f"the last a count: {line!r}")
            table[tuple(fields[:5])] = int(fields[5])
    return table


def record(path, lines, key_prefix):
    """Replaces the lines of key_prefix (the machine's key) by `lines`."""
    with open(path) as f:
        old = f.read().splitlines()
    kept = [l for l in old
            if l.startswith("#") or not l.strip() or
            tuple(x.strip() for x in l.split("|")[:4]) != key_prefix]
    with open(path, "w") as f:
        f.write("\n".join(kept + lines) + "\n")
    print(f"recorded {len(lines)} lines in {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tx", required=True, help="bench/tcp_tx_callgrind")
    ap.add_argument("--rx", required=True, help="bench/stack_rx_callgrind")
    ap.add_argument("--udp", help="bench/udp_callgrind")
    ap.add_argument("--mode", default="opt",
                    help="the binaries' compilation mode (BUILD.bazel's "
                    "opt_binary makes them opt)")
    ap.add_argument("--baselines", default=BASELINES)
    ap.add_argument("--record", action="store_true",
                    help="write this machine's counts into the workspace's "
                    "baseline table (under bazel run)")
    a = ap.parse_args()

    for binary in [a.tx, a.rx] + ([a.udp] if a.udp else []):
        with open(binary, "rb") as f:
            if b"__asan_init" in f.read():
                print(f"SKIPPED: {binary} is built with AddressSanitizer, "
                      "which cannot run under valgrind; nothing checked")
                return 0
    if subprocess.run(["valgrind", "--version"], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode != 0:
        sys.exit("FAIL: valgrind is not installed (tools/dev/install-deps "
                 "installs it)")

    model, comp = cpu_model(), compiler(a.tx)
    results = []  # (measure, per unit, small, large)
    variants = set()
    with tempfile.TemporaryDirectory() as tmp:
        for name, binary, small, large, span in measures(a.tx, a.rx,
                                                         a.udp):
            ir_small, v1 = callgrind(binary, small, tmp)
            ir_large, v2 = callgrind(binary, large, tmp)
            variants |= v1 | v2
            results.append((name, (ir_large - ir_small) // span, ir_small,
                            ir_large))
    memcpy = "+".join(sorted(variants)) or "no memcpy variant seen"
    key = (model, memcpy, comp, a.mode)
    print(f"CPU: {model}; glibc memcpy: {memcpy}; compiler: {comp}; "
          f"compilation mode: {a.mode}")
    lines = [" | ".join(key + (name, str(per))) for name, per, _, _ in results]

    if a.record:
        ws = os.environ.get("BUILD_WORKSPACE_DIRECTORY")
        if not ws:
            sys.exit("FAIL: --record writes the workspace's table: run it "
                     "with bazel run")
        record(os.path.join(ws, BASELINES), lines, key)
        return 0

    table = load_baselines(a.baselines)
    failed = []
    unknown = []
    for (name, per, small, large), line in zip(results, lines):
        base = table.get(key + (name,))
        detail = f"(Ir {small:,} and {large:,})"
        if base is None:
            unknown.append(line)
            print(f"  {name}: {per:,} {detail}; no baseline")
            continue
        ratio = per / base
        verdict = "ok"
        if ratio > 1 + TOLERANCE:
            verdict = f"REGRESSION: more than {TOLERANCE:.0%} above"
            failed.append(name)
        elif ratio < 1 - TOLERANCE:
            verdict = (f"more than {TOLERANCE:.0%} below: lower the baseline "
                       "(--record)")
        print(f"  {name}: {per:,} against {base:,} ({ratio - 1:+.2%}) "
              f"{detail}: {verdict}")
    if unknown:
        print(f"SKIPPED (in part): no baseline for this machine's key in "
              f"{a.baselines}; these counts were checked against nothing. "
              "Lines to add (or bazel run ... -- --record):")
        for line in unknown:
            print("  " + line)
    if failed:
        print(f"FAIL: {len(failed)} counts rose more than {TOLERANCE:.0%}: "
              f"{', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
