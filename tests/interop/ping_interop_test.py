#!/usr/bin/env python3
"""The Linux kernel pings netstackd, over a veth pair (AF_PACKET) and a TAP.

For each link type the test builds its own network namespaces (unique
names, addresses only inside them), starts netstackd on one side with
--pcap, and from the kernel side runs:
  - ping -c 1000 (IPv4) and ping -6 -c 1000 (IPv6): 0% loss required;
  - ping -s 8000 both families: fragmented both ways (the kernel fragments
    the request, netstackd reassembles it and fragments its reply).
Then tshark reads netstackd's pcap: no malformed packets, no expert
errors, and every IP/ICMP/ICMPv6 checksum valid with validation on.
Everything is torn down even when a step fails. Needs root.
"""
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import unittest

RUNFILES = os.environ.get("TEST_SRCDIR", "")
WORKSPACE = os.environ.get("TEST_WORKSPACE", "netstack")
NETSTACKD = os.path.join(RUNFILES, WORKSPACE, "tools/netstackd/netstackd")
COUNT = int(os.environ.get("PING_COUNT", "1000"))


def run(*cmd, check=True, timeout=120):
    return subprocess.run(list(cmd), check=check, capture_output=True,
                          text=True, timeout=timeout)


def ping(ns, addr, count, size=56, v6=False, interval="0.002"):
    cmd = ["ip", "netns", "exec", ns, "ping", "-q", "-n", "-c", str(count),
           "-i", interval, "-s", str(size), "-W", "2",
           "-w", str(max(30, count // 20)), addr]
    if v6:
        cmd.insert(5, "-6")
    proc = run(*cmd, check=False, timeout=300)
    out = proc.stdout + proc.stderr
    m = re.search(r"(\d+) packets transmitted, (\d+) received", out)
    rtt = re.search(r"= [\d.]+/([\d.]+)/", out)
    if not m:
        raise AssertionError(f"unexpected ping output: {out}")
    return int(m.group(1)), int(m.group(2)), (float(rtt.group(1)) if rtt else None)


class Topology:
    """Namespaces and a link; undone by close() whatever happened."""

    def __init__(self, kind):
        tag = f"{os.getpid()}-{kind}"
        self.kind = kind
        self.peer_ns = f"nst-ping-{tag}-k"   # the kernel pings from here
        self.stack_ns = f"nst-ping-{tag}-s"  # netstackd opens its link here
        self.namespaces = []
        self.proc = None
        self.stderr_path = None

    def add_ns(self, name):
        run("ip", "netns", "add", name)
        self.namespaces.append(name)
        run("ip", "-n", name, "link", "set", "lo", "up")

    def setup(self, net4, net6):
        if self.kind == "veth":
            self.add_ns(self.peer_ns)
            self.add_ns(self.stack_ns)
            run("ip", "link", "add", "nst0", "netns", self.peer_ns, "type",
                "veth", "peer", "name", "nst1", "netns", self.stack_ns)
            # The stack side belongs to netstackd: keep the kernel off it.
            run("ip", "netns", "exec", self.stack_ns, "sysctl", "-q", "-w",
                "net.ipv6.conf.nst1.disable_ipv6=1")
            run("ip", "-n", self.stack_ns, "link", "set", "nst1", "up")
            dev = "nst0"
            link_flags = ["--packet", "nst1", "--netns", self.stack_ns]
        else:
            self.add_ns(self.peer_ns)
            self.stack_ns = self.peer_ns  # the TAP lives where the kernel is
            run("ip", "-n", self.peer_ns, "tuntap", "add", "dev", "nsttap",
                "mode", "tap")
            dev = "nsttap"
            link_flags = ["--tap", "nsttap", "--netns", self.peer_ns]
        run("ip", "-n", self.peer_ns, "addr", "add", f"{net4}.1/24", "dev", dev)
        run("ip", "-n", self.peer_ns, "addr", "add", f"{net6}::1/64", "dev",
            dev, "nodad")
        run("ip", "-n", self.peer_ns, "link", "set", dev, "up")
        return link_flags

    def start(self, link_flags, net4, net6, pcap):
        fd, self.stderr_path = tempfile.mkstemp(prefix="netstackd-", suffix=".log")
        os.close(fd)
        self.stderr = open(self.stderr_path, "w")
        self.proc = subprocess.Popen(
            [NETSTACKD, *link_flags, f"--addr={net4}.2/24",
             f"--addr6={net6}::2/64", f"--pcap={pcap}"],
            stdout=self.stderr, stderr=self.stderr)
        deadline = time.time() + 10
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"netstackd exited: {self.log()}")
            if "running on" in self.log():
                return
            time.sleep(0.05)
        raise AssertionError(f"netstackd did not start: {self.log()}")

    def log(self):
        with open(self.stderr_path) as f:
            return f.read()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode if self.proc else None

    def close(self):
        try:
            self.stop()
        finally:
            for ns in reversed(self.namespaces):
                run("ip", "netns", "del", ns, check=False)
            if self.stderr_path:
                self.stderr.close()
                os.unlink(self.stderr_path)


def tshark_count(pcap, display_filter, *options):
    out = run("tshark", "-n", "-r", pcap, *options, "-Y", display_filter).stdout
    return len([l for l in out.splitlines() if l.strip()])


class PingInterop(unittest.TestCase):
    def setUp(self):
        self.assertEqual(os.geteuid(), 0, "this test needs root (CI runs as root)")
        self.assertTrue(os.path.exists(NETSTACKD), NETSTACKD)

    def check_link(self, kind, net4, net6):
        topo = Topology(kind)
        pcap_dir = tempfile.mkdtemp(prefix="nst-ping-")
        pcap = os.path.join(pcap_dir, f"{kind}.pcap")
        try:
            flags = topo.setup(net4, net6)
            topo.start(flags, net4, net6, pcap)
            results = {}
            for name, addr, size, v6, count in [
                    ("v4", f"{net4}.2", 56, False, COUNT),
                    ("v6", f"{net6}::2", 56, True, COUNT),
                    ("v4_8000", f"{net4}.2", 8000, False, 20),
                    ("v6_8000", f"{net6}::2", 8000, True, 20)]:
                sent, got, rtt = ping(topo.peer_ns, addr, count, size, v6)
                results[name] = (sent, got, rtt)
                print(f"{kind} {name}: {sent} sent, {got} received, "
                      f"avg rtt {rtt} ms", flush=True)
                self.assertEqual(sent, count, f"{kind} {name}")
                self.assertEqual(got, count, f"{kind} {name}: loss")
            code = topo.stop()
            log = topo.log()
            print(f"--- netstackd ({kind}) exit {code}:\n{log}", flush=True)
            self.assertEqual(code, 0, log)
            m = re.search(r"ipv4_reassembled (\d+)", log)
            self.assertTrue(m and int(m.group(1)) >= 20, "no IPv4 reassembly")
            m = re.search(r"ipv6_reassembled (\d+)", log)
            self.assertTrue(m and int(m.group(1)) >= 20, "no IPv6 reassembly")
            self.assertIn("ipv4_fragments_sent", log)
            self.assertIn("ipv6_fragments_sent", log)
            self.check_pcap(pcap, kind)
        finally:
            topo.close()
            if os.path.exists(pcap):
                os.unlink(pcap)
            os.rmdir(pcap_dir)

    def check_pcap(self, pcap, kind):
        total = tshark_count(pcap, "frame")
        self.assertGreater(total, 4 * COUNT, "pcap too small")
        self.assertEqual(tshark_count(pcap, "_ws.malformed"), 0,
                         f"{kind}: malformed packets in {pcap}")
        # Expert infos of severity error (tshark: _ws.expert.severity).
        self.assertEqual(tshark_count(pcap, "_ws.expert.severity == 8388608"), 0,
                         f"{kind}: expert errors")
        opts = ["-o", "ip.check_checksum:TRUE"]
        bad = tshark_count(pcap, "ip.checksum.status == 0 || "
                           "icmp.checksum.status == 0 || "
                           "icmpv6.checksum.status == 0", *opts)
        good_ip = tshark_count(pcap, "ip.checksum.status == 1", *opts)
        good_icmp = tshark_count(pcap, "icmp.checksum.status == 1 || "
                                 "icmpv6.checksum.status == 1", *opts)
        print(f"{kind} pcap: {total} frames, {good_ip} IPv4 headers and "
              f"{good_icmp} ICMP messages with valid checksums, {bad} bad",
              flush=True)
        self.assertEqual(bad, 0, f"{kind}: bad checksums")
        self.assertGreater(good_ip, 2 * COUNT)
        self.assertGreaterEqual(good_icmp, 4 * COUNT)

    def test_veth_af_packet(self):
        self.check_link("veth", "10.77.0", "fd00:77")

    def test_tap(self):
        self.check_link("tap", "10.78.0", "fd00:78")


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
