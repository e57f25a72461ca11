#!/usr/bin/env python3
"""A SYN flood from the guest against an established transfer (issue 15
part 2): what the transfer keeps.

  backend:  G (kernel, TAP) -- netstackd --backend (in H) -- H's sockets
            flood_peer.py in G sends SYNs from its own 4-tuples at a
            closed port of H (each a host connect(), refused) or an open
            one (scale_peer.py's echo server: each a host connection until
            --max-tcp-flows, then a RST at once)
  stack:    the kernel -- TAP -- netstackd in host mode (--discard-port),
            the kernel flooding the stack's own listener (SYN cookies)

Per case: one established TCP connection, iperf3 (backend; CUBIC) or a
kernel sender into the discard port (stack), runs 1.5 s alone, then
--seconds while the flood runs over and over (its SYN count and rate
printed); its rate before and during come from its own quarter-second
samples (flood_util.iperf3_under, kernel_sender_under). --repeat times;
medians and the ratio during/before.
Backend transfers run both ways: the guest sending (its frames share the
TAP's transmit ring with the flood) and -R (the host sending; only the
guest's ACKs share it). --rates adds floods paced at those SYNs per
second. Also printed: netstackd's VmHWM after each case. --variants runs
every case once per set of netstackd flags, in the same run, e.g.
--variants "now=;before=--tap-queues 1 --busy-syn-rate 0" for the
defaults against one TAP queue and no SYN shedding.

Every namespace is made here, with names carrying our pid, and removed at
exit; H has no default route (asserted before netstackd starts). Needs
root, iperf3 and an opt build of netstackd:
bazel build --config=opt //tools/netstackd.

The case "cpu" is the control: the same transfer while a process keeps
one core busy and sends nothing (the flooder takes a core too; on two
cores that alone costs the transfer about a third).

Usage: bench/flood_benchmark.py [--netstackd PATH] [--seconds 4]
           [--repeat 2] [--rates 100000,30000] [--cases cpu,closed,open,stack]
           [--variants NAME=FLAGS;NAME=FLAGS...]
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

ap = argparse.ArgumentParser(
    description="What an established transfer keeps while the guest floods "
    "SYNs (issue 15). Needs root, iperf3 and an opt build of netstackd; "
    "every namespace is made here and removed at exit.")
ap.add_argument("--netstackd", default=os.path.join(
    HERE, "..", "bazel-out", "k8-optopt", "bin", "tools", "netstackd",
    "netstackd"), help="the netstackd binary (default: the opt build's)")
ap.add_argument("--seconds", type=float, default=4,
                help="seconds of each transfer under the flood (default 4)")
ap.add_argument("--repeat", type=int, default=2,
                help="repetitions of each case; the table has medians "
                "(default 2)")
ap.add_argument("--rates", default="100000,30000",
                help="comma-separated SYN/s for paced floods, besides the "
                "full-rate one; \"\" for full rate only "
                "(default 100000,30000)")
ap.add_argument("--cases", default="cpu,closed,open,stack",
                help="cpu (a core kept busy, no flood: the control), closed "
                "and open (a closed or open port of H through the backend), "
                "denied (netstackd with --allow for the transfer's address "
                "only and a --flow-log: every SYN refused by the egress "
                "policy, issue #33), stack (netstackd's own listener) "
                "(default: cpu,closed,open,stack)")
ap.add_argument("--syns", type=int, default=100000,
                help="distinct SYNs (4-tuples) built once and sent over "
                "and over (default 100000)")
ap.add_argument("--variants", default="default=",
                help="NAME=NETSTACKD FLAGS;... each runs every case "
                "(default: netstackd's defaults only)")
ARGS = ap.parse_args()
os.environ["NETSTACKD"] = os.path.abspath(ARGS.netstackd)

from tests.backend import flood_util as fu  # noqa: E402
from tests.backend.backend_topology import G4, H4, BackendTopology  # noqa
from tests.interop import interop_util as iu  # noqa: E402

H4B = "198.51.100.2"
PORTS = {"closed": 7099, "open": 7100, "denied": 7100}


def flooded(ns, flood_args, rate, measure):
    """measure(start_flood) ARGS.repeat times: an established transfer's
    rate before and during the flood."""
    alone, during, floods = [], [], []
    extra = ("--rate", rate) if rate else ()
    for _ in range(ARGS.repeat):
        a, d, bg = measure(lambda: fu.Background(
            ns, *flood_args, "--seconds", ARGS.seconds + 0.5, *extra))
        alone.append(a)
        during.append(d)
        floods.append(bg.join())
        time.sleep(1.0)
    return alone, during, floods


def row(label, alone, during, floods, hwm):
    a, d = statistics.median(alone), statistics.median(during)
    rate = statistics.median(f["rate"] for f in floods)
    sent = statistics.median(f["sent"] for f in floods)
    print(f"| {VARIANT} | {label} | {rate:,.0f} | {sent:,.0f} | {a / 1e9:.2f} | "
          f"{d / 1e9:.2f} | {d / a:.2f} | {hwm / 1024:.1f} |", flush=True)


VARIANT = ""


def backend_cases(cases, rates, flags, denied=False):
    """The backend's cases; `denied`: only the denied case, with netstackd
    started with an allowlist that admits the transfer's address (H4) and
    nothing else, and a flow log."""
    topo = BackendTopology()
    logdir = tempfile.mkdtemp(prefix="nst-flood-log-") if denied else None
    nd = None
    try:
        if denied:
            log = os.path.join(logdir, "flows.jsonl")
            flags = list(flags) + ["--allow", f"{H4}/32", "--flow-log", log]
        topo.setup()
        h = topo.h
        iu.run("ip", "-n", h, "addr", "add", f"{H4B}/24", "dev", "hveth")
        iu.run(*topo.in_ns(h, "sysctl", "-q", "-w", "net.core.somaxconn=16384",
                           "net.ipv4.tcp_max_syn_backlog=16384"))
        topo.spawn(h, sys.executable, iu.runfile("tests/backend/scale_peer.py"),
                   "server", str(PORTS["open"]), H4, H4B)
        fu.start_iperf3_server(topo)
        nd = topo.netstackd(*flags)
        topo.configure_guest()
        pid = fu.netstackd_pid(nd)
        mac = fu.gateway_mac(topo)
        if "cpu" in cases and not denied:
            # The control: one core taken by a loop that sends nothing.
            for reverse in (False, True):
                alone, during, floods = [], [], []
                for _ in range(ARGS.repeat):
                    a, d, loop = fu.iperf3_under(
                        topo, H4, ARGS.seconds,
                        lambda: fu.CpuLoop(ARGS.seconds + 0.5),
                        reverse=reverse)
                    alone.append(a)
                    during.append(d)
                    floods.append(loop.join())
                    time.sleep(1.0)
                row(f"backend, a CPU loop, no flood, "
                    f"{'H to G' if reverse else 'G to H'}", alone, during,
                    floods, fu.memory_kib(pid)["VmHWM"])
        for case in cases:
            if case not in PORTS or (case == "denied") != denied:
                continue
            # denied: the SYNs go to H4B and .3, which the policy refuses
            # (each a RST from netstackd, no host socket, a flow-log line
            # while the log's rate cap lasts).
            dsts = f"{H4B},198.51.100.3" if denied else f"{H4},{H4B}"
            args = ("syn", "nsttap", mac, G4, H4, PORTS[case], ARGS.syns,
                    "--dsts", dsts)
            for reverse in (False, True):
                for rate in [0] + rates:
                    alone, during, floods = flooded(
                        topo.g, args, rate,
                        lambda start, reverse=reverse: fu.iperf3_under(
                            topo, H4, ARGS.seconds, start, reverse=reverse))
                    label = (f"backend, {case} port, "
                             f"{'H to G' if reverse else 'G to H'}, "
                             f"{'paced' if rate else 'full rate'}")
                    row(label, alone, during, floods,
                        fu.memory_kib(pid)["VmHWM"])
        nd.stop()
        nd.close()
        if denied:
            size = sum(os.path.getsize(p) for p in (log, log + ".1")
                       if os.path.exists(p))
            with open(log) as f:
                refused = sum('"refused"' in l for l in f)
            print(f"  the flow log after the denied case: {size:,} bytes in "
                  f"FILE and FILE.1 (cap: 2 x --flow-log-max-bytes); "
                  f"{refused} refused lines in FILE", flush=True)
    finally:
        # netstackd is not one of topo's processes: a case that raised
        # would leave it running in H.
        if nd is not None:
            nd.close()
        topo.close()
        if logdir:
            shutil.rmtree(logdir, ignore_errors=True)


def stack_case(rates, extra):
    topo = iu.Topology("tap", "nstfb")
    net4 = "10.87.0"
    nd = None
    try:
        flags = topo.setup(net4, "fd00:87")
        ns = topo.peer_ns
        iu.run("ip", "-n", ns, "addr", "add", f"{net4}.3/24", "dev", "nsttap")
        nd = iu.Netstackd(flags + ["--discard-port", "9"] + extra)
        nd.start()
        pid = fu.netstackd_pid(nd)
        mac = fu.fixed_neighbour(ns, f"{net4}.2")

        def measure(start):
            return fu.kernel_sender_under(ns, f"{net4}.2", 9, ARGS.seconds,
                                          start)

        args = ("syn", "nsttap", mac, f"{net4}.1", f"{net4}.2", 9, ARGS.syns,
                "--srcs", f"{net4}.1,{net4}.3")
        for rate in [0] + rates:
            alone, during, floods = flooded(ns, args, rate, measure)
            row(f"stack listener, kernel to stack, "
                f"{'paced' if rate else 'full rate'}", alone, during, floods,
                fu.memory_kib(pid)["VmHWM"])
        nd.stop()
        nd.close()
    finally:
        if nd is not None:
            nd.close()
        topo.close()


def main():
    global VARIANT
    rates = [int(r) for r in ARGS.rates.split(",") if r]
    cases = ARGS.cases.split(",")
    variants = []
    for v in ARGS.variants.split(";"):
        name, _, flags = v.partition("=")
        variants.append((name.strip(), flags.split()))
    print(f"netstackd {ARGS.netstackd}; {ARGS.seconds} s per transfer, "
          f"{ARGS.repeat} repetitions, medians; variants: "
          + "; ".join(f"{n}: {' '.join(f) or 'defaults'}" for n, f in variants))
    print("| variant | case | flood SYN/s | SYNs sent | before Gbit/s | "
          "during Gbit/s | ratio | netstackd VmHWM MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for name, flags in variants:
        VARIANT = name
        backend_cases(cases, rates, flags)
        if "denied" in cases:
            backend_cases(cases, rates, flags, denied=True)
        if "stack" in cases:
            stack_case(rates, flags)


if __name__ == "__main__":
    main()
