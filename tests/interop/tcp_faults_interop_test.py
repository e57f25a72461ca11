#!/usr/bin/env python3
"""netstackd's TCP against the Linux kernel through netstackd's own fault
injector: loss, reordering, duplication, delay with jitter.

For each profile a fresh netstackd runs with the fault flags on both
directions (--fault_ingress: our receive path is impaired too) and:
  - curl downloads NST_FAULT_HTTP_BYTES (default 10 MiB) over IPv4 from
    the HTTP server: sha256 must match;
  - socat sends NST_FAULT_STREAM_BYTES (default 4 MiB) to the echo service
    over IPv4 and over IPv6 and reads them back: sha256 must match.
It prints the time of each transfer and, from netstackd's exit counters,
the TCP retransmissions and what the injector did; a summary table ends
the run. A transfer that makes no progress for 5 s gets netstackd's
per-connection TCP state (SIGUSR1) while it is stuck, and its pcap is kept
(in $TEST_UNDECLARED_OUTPUTS_DIR) with the last frames printed.

Links: NST_FAULT_LINKS (default "veth,tap"); profiles on veth: all, on
TAP: NST_FAULT_TAP_PROFILES (default "loss5,reorder5"). NST_FAULT_PROFILES
restricts the names everywhere. By hand, with the final sizes:
  bazel test //tests/interop:tcp_faults_interop_test --test_output=streamed \\
      --test_env=NST_FAULT_HTTP_BYTES=$((100<<20)) \\
      --test_env=NST_FAULT_STREAM_BYTES=$((100<<20)) --test_env=NST_PCAP=0
Needs root, curl, socat, ethtool and tshark.
"""
import os
import shutil
import sys
import tempfile
import unittest

from tests.interop import interop_util as iu

HTTP_BYTES = iu.env_int("NST_FAULT_HTTP_BYTES", 10 << 20)
STREAM_BYTES = iu.env_int("NST_FAULT_STREAM_BYTES", 4 << 20)
TIMEOUT = iu.env_int("NST_TRANSFER_TIMEOUT", 45)
PCAP = os.environ.get("NST_PCAP", "1") != "0"
LINKS = [l for l in os.environ.get("NST_FAULT_LINKS", "veth,tap").split(",") if l]
TAP_PROFILES = os.environ.get("NST_FAULT_TAP_PROFILES", "loss5,reorder5").split(",")
ONLY = [p for p in os.environ.get("NST_FAULT_PROFILES", "").split(",") if p]
HTTP_PORT, ECHO_PORT = 80, 7

PROFILES = [
    ("loss1", ["--loss=0.01"]),
    ("loss5", ["--loss=0.05"]),
    ("reorder5", ["--reorder=0.05"]),
    ("dup1", ["--duplicate=0.01"]),
    # 10 ms at tens of MB/s is more than the injector's default 1,000
    # held frames: raise its limit so that this profile is delay alone.
    ("delay10", ["--delay=10ms", "--jitter=2ms", "--fault_queue_limit=20000"]),
]

RESULTS = []  # printed at the end


def mib(n):
    return f"{n / (1 << 20):.1f} MiB"


class TcpFaultsInterop(unittest.TestCase):
    @classmethod
    def tearDownClass(cls):
        print("\n=== summary: link profile transfer size seconds ok "
              "tcp.retransmits fault.egress.dropped/duplicated/reordered/"
              "overflow fault.ingress.(same)", flush=True)
        for r in RESULTS:
            print("  ".join(str(x) for x in r), flush=True)

    def setUp(self):
        self.assertEqual(os.geteuid(), 0, "this test needs root")
        self.assertTrue(os.path.exists(iu.NETSTACKD), iu.NETSTACKD)
        for tool in ("curl", "socat", "tshark"):
            self.assertTrue(iu.have(tool), f"{tool} is not installed")

    def run_profile(self, topo, link_flags, kind, name, fault_flags, root, sha,
                    pcap_dir):
        pcap = os.path.join(pcap_dir, f"{kind}-{name}.pcap") if PCAP else None
        args = link_flags + fault_flags + [
            "--fault_ingress", "--seed=7", "--http-root", root,
            f"--http-port={HTTP_PORT}", f"--echo-port={ECHO_PORT}"]
        if pcap:
            args.append(f"--pcap={pcap}")
        nd = iu.Netstackd(args, name=f"netstackd-{kind}-{name}")
        failures = []
        rows = []
        try:
            nd.start()
            addr4 = f"{topo.net4}.2"
            addr6 = f"{topo.net6}::2"
            label = f"{kind} {name} http v4"
            r = iu.curl_download(
                topo.peer(), f"http://{addr4}:{HTTP_PORT}/blob.bin", TIMEOUT,
                on_stall=lambda: iu.diagnose(nd, pcap, label, HTTP_PORT))
            ok = r.returncode == 0 and r.received_sha.hexdigest() == sha
            print(f"{label}: {mib(r.received)} of {mib(HTTP_BYTES)} in "
                  f"{r.seconds:.2f} s, sha {'ok' if ok else 'BAD'}", flush=True)
            rows.append([kind, name, "http-v4", mib(HTTP_BYTES),
                         f"{r.seconds:.2f}", ok])
            if not ok:
                failures.append(
                    f"{label}: curl exit {r.returncode} ({r.stderr.strip()}), "
                    f"{r.received} of {HTTP_BYTES} bytes\n"
                    + (r.stall_info or iu.diagnose(nd, pcap, label, HTTP_PORT)))
            # The echo both ways over both families: over IPv4 a data
            # segment that carried SACK blocks once exceeded the MTU and,
            # with DF set, never arrived (the echo stalled for good).
            for fam, addr in (("v4", addr4), ("v6", addr6)):
                label = f"{kind} {name} echo {fam}"
                s = iu.socat_stream(
                    topo.peer(), iu.socat_tcp(addr, ECHO_PORT), STREAM_BYTES,
                    TIMEOUT, echo=True,
                    on_stall=lambda: iu.diagnose(nd, pcap, label, ECHO_PORT))
                ok = (s.returncode == 0 and s.sent == STREAM_BYTES and
                      s.received == s.sent and
                      s.received_sha.hexdigest() == s.sent_sha.hexdigest())
                print(f"{label}: {mib(s.sent)} sent, {mib(s.received)} back "
                      f"in {s.seconds:.2f} s, sha {'ok' if ok else 'BAD'}",
                      flush=True)
                rows.append([kind, name, f"echo-{fam}", mib(STREAM_BYTES),
                             f"{s.seconds:.2f}", ok])
                if not ok:
                    failures.append(
                        f"{label}: socat exit {s.returncode} "
                        f"({s.stderr.strip()}), timed out {s.timed_out}, "
                        f"{s.sent} sent, {s.received} back\n"
                        + (s.stall_info
                           or iu.diagnose(nd, pcap, label, ECHO_PORT)))
            code = nd.stop()
            c = nd.exit_counters()
            stats = [c.get("tcp.retransmits"),
                     f"{c.get('fault.egress.dropped')}/"
                     f"{c.get('fault.egress.duplicated')}/"
                     f"{c.get('fault.egress.reordered')}/"
                     f"{c.get('fault.egress.overflow')}",
                     f"{c.get('fault.ingress.dropped')}/"
                     f"{c.get('fault.ingress.duplicated')}/"
                     f"{c.get('fault.ingress.reordered')}/"
                     f"{c.get('fault.ingress.overflow')}"]
            for row in rows:
                RESULTS.append(row + stats)
            print(f"--- netstackd {kind} {name}: exit {code}, tcp retransmits "
                  f"{c.get('tcp.retransmits')}, resets sent "
                  f"{c.get('tcp.resets_sent')}, timed out "
                  f"{c.get('tcp.timed_out')}; faults egress dropped "
                  f"{c.get('fault.egress.dropped')} duplicated "
                  f"{c.get('fault.egress.duplicated')} reordered "
                  f"{c.get('fault.egress.reordered')} delayed "
                  f"{c.get('fault.egress.delayed')} overflow "
                  f"{c.get('fault.egress.overflow')}; ingress dropped "
                  f"{c.get('fault.ingress.dropped')} overflow "
                  f"{c.get('fault.ingress.overflow')}", flush=True)
            if code != 0:
                failures.append(f"netstackd exit {code}: {nd.log()[-3000:]}")
        finally:
            nd.close()
            if pcap and os.path.exists(pcap):
                os.unlink(pcap)
        if failures:
            self.fail("\n\n".join(failures))

    def run_link(self, kind, net4, net6):
        topo = iu.Topology(kind, "nst-tcpf")
        root = tempfile.mkdtemp(prefix="nst-www-")
        pcap_dir = tempfile.mkdtemp(prefix="nst-tcpf-")
        try:
            sha = iu.write_random_file(os.path.join(root, "blob.bin"),
                                       HTTP_BYTES, seed=43)
            link_flags = topo.setup(net4, net6)
            for name, flags in PROFILES:
                if ONLY and name not in ONLY:
                    continue
                if kind == "tap" and name not in TAP_PROFILES:
                    continue
                with self.subTest(link=kind, profile=name):
                    self.run_profile(topo, link_flags, kind, name, flags, root,
                                     sha, pcap_dir)
        finally:
            topo.close()
            shutil.rmtree(root, ignore_errors=True)
            shutil.rmtree(pcap_dir, ignore_errors=True)

    def test_veth_af_packet(self):
        if "veth" not in LINKS:
            self.skipTest("NST_FAULT_LINKS excludes veth")
        self.run_link("veth", "10.81.0", "fd00:81")

    def test_tap(self):
        if "tap" not in LINKS:
            self.skipTest("NST_FAULT_LINKS excludes tap")
        self.run_link("tap", "10.82.0", "fd00:82")


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
