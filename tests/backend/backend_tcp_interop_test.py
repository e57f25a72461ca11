#!/usr/bin/env python3
"""netstackd --backend: the Linux kernel as the guest, a namespace as the host.

  G (the guest kernel) --TAP-- netstackd --backend (runs in H) -- host sockets in H
  H ("the host"): lo and one veth end, whose peer lies in a sink namespace S
  with nothing else. H's servers listen on its veth addresses and on its
  loopback. H has no default route: nothing can leave the machine, and an
  address outside H's networks is unroutable there.

Before netstackd starts the test asserts that H holds only lo and its veth
end and S only lo and the other end. G is configured statically
(10.0.2.100/24 via 10.0.2.2, fd00::100/64 via fd00::2).

Shown, over IPv4 and IPv6:
  - curl in G downloads NST_BACKEND_HTTP_BYTES (default 256 MiB) from
    python3's http.server in H: sha256 equal;
  - socat in G sends NST_BACKEND_STREAM_BYTES (default 256 MiB) to
    echo_server.py in H and reads them back: sha256 equal;
  - a connect to a closed port of H fails with ECONNREFUSED in < 100 ms;
  - a connect to an address H has no route to fails with EHOSTUNREACH or
    ENETUNREACH (an ICMP error from the backend), not a timeout;
  - without --host-loopback, G cannot reach H's 127.0.0.1 through
    10.0.2.2 (refused, counted); with it, it can.
netstackd's exit counters must show every flow closed and no host fd open.
Needs root, curl and socat.
"""
import os
import subprocess
import sys
import tempfile
import time
import unittest

from tests.backend.backend_topology import H4, H6, BackendTopology
from tests.interop import interop_util as iu

HTTP_BYTES = iu.env_int("NST_BACKEND_HTTP_BYTES", 256 << 20)
STREAM_BYTES = iu.env_int("NST_BACKEND_STREAM_BYTES", 256 << 20)
TIMEOUT = iu.env_int("NST_TRANSFER_TIMEOUT", 120)

HTTP_PORT, ECHO_PORT, CLOSED_PORT, LOOP_PORT = 8080, 7007, 9, 8081
UNROUTABLE4, UNROUTABLE6 = "203.0.113.9", "2001:db8:99::9"

CONNECT_PROBE = r"""
import errno, socket, sys, time
family = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
s = socket.socket(family, socket.SOCK_STREAM)
s.settimeout(float(sys.argv[3]))
t = time.monotonic()
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
    print("connected", time.monotonic() - t)
except socket.timeout:
    print("timeout", time.monotonic() - t)
except OSError as e:
    print(errno.errorcode.get(e.errno, str(e.errno)), time.monotonic() - t)
"""

# Run in G: opens the TAP as a parent (libvirt, podman) would, then becomes
# netstackd in H with the fd inherited (argv: flags of the TAP, then
# netstackd's command line).
TAP_FD_PARENT = r"""
import fcntl, os, struct, sys
flags = int(sys.argv[1], 16)
fd = os.open("/dev/net/tun", os.O_RDWR)
fcntl.ioctl(fd, 0x400454CA, struct.pack("16sH", b"nsttap", flags))  # TUNSETIFF
os.set_inheritable(fd, True)
argv = [a.replace("{fd}", str(fd)) for a in sys.argv[2:]]
os.execvp(argv[0], argv)
"""
IFF_TAP, IFF_NO_PI, IFF_VNET_HDR = 0x0002, 0x1000, 0x4000
IFF_MULTI_QUEUE = 0x0100


class BackendTcpTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root")
        for tool in ("curl", "socat"):
            if not iu.have(tool):
                raise unittest.SkipTest(f"needs {tool}")
        cls.topo = BackendTopology()
        cls.root = tempfile.mkdtemp(prefix="nst-be-www-")
        cls.loop_root = tempfile.mkdtemp(prefix="nst-be-lo-")
        cls.echo_log = os.path.join(cls.root, "echo.log")
        cls.nd = None
        try:
            cls.topo.setup()
            cls.sha = iu.write_random_file(
                os.path.join(cls.root, "blob.bin"), HTTP_BYTES, seed=7)
            with open(os.path.join(cls.loop_root, "hello.txt"), "w") as f:
                f.write("loopback only\n")
            h = cls.topo.h
            cls.topo.spawn(h, sys.executable, "-m", "http.server", "--bind",
                           "::", "--directory", cls.root, str(HTTP_PORT))
            cls.topo.spawn(h, sys.executable, "-m", "http.server", "--bind",
                           "127.0.0.1", "--directory", cls.loop_root,
                           str(LOOP_PORT))
            cls.topo.tcp_echo_server(ECHO_PORT, cls.echo_log)
            for port in (HTTP_PORT, LOOP_PORT):
                ok = iu.wait_for(lambda: f":{port} " in iu.run(
                    *cls.topo.in_ns(h, "ss", "-ltnH")).stdout, 10)
                assert ok, f"server on port {port} did not start"
        except BaseException:
            cls.topo.close()
            raise

    @classmethod
    def tearDownClass(cls):
        if cls.nd is not None:
            cls.nd.close()
        cls.topo.close()
        for d in (cls.root, cls.loop_root):
            subprocess.run(["rm", "-rf", d], check=False)

    def start_netstackd(self, *extra):
        return self.topo.netstackd(*extra)

    def guest(self, *cmd):
        return self.topo.in_ns(self.topo.g, *cmd)

    def probe(self, addr, port, timeout=5.0):
        out = iu.run(*self.guest(sys.executable, "-c", CONNECT_PROBE, addr,
                                 str(port), str(timeout))).stdout.split()
        return out[0], float(out[1])

    def stalled(self, nd, label, port):
        return self.topo.stalled(nd, None, label, port, self.echo_log)

    def check_exit(self, nd):
        self.assertEqual(nd.stop(), 0, nd.log())
        c = nd.exit_counters()
        self.assertEqual(c.get("backend.tcp_host_fds_open"), 0, nd.log())
        return c

    def tap_attr(self, name):
        return iu.run(*self.guest("cat", f"/sys/class/net/nsttap/{name}"))\
            .stdout.strip()

    def test_1_without_host_loopback(self):
        nd = type(self).nd = self.start_netstackd()
        self.topo.configure_guest()
        try:
            with self.subTest(what="TAP setup"):
                # Host GSO by default: a virtio-net header on every frame
                # (IFF_VNET_HDR 0x4000), and the guest may send TSO frames.
                self.assertTrue(int(self.tap_attr("tun_flags"), 16) & 0x4000)
                self.assertEqual(self.tap_attr("mtu"), "65520")
                # 6 MiB of 65534-byte frames is fewer than the default 1000.
                self.assertEqual(self.tap_attr("tx_queue_len"), "1000")
            for addr in (H4, H6):
                with self.subTest(addr=addr, what="http"):
                    url = f"http://{iu.url_host(addr)}:{HTTP_PORT}/blob.bin"
                    t = time.monotonic()
                    r = iu.curl_download(
                        self.guest(), url, TIMEOUT,
                        on_stall=lambda: self.stalled(nd, "curl", HTTP_PORT))
                    dt = time.monotonic() - t
                    self.assertEqual(r.received, HTTP_BYTES,
                                     r.stderr + r.stall_info)
                    self.assertEqual(r.received_sha.hexdigest(), self.sha)
                    print(f"curl {addr}: {HTTP_BYTES >> 20} MiB in {dt:.2f} s",
                          file=sys.stderr)
                with self.subTest(addr=addr, what="echo"):
                    target = (f"TCP6:[{addr}]:{ECHO_PORT}" if ":" in addr
                              else f"TCP4:{addr}:{ECHO_PORT}")
                    r = iu.socat_stream(
                        self.guest(), target, STREAM_BYTES, TIMEOUT, echo=True,
                        on_stall=lambda: self.stalled(nd, "echo", ECHO_PORT))
                    self.assertEqual(r.received, STREAM_BYTES,
                                     r.stderr + r.stall_info)
                    self.assertEqual(r.received_sha.hexdigest(),
                                     r.sent_sha.hexdigest())
                    print(f"socat echo {addr}: {STREAM_BYTES >> 20} MiB each "
                          f"way in {r.seconds:.2f} s", file=sys.stderr)
                with self.subTest(addr=addr, what="refused"):
                    what, dt = self.probe(addr, CLOSED_PORT)
                    self.assertEqual(what, "ECONNREFUSED")
                    self.assertLess(dt, 0.1)
            for addr in (UNROUTABLE4, UNROUTABLE6):
                with self.subTest(addr=addr, what="unroutable"):
                    what, dt = self.probe(addr, 80)
                    self.assertIn(what, ("EHOSTUNREACH", "ENETUNREACH"))
                    self.assertLess(dt, 2.0)
            with self.subTest(what="no host loopback"):
                what, _ = self.probe("10.0.2.2", LOOP_PORT)
                self.assertEqual(what, "ECONNREFUSED")
                c = nd.counters()
                self.assertGreaterEqual(c["backend.tcp_refused_host_loopback"], 1)
        finally:
            c = self.check_exit(nd)
            print(nd.log(), file=sys.stderr)
        self.assertGreaterEqual(c["backend.tcp_end.closed"], 4)
        self.assertGreaterEqual(c["backend.tcp_end.connect_refused"], 2)
        self.assertEqual(c["backend.tcp_end.connect_net_unreachable"] +
                         c["backend.tcp_end.connect_host_unreachable"], 2)

    def test_2_with_host_loopback(self):
        nd = type(self).nd = self.start_netstackd("--host-loopback",
                                                  "--mtu", "1500")
        try:
            # A receive window (6 MiB) of 1514-byte frames fits the TAP's
            # queue, so a burst the window allows is not dropped there.
            self.assertEqual(self.tap_attr("mtu"), "1500")
            self.assertEqual(self.tap_attr("tx_queue_len"), "4156")
            r = iu.run(*self.guest("curl", "-sS", "-m", "10",
                                   f"http://10.0.2.2:{LOOP_PORT}/hello.txt"),
                       check=False)
            self.assertEqual(r.stdout, "loopback only\n", r.stderr)
        finally:
            self.check_exit(nd)

    def fd_netstackd(self, tap_flags, *extra):
        """netstackd in H on a TAP fd that a parent in G opened (one queue
        of BackendTopology's multi_queue TAP)."""
        tap_flags |= IFF_MULTI_QUEUE
        self.topo.assert_isolated()
        nd = iu.Netstackd([])
        nd.args = self.guest(
            sys.executable, "-c", TAP_FD_PARENT, f"{tap_flags:x}",
            *self.topo.in_ns(self.topo.h, iu.NETSTACKD, "--backend", "--fd",
                             "{fd}", "--fd-type", "tap", "--dns-upstream",
                             "127.0.0.1", *extra))
        return nd

    def test_3_tap_fd_from_a_parent(self):
        # With IFF_VNET_HDR: host GSO, as on a TAP we open ourselves.
        nd = type(self).nd = self.fd_netstackd(
            IFF_TAP | IFF_NO_PI | IFF_VNET_HDR)
        nd.start()
        try:
            self.assertIn("running on tap:nsttap@fd ", nd.log())
            url = f"http://{H4}:{HTTP_PORT}/blob.bin"
            r = iu.curl_download(self.guest(), url, TIMEOUT)
            self.assertEqual(r.received, HTTP_BYTES, r.stderr)
            self.assertEqual(r.received_sha.hexdigest(), self.sha)
        finally:
            self.check_exit(nd)
        # Without it, host GSO cannot work: a clear refusal, exit 1.
        nd = type(self).nd = self.fd_netstackd(IFF_TAP | IFF_NO_PI)
        with self.assertRaises(AssertionError) as refused:
            nd.start()
        self.assertIn("without IFF_VNET_HDR", str(refused.exception))
        self.assertEqual(nd.proc.wait(timeout=5), 1)
        # ... unless GSO is turned off.
        nd = type(self).nd = self.fd_netstackd(IFF_TAP | IFF_NO_PI, "--gso",
                                               "0")
        nd.start()
        try:
            r = iu.curl_download(
                self.guest(), f"http://{H4}:{HTTP_PORT}/blob.bin", TIMEOUT)
            self.assertEqual(r.received_sha.hexdigest(), self.sha, r.stderr)
        finally:
            self.check_exit(nd)


if __name__ == "__main__":
    unittest.main()
