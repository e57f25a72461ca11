#!/usr/bin/env python3
"""A QEMU guest on three VM backends, in one run (issue #35 must-show 2).

  netstackd vhost-user   netstackd --backend --vhost-user SOCK; QEMU with
                         -netdev vhost-user, memfd-shared memory, vectors=0
  netstackd stream       netstackd --backend --unix SOCK; -netdev stream
  passt stream           Debian's passt -f -s SOCK; -netdev stream

The guest is tests/vm's (vm_harness.py: QEMU 7.2 under TCG, 1 vCPU,
256 MiB, Debian's cloud kernel, busybox). Per backend and round it boots,
takes its DHCP lease, downloads --size MiB from an HTTP server in H (wget
in the guest, timed by the guest, sha256 checked), and H fetches the
guest's copy back through the backend's -t forward (curl, timed by H,
sha256 checked). Reported per backend, the median over --rounds:
  - QEMU start -> DHCP lease, and the guest's link up -> lease;
  - download and upload MB/s;
  - the backend's CPU seconds (utime + stime of its process, from
    /proc/PID/stat) over the download plus the upload, per GB moved.
The TCG guest's own CPU bounds the rate; CPU per GB shows what the backend
spends. The rounds interleave the backends, so a busy machine hurts each
alike; ratios against "netstackd stream" are printed.

H has no default route while netstackd runs (asserted); passt needs one,
so for passt H gets default routes into the sink namespace S, a dead end
(asserted), removed again after. Everything runs in namespaces made here
and removed at exit. Needs root, qemu-system-x86, passt, dnsmasq, dig,
curl, ethtool, and netstackd (--netstackd, default
bazel-bin/tools/netstackd/netstackd; build it with --config=opt).

Usage: bench/vm_benchmark.py [--netstackd PATH] [--size 64] [--rounds 3]
           [--mtu N] [--backends vhost-user,stream,passt] [--json FILE]
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from tests.backend.backend_topology import H4, H6  # noqa: E402
from tests.interop import interop_util as iu  # noqa: E402
from tests.vm import vm_harness as vh  # noqa: E402

BACKENDS = {
    "vhost-user": "netstackd vhost-user",
    "stream": "netstackd stream",
    "passt": "passt stream",
}
FIGURES = [
    ("boot_to_lease", "QEMU start -> DHCP lease (s)", "%.2f"),
    ("link_to_lease", "guest link up -> DHCP lease (s)", "%.2f"),
    ("download_mbps", "download H -> guest (MB/s)", "%.1f"),
    ("upload_mbps", "upload guest -> H via -t (MB/s)", "%.1f"),
    ("cpu_s_per_gb", "backend CPU s per GB moved", "%.2f"),
]
# Lower is better for these; ratios are printed as "x times the baseline".
LOWER_BETTER = {"boot_to_lease", "link_to_lease", "cpu_s_per_gb"}


class Bench:
    def __init__(self, args):
        self.args = args
        self.size = args.size << 20
        self.tmp = tempfile.mkdtemp(prefix="nst-vmb-")
        self.sockdir = tempfile.mkdtemp(prefix="nst-vmb-", dir="/tmp")
        self.topo = vh.VmTopology()

    def setup(self):
        self.kernel, self.initrd = vh.build_guest(self.tmp)
        self.topo.setup()
        self.sha = vh.start_servers(self.topo, self.tmp, self.size)

    def close(self):
        self.topo.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
        shutil.rmtree(self.sockdir, ignore_errors=True)

    def run_netstackd(self, attachment, label):
        topo = self.topo
        sock = os.path.join(self.sockdir, f"{attachment}.sock")
        topo.assert_isolated()  # no default route in H: nothing leaves
        flag = "--vhost-user" if attachment == "vhost-user" else "--unix"
        extra = ["--mtu", str(self.args.mtu)] if self.args.mtu else []
        nd = iu.Netstackd(["--backend", flag, sock, "--dns-upstream",
                           vh.DNSMASQ, "-t", f"{vh.FWD_PORT}:80", *extra])
        nd.args = topo.in_ns(topo.h, self.args.netstackd, *nd.args[1:])
        nd.start()
        try:
            return vh.run_guest(topo, self.kernel, self.initrd, label,
                                attachment, sock, f"{H4}:{vh.HTTP_PORT}",
                                f"[{H6}]:{vh.HTTP_PORT}", nd.log, self.tmp,
                                self.sha, self.size, backend_pid=nd.proc.pid)
        finally:
            nd.close()

    def run_passt(self, label):
        topo = self.topo
        topo.add_sink_default()
        try:
            topo.assert_sink_default()
            sock = os.path.join(self.sockdir, "passt.sock")
            # passt reads its DNS server from resolv.conf: a private one,
            # in a mount namespace of passt's own, names dnsmasq in H.
            resolv = os.path.join(self.tmp, "resolv.conf")
            with open(resolv, "w") as f:
                f.write(f"nameserver {vh.DNSMASQ}\n")
            log_path = os.path.join(self.tmp, "passt.log")
            mtu = self.args.mtu or 65520
            with open(log_path, "w") as log:
                # unshare and sh exec: the pid is passt's own.
                passt = subprocess.Popen(topo.in_ns(
                    topo.h, "unshare", "-m", "sh", "-c",
                    f"mount --bind {resolv} /etc/resolv.conf && exec passt "
                    f"-f -s {sock} --runas 0:0 -m {mtu} "
                    f"-t {vh.FWD_PORT}:80"), stdout=log, stderr=log)
            topo.procs.append(passt)

            def plog():
                with open(log_path) as f:
                    return f.read()
            ok = iu.wait_for(lambda: os.path.exists(sock) or
                             passt.poll() is not None, 10)
            if not ok or passt.poll() is not None:
                raise RuntimeError(f"passt did not start: {plog()}")
            try:
                # passt gives the guest H's own address: H is reached
                # through the gateway address, which passt maps to H's
                # loopback.
                return vh.run_guest(
                    topo, self.kernel, self.initrd, label, "stream", sock,
                    f"{vh.SINK_GW4}:{vh.HTTP_PORT}",
                    f"[{vh.SINK_GW6}]:{vh.HTTP_PORT}", plog, self.tmp,
                    self.sha, self.size, backend_pid=passt.pid)
            finally:
                passt.kill()
                passt.wait()
                if os.path.exists(sock):
                    os.unlink(sock)
        finally:
            topo.del_sink_default()

    def run(self):
        runs = {b: [] for b in self.args.backends}
        for r in range(self.args.rounds):
            for b in self.args.backends:
                label = f"{b}-{r}"
                res = (self.run_passt(label) if b == "passt"
                       else self.run_netstackd(b, label))
                ok = res.get("download_ok") and res.get("upload_ok")
                print(f"round {r + 1} {BACKENDS[b]}: "
                      + ("ok " if ok else f"FAILED ({res.get('upload_err')}) ")
                      + " ".join(f"{k}={res.get(k):.2f}"
                                 for k, _, _ in FIGURES
                                 if isinstance(res.get(k), float))
                      + f" tso={(res.get('offload') or {}).get('tso')}",
                      flush=True)
                if not ok:
                    print(res["why"](), file=sys.stderr)
                    continue
                runs[b].append({k: res.get(k) for k, _, _ in FIGURES}
                               | {"tso": (res.get("offload") or {}).get("tso"),
                                  "cpu_download": res.get("cpu_download"),
                                  "cpu_upload": res.get("cpu_upload")})
        return runs


def medians(runs):
    out = {}
    for b, rs in runs.items():
        out[b] = {}
        for k, _, _ in FIGURES:
            vals = [r[k] for r in rs if r.get(k) is not None]
            out[b][k] = statistics.median(vals) if vals else None
        out[b]["tso"] = rs[0]["tso"] if rs else None
        out[b]["runs"] = len(rs)
    return out


def table(med, baseline="stream"):
    names = [BACKENDS[b] for b in med]
    rows = [("", *names)]
    for k, title, fmt in FIGURES:
        rows.append((title, *["-" if med[b][k] is None else fmt % med[b][k]
                              for b in med]))
        base = med.get(baseline, {}).get(k)
        if base:
            rows.append((f"  x {BACKENDS[baseline]}",
                         *["-" if med[b][k] is None else "%.2f" % (
                             med[b][k] / base) for b in med]))
    rows.append(("guest TSO (ethtool -k)",
                 *[str(med[b]["tso"]) for b in med]))
    rows.append(("rounds measured", *[str(med[b]["runs"]) for b in med]))
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("| " + " | ".join(c.ljust(w[i]) for i, c in enumerate(r))
                     + " |" for r in rows[:1] + [tuple("-" * x for x in w)]
                     + rows[1:])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--netstackd", default=os.path.join(
        HERE, "..", "bazel-bin", "tools", "netstackd", "netstackd"))
    p.add_argument("--size", type=int, default=64, help="MiB each way")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--mtu", type=int, default=0,
                   help="the guest's MTU (netstackd --mtu, passt -m); "
                        "0: each backend's default (65520)")
    p.add_argument("--backends", default="vhost-user,stream,passt")
    p.add_argument("--json", help="write the runs and medians here")
    args = p.parse_args()
    args.backends = args.backends.split(",")
    for b in args.backends:
        if b not in BACKENDS:
            p.error(f"unknown backend {b}")
    args.netstackd = os.path.abspath(args.netstackd)
    if os.geteuid() != 0:
        p.error("needs root (namespaces)")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    bench = Bench(args)
    try:
        bench.setup()
        runs = bench.run()
    finally:
        bench.close()
    med = medians(runs)
    cpu = subprocess.run(["lscpu"], capture_output=True,
                         text=True).stdout
    model = next((l.split(":", 1)[1].strip() for l in cpu.splitlines()
                  if l.startswith("Model name")), "?")
    print(f"\n{args.size} MiB each way, median of {args.rounds} rounds, "
          f"MTU {args.mtu or 'default (65520)'}, {model}")
    print(table(med))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "runs": runs, "medians": med}, f,
                      indent=1)
    return 0 if all(med[b]["runs"] for b in med) else 1


if __name__ == "__main__":
    sys.exit(main())
