#!/usr/bin/env python3
"""netstackd --backend over a lossy, reordering, slow guest link.

The topology of backend_topology.py (G the guest kernel on a TAP,
netstackd --backend in H, H's veth peer alone in a sink namespace S, no
default route in H; G configured statically). netstackd impairs the link
between G and itself in both directions (--fault_ingress):
  --loss 0.01 --reorder 0.05 --delay 10ms
so every frame G sends and every frame it gets may be lost (1%), held
behind a later one (5%), and is 10 ms late: about 20 ms of round trip
that only the guest link adds. Both TCP stacks on that link, netstackd's
and G's kernel, must recover from it.

Shown, over IPv4 and IPv6:
  - curl in G downloads NST_FAULTS_HTTP_BYTES (default 256 MiB) from
    python3's http.server in H: sha256 equal;
  - socat in G sends NST_FAULTS_STREAM_BYTES (default 256 MiB) to
    echo_server.py in H and reads them back: sha256 equal;
  - a UDP echo (socat in H) of datagrams of 1..65,000 bytes: each one G
    sends once; a datagram or its echo may be lost, so what is asserted is
    that every echo that comes back is byte-identical to what was sent and
    that at least 80% come back (two frames per echo cross the 1% loss,
    about 2% should be missing).
Per transfer it prints the bytes, the seconds, and the change in
netstackd's tcp.retransmits and fault counters (SIGUSR1), and asserts that
faults were applied in both directions during the transfer. netstackd
must exit 0 with backend.tcp_host_fds_open 0.

NST_FAULTS_HOST_GSO=1 runs netstackd without --swgso (host GSO, the
backend's default on a TAP), so that the injector drops and reorders whole
super-frames of up to 64 KiB. NST_FAULTS_PCAP=1 writes netstackd's pcap
(kept as a test output when a transfer fails). Needs root, curl and socat.
"""
import os
import random
import subprocess
import sys
import tempfile
import time
import unittest

from tests.backend.backend_topology import H4, H6, BackendTopology
from tests.interop import interop_util as iu

HTTP_BYTES = iu.env_int("NST_FAULTS_HTTP_BYTES", 256 << 20)
STREAM_BYTES = iu.env_int("NST_FAULTS_STREAM_BYTES", 256 << 20)
# A 256 MiB transfer takes about 10 s under these faults; a stall is
# reported (stalled()) after 5 s without progress.
TIMEOUT = iu.env_int("NST_TRANSFER_TIMEOUT", 120)
PCAP = os.environ.get("NST_FAULTS_PCAP", "") == "1"
HOST_GSO = os.environ.get("NST_FAULTS_HOST_GSO", "") == "1"

HTTP_PORT, ECHO_PORT, UDP_PORT = 8080, 7007, 7008
FAULTS = ["--loss", "0.01", "--reorder", "0.05", "--delay", "10ms",
          "--fault_ingress", "--seed", "13",
          # Faults per wire packet: with host GSO (the backend's default on
          # a TAP) the injector would drop and reorder whole 64 KiB
          # super-frames. Also, host GSO receives every frame into a whole
          # 64 KiB chunk, and out-of-order segments held by TCP then pin
          # the pool until the TAP cannot receive (a known bug, see the
          # issue notes); this test stalled on that.
          # NST_FAULTS_HOST_GSO=1 leaves it out. Note that the TAP's MTU
          # is 65520 either way, so with --swgso too the wire frames are
          # up to 64 KiB: 256 MiB is about 4,200 frames each way, and the
          # 1% loss drops about 45 of them (--mtu 1500 would make it
          # about 180,000 frames).
          *([] if HOST_GSO else ["--swgso"]),
          # At 10 ms of delay a direction holds what it carries in 10 ms:
          # the default 1000 frames would overflow (counted) at a few
          # thousand frames per second.
          "--fault_queue_limit", "20000"]
FAULT_KEYS = [f"fault.{d}.{k}" for d in ("egress", "ingress")
              for k in ("in", "dropped", "reordered", "delayed", "overflow")]

# Sends each size once (a payload seeded by its size, so an echo is known
# by its length) and waits up to a second for it; an echo that comes late
# still counts. Prints "sent N returned R bad B".
UDP_CLIENT = r"""
import random, socket, sys, time
addr, port = sys.argv[1], int(sys.argv[2])
sizes = [int(x) for x in sys.argv[3].split(",")]
s = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET,
                  socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
s.connect((addr, port))
want = {n: random.Random(n).randbytes(n) for n in sizes}
got, bad = set(), 0
def take(deadline):
    global bad
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        s.settimeout(left)
        try:
            d = s.recv(70000)
        except socket.timeout:
            return
        if want.get(len(d)) != d:
            bad += 1
            print(f"echo of {len(d)} bytes differs from what was sent")
        else:
            got.add(len(d))
            return
for n in sizes:
    s.send(want[n])
    take(time.monotonic() + 1.0)
take(time.monotonic() + 2.0)  # the late ones
while len(got) < len(sizes):
    before = len(got)
    take(time.monotonic() + 0.5)
    if len(got) == before:
        break
print(f"sent {len(sizes)} returned {len(got)} bad {bad}")
"""


def delta(after, before, key):
    return after.get(key, 0) - before.get(key, 0)


class BackendFaultsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root")
        for tool in ("curl", "socat"):
            if not iu.have(tool):
                raise unittest.SkipTest(f"needs {tool}")
        cls.topo = BackendTopology()
        cls.root = tempfile.mkdtemp(prefix="nst-be-faults-")
        cls.pcap = os.path.join(cls.root, "faults.pcap") if PCAP else None
        cls.echo_log = os.path.join(cls.root, "echo.log")
        cls.nd = None
        try:
            cls.topo.setup()
            cls.sha = iu.write_random_file(
                os.path.join(cls.root, "blob.bin"), HTTP_BYTES, seed=11)
            h = cls.topo.h
            cls.topo.spawn(h, sys.executable, "-m", "http.server", "--bind",
                           "::", "--directory", cls.root, str(HTTP_PORT))
            cls.topo.tcp_echo_server(ECHO_PORT, cls.echo_log)
            for fam, addr in (("4", H4), ("6", f"[{H6}]")):
                cls.topo.spawn(h, "socat", "-b", "65536",
                               f"UDP{fam}-RECVFROM:{UDP_PORT},bind={addr},fork",
                               "PIPE")
            ok = iu.wait_for(lambda: f":{HTTP_PORT} " in iu.run(
                *cls.topo.in_ns(h, "ss", "-ltnH")).stdout, 10)
            assert ok, f"server on port {HTTP_PORT} did not start"
            ok = iu.wait_for(lambda: all(
                s in iu.run(*cls.topo.in_ns(h, "ss", "-Huln")).stdout
                for s in (f"{H4}:{UDP_PORT}", f"[{H6}]:{UDP_PORT}")), 10)
            assert ok, "UDP echo servers not listening in H"
            flags = FAULTS + (["--pcap", cls.pcap] if cls.pcap else [])
            cls.nd = cls.topo.netstackd(*flags)
            cls.topo.configure_guest()
        except BaseException:
            if cls.nd is not None:
                cls.nd.close()
            cls.topo.close()
            subprocess.run(["rm", "-rf", cls.root], check=False)
            raise

    @classmethod
    def tearDownClass(cls):
        if cls.nd is not None:
            cls.nd.close()
        cls.topo.close()
        subprocess.run(["rm", "-rf", cls.root], check=False)

    def guest(self, *cmd):
        return self.topo.in_ns(self.topo.g, *cmd)

    def on_stall(self, label, port):
        return lambda: self.topo.stalled(self.nd, self.pcap, label, port,
                                         self.echo_log)

    def report(self, label, nbytes, seconds, before):
        """Prints what the transfer cost and asserts that the faults were
        applied to it, in both directions."""
        after = self.nd.counters()
        d = {k: delta(after, before, k) for k in ["tcp.retransmits"] + FAULT_KEYS}
        print(f"{label}: {nbytes} bytes in {seconds:.2f} s, " +
              " ".join(f"{k}={v}" for k, v in d.items()), file=sys.stderr,
              flush=True)
        for direction in ("egress", "ingress"):
            self.assertGreater(d[f"fault.{direction}.delayed"], 0, d)
            # 1% loss: a transfer of a few hundred frames loses some.
            if d[f"fault.{direction}.in"] >= 1000:
                self.assertGreater(d[f"fault.{direction}.dropped"], 0, d)
                self.assertGreater(d[f"fault.{direction}.reordered"], 0, d)
        return d

    def test_1_tcp_both_families(self):
        for addr in (H4, H6):
            with self.subTest(addr=addr, what="http"):
                before = self.nd.counters()
                url = f"http://{iu.url_host(addr)}:{HTTP_PORT}/blob.bin"
                r = iu.curl_download(self.guest(), url, TIMEOUT,
                                     on_stall=self.on_stall(f"curl {addr}",
                                                            HTTP_PORT))
                self.assertEqual(r.received, HTTP_BYTES,
                                 r.stderr + r.stall_info)
                self.assertEqual(r.received_sha.hexdigest(), self.sha)
                d = self.report(f"curl {addr}", r.received, r.seconds, before)
                # Data went to G through egress: some of it was lost, so
                # netstackd's sender must have retransmitted.
                self.assertGreater(d["tcp.retransmits"], 0, d)
            with self.subTest(addr=addr, what="echo"):
                before = self.nd.counters()
                r = iu.socat_stream(self.guest(), iu.socat_tcp(addr, ECHO_PORT),
                                    STREAM_BYTES, TIMEOUT, echo=True,
                                    on_stall=self.on_stall(f"echo {addr}",
                                                           ECHO_PORT))
                self.assertEqual(r.received, STREAM_BYTES,
                                 r.stderr + r.stall_info)
                self.assertEqual(r.received_sha.hexdigest(),
                                 r.sent_sha.hexdigest())
                d = self.report(f"socat echo {addr} (each way)", STREAM_BYTES,
                                r.seconds, before)
                self.assertGreater(d["tcp.retransmits"], 0, d)

    def test_2_udp_echo_both_families(self):
        rng = random.Random(17)
        sizes = sorted({1, 2, 7, 100, 512, 1400, 1472, 1473, 2000, 4096,
                        8972, 16384, 32768, 50000, 64000, 65000}
                       | {rng.randint(1, 65000) for _ in range(184)})
        for addr in (H4, H6):
            with self.subTest(addr=addr):
                before = self.nd.counters()
                t = time.monotonic()
                r = iu.run(*self.guest(sys.executable, "-c", UDP_CLIENT, addr,
                                       str(UDP_PORT), ",".join(map(str, sizes))),
                           check=False, timeout=600)
                seconds = time.monotonic() - t
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                last = r.stdout.strip().splitlines()[-1].split()
                sent, returned, bad = int(last[1]), int(last[3]), int(last[5])
                self.report(f"udp echo {addr} ({sent} datagrams, "
                            f"{returned} returned)", sum(sizes), seconds, before)
                self.assertEqual(sent, len(sizes))
                self.assertEqual(bad, 0, r.stdout)
                self.assertGreaterEqual(returned, 0.8 * sent, r.stdout)

    def test_3_exit(self):
        nd = self.nd
        self.assertEqual(nd.stop(), 0, nd.log())
        c = nd.exit_counters()
        print(nd.log(), file=sys.stderr)
        self.assertEqual(c.get("backend.tcp_host_fds_open"), 0, nd.log())
        self.assertGreater(c.get("fault.egress.dropped", 0), 0)
        self.assertGreater(c.get("fault.ingress.dropped", 0), 0)
        self.assertGreater(c.get("backend.udp.opened", 0), 0)


if __name__ == "__main__":
    unittest.main()
