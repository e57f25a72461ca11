#!/usr/bin/env python3
"""iperf3 through netstackd --backend against the kernel veth ceiling.

  backend:  G (kernel, TAP nsttap) -- netstackd --backend --hostgso (in H) -- H's sockets
  ceiling:  KG (kernel) --veth-- KH (kernel), the same MTU

For each MTU, iperf3 -c in G (and in KG) against iperf3 -s in H (and in
KH), forward (guest sends) and -R (host sends), CUBIC, alternating backend
and ceiling runs so that the machine's noise hits both alike. Prints one
row per run and a table of medians with the backend/ceiling ratio, and the
CPU netstackd used per run (its share of one core, from /proc), which is
where the time goes on a 2-core machine.

Every namespace is made here, with names carrying our pid, and removed at
exit. H has no default route and holds only lo and a veth to an empty sink
namespace (asserted before netstackd starts): nothing leaves the machine.
Needs root, iperf3, and netstackd (an --config=opt build:
bazel build --config=opt //tools/netstackd).

Usage: bench/backend_iperf3.py [--netstackd PATH] [--mtus 65520,1500]
                               [--seconds 5] [--repeat 3] [--perf]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from tests.backend.backend_topology import H4, BackendTopology  # noqa: E402
from tests.interop import interop_util as iu  # noqa: E402

KG4, KH4 = "10.99.0.1", "10.99.0.2"
PORT = 5201


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Ceiling:
    """Two namespaces joined by a veth pair: the kernel to itself."""

    def __init__(self):
        tag = str(os.getpid())
        self.g, self.h = f"nstbk-{tag}-g", f"nstbk-{tag}-h"
        self.made = []

    def setup(self, mtu):
        for ns in (self.g, self.h):
            iu.run("ip", "netns", "add", ns)
            self.made.append(ns)
            iu.run("ip", "-n", ns, "link", "set", "lo", "up")
        iu.run("ip", "link", "add", "kgveth", "netns", self.g, "mtu",
               str(mtu), "type", "veth", "peer", "name", "khveth", "netns",
               self.h, "mtu", str(mtu))
        iu.run("ip", "-n", self.g, "addr", "add", f"{KG4}/24", "dev", "kgveth")
        iu.run("ip", "-n", self.h, "addr", "add", f"{KH4}/24", "dev", "khveth")
        iu.run("ip", "-n", self.g, "link", "set", "kgveth", "up")
        iu.run("ip", "-n", self.h, "link", "set", "khveth", "up")

    def close(self):
        for ns in self.made:
            iu.run("ip", "netns", "del", ns, check=False)
        self.made = []


def iperf3(ns, server, seconds, reverse):
    cmd = ["ip", "netns", "exec", ns, "iperf3", "-c", server, "-p", str(PORT),
           "-t", str(seconds), "-C", "cubic", "-J"]
    if reverse:
        cmd.append("-R")
    out = iu.run(*cmd, timeout=seconds + 60, check=False)
    try:
        end = json.loads(out.stdout)["end"]
    except (json.JSONDecodeError, KeyError):
        raise RuntimeError(f"iperf3 failed: {out.stdout[-500:]} {out.stderr}")
    return (end["sum_received"]["bits_per_second"] / 1e9,
            end["sum_sent"].get("retransmits", 0))


def start_server(ns):
    p = subprocess.Popen(["ip", "netns", "exec", ns, "iperf3", "-s", "-p",
                          str(PORT)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    ok = iu.wait_for(lambda: f":{PORT} " in iu.run(
        "ip", "netns", "exec", ns, "ss", "-ltnH").stdout, 10)
    if not ok:
        raise RuntimeError(f"iperf3 -s did not start in {ns}")
    return p


def perf_profile(pid, seconds, path):
    """perf record of netstackd for a few seconds; the top symbols."""
    rec = subprocess.run(["perf", "record", "-g", "-o", path, "-p", str(pid),
                          "--", "sleep", str(seconds)],
                         capture_output=True, text=True)
    if rec.returncode != 0:
        return f"(perf record failed: {rec.stderr.strip()[-300:]})"
    rep = subprocess.run(["perf", "report", "-i", path, "--no-children",
                          "--stdio", "--percent-limit", "2", "-g", "none"],
                         capture_output=True, text=True)
    lines = [l for l in rep.stdout.splitlines() if l.strip() and
             not l.startswith("#")]
    # The kernel's share against netstackd's own code.
    dso = subprocess.run(["perf", "report", "-i", path, "--no-children",
                          "--stdio", "--sort", "dso", "-g", "none"],
                         capture_output=True, text=True)
    split = [l.strip() for l in dso.stdout.splitlines() if l.strip() and
             not l.startswith("#")][:4]
    return "\n".join(["by object: " + "; ".join(split)] + lines[:25])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--netstackd", default=os.path.join(
        HERE, "..", "bazel-out", "k8-optopt", "bin", "tools", "netstackd",
        "netstackd"))
    ap.add_argument("--mtus", default="65520,1500")
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--perf", action="store_true",
                    help="profile netstackd with perf during one extra run "
                    "per MTU and direction")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("backend_iperf3: needs root (it makes network namespaces)")
    if not os.path.exists(a.netstackd):
        sys.exit(f"backend_iperf3: no netstackd at {a.netstackd}; build it "
                 "with bazel build --config=opt //tools/netstackd")
    iu.NETSTACKD = os.path.abspath(a.netstackd)
    rows = []
    for mtu in [int(m) for m in a.mtus.split(",")]:
        topo, ceiling, nd, servers = BackendTopology(), Ceiling(), None, []
        try:
            topo.setup()
            iu.run("ip", "-n", topo.g, "link", "set", "nsttap", "mtu",
                   str(mtu), check=False)
            ceiling.setup(mtu)
            servers += [start_server(topo.h), start_server(ceiling.h)]
            nd = topo.netstackd("--hostgso", "--mtu", str(mtu))
            iu.run("ip", "-n", topo.g, "link", "set", "nsttap", "mtu",
                   str(mtu))
            topo.configure_guest()
            for reverse in (False, True):
                direction = "host->guest (-R)" if reverse else "guest->host"
                for rep in range(a.repeat):
                    for kind in ("backend", "ceiling"):
                        ns, server = ((topo.g, H4) if kind == "backend"
                                      else (ceiling.g, KH4))
                        cpu0, t0 = cpu_seconds(nd.proc.pid), time.monotonic()
                        gbps, retr = iperf3(ns, server, a.seconds, reverse)
                        share = ((cpu_seconds(nd.proc.pid) - cpu0) /
                                 (time.monotonic() - t0))
                        row = dict(mtu=mtu, direction=direction, kind=kind,
                                   gbps=gbps, retransmits=retr,
                                   netstackd_cpu=share if kind == "backend"
                                   else None)
                        rows.append(row)
                        cpu = (f", netstackd {share * 100:.0f}% of a core"
                               if kind == "backend" else "")
                        print(f"mtu {mtu} {direction} {kind} #{rep + 1}: "
                              f"{gbps:.2f} Gbit/s, {retr} retransmits{cpu}",
                              flush=True)
                if a.perf:
                    result = {}
                    t = threading.Thread(target=lambda: result.update(
                        r=iperf3(topo.g, H4, a.seconds + 2, reverse)))
                    t.start()
                    time.sleep(1)
                    prof = perf_profile(nd.proc.pid, a.seconds - 1,
                                        f"/tmp/nst-perf-{mtu}-{int(reverse)}.data")
                    t.join()
                    print(f"--- perf, netstackd, mtu {mtu} {direction} "
                          f"({result.get('r', (0,))[0]:.2f} Gbit/s):\n{prof}",
                          flush=True)
            code = nd.stop()
            c = nd.exit_counters()
            print(f"netstackd exit {code}; tcp retransmits "
                  f"{c.get('tcp.retransmits')}, host fds open "
                  f"{c.get('backend.tcp_host_fds_open')}", flush=True)
        finally:
            for p in servers:
                p.kill()
                p.wait()
            if nd is not None:
                nd.close()
            topo.close()
            ceiling.close()
    print("\n| MTU | direction | backend Gbit/s | kernel veth Gbit/s | ratio "
          "| backend retransmits | netstackd CPU |")
    print("|---|---|---|---|---|---|---|")
    keys = []
    for r in rows:
        k = (r["mtu"], r["direction"])
        if k not in keys:
            keys.append(k)
    for mtu, direction in keys:
        sel = [r for r in rows if r["mtu"] == mtu and r["direction"] == direction]
        b = statistics.median(r["gbps"] for r in sel if r["kind"] == "backend")
        k = statistics.median(r["gbps"] for r in sel if r["kind"] == "ceiling")
        br = sum(r["retransmits"] for r in sel if r["kind"] == "backend")
        cpu = statistics.median(r["netstackd_cpu"] for r in sel
                                if r["kind"] == "backend")
        print(f"| {mtu} | {direction} | {b:.2f} | {k:.2f} | {b / k:.2f}x "
              f"| {br} | {cpu * 100:.0f}% |")


if __name__ == "__main__":
    main()
