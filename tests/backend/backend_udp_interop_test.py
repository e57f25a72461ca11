#!/usr/bin/env python3
"""netstackd --backend is the whole backend: DHCP, SLAAC, UDP, ping and DNS.

The topology of backend_topology.py (G the guest kernel on a TAP,
netstackd --backend in H, H's veth peer alone in a sink namespace S, no
default route in H), but G has no static configuration at all:
  - G gets 10.0.2.100 from busybox udhcpc (router 10.0.2.2, DNS 10.0.2.3)
    and an fd00::/64 address and a default route by SLAAC;
  - a UDP echo (socat in H) of 1..65,000-byte datagrams, IPv4 and IPv6,
    bytes equal;
  - ping -c 3 from G to H's address gets 3 replies, IPv4 and IPv6;
  - a name only dnsmasq (on H's loopback 127.0.0.53, the --dns-upstream)
    knows resolves from G through 10.0.2.3 and fd00::3, over UDP and TCP.
netstackd's counters must show the DHCP lease, the RA, the UDP flows, the
pings and the DNS queries. Needs root, busybox, socat, dnsmasq, dig, ping.
"""
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import unittest

from tests.backend.backend_topology import H4, H6, BackendTopology
from tests.interop import interop_util as iu

ECHO_PORT = 7008
DNSMASQ = "127.0.0.53"
TAP = "nsttap"

GUEST_CLIENT = r"""
import socket, sys, random
addr, port, fam = sys.argv[1], int(sys.argv[2]), sys.argv[3]
sizes = [int(x) for x in sys.argv[4].split(",")]
s = socket.socket(socket.AF_INET if fam == "4" else socket.AF_INET6,
                  socket.SOCK_DGRAM)
s.settimeout(3)
s.connect((addr, port))
bad = 0
retries = 0
for n in sizes:
  data = random.Random(n).randbytes(n)
  for attempt in range(3):
    s.send(data)
    try:
      got = s.recv(70000)
    except socket.timeout:
      retries += 1
      continue
    break
  else:
    print(f"size {n}: no answer"); bad += 1; continue
  if got != data:
    print(f"size {n}: got {len(got)} bytes, not equal"); bad += 1
print(f"sizes {len(sizes)} bad {bad} retries {retries}")
sys.exit(1 if bad else 0)
"""


class BackendUdpTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root")
        for tool in ("busybox", "socat", "dnsmasq", "dig", "ping"):
            if not iu.have(tool):
                raise unittest.SkipTest(f"needs {tool}")
        cls.topo = BackendTopology()
        cls.tmp = tempfile.mkdtemp(prefix="nst-be-udp-")
        cls.nd = None
        cls.client = None
        try:
            cls.topo.setup()
            h, g = cls.topo.h, cls.topo.g
            # Ping sockets for netstackd in H (root's gid is 0).
            iu.run(*cls.topo.in_ns(h, "sysctl", "-qw",
                                   "net.ipv4.ping_group_range=0 2147483647"))
            for key, value in (("accept_ra", 1), ("autoconf", 1),
                               ("forwarding", 0)):
                iu.run(*cls.topo.in_ns(g, "sysctl", "-qw",
                                       f"net.ipv6.conf.{TAP}.{key}={value}"))
            for fam, addr in (("4", H4), ("6", f"[{H6}]")):
                cls.topo.spawn(h, "socat", "-b", "65536",
                               f"UDP{fam}-RECVFROM:{ECHO_PORT},bind={addr},fork",
                               "PIPE")
            cls.topo.spawn(h, "dnsmasq", "--keep-in-foreground", "--no-resolv",
                           "--no-hosts", "--no-poll", "--bind-interfaces",
                           f"--listen-address={DNSMASQ}", "--port=53",
                           "--address=/backend.test/10.77.0.9",
                           "--address=/backend.test/fd77::9",
                           f"--pid-file={cls.tmp}/dnsmasq.pid", "--user=root")
            ok = iu.wait_for(lambda: iu.run(*cls.topo.in_ns(
                h, "dig", f"@{DNSMASQ}", "+short", "+time=1", "+tries=1",
                "backend.test", "A"), check=False).stdout.strip()
                == "10.77.0.9", 10)
            assert ok, "dnsmasq does not answer in H"
            ok = iu.wait_for(lambda: all(
                s in iu.run(*cls.topo.in_ns(h, "ss", "-Huln")).stdout
                for s in (f"{H4}:{ECHO_PORT}", f"[{H6}]:{ECHO_PORT}")), 10)
            assert ok, "socat echo servers not listening in H"
        except BaseException:
            cls.topo.close()
            raise

    @classmethod
    def tearDownClass(cls):
        if cls.client is not None and cls.client.poll() is None:
            cls.client.kill()
            cls.client.wait()
        if cls.nd is not None:
            cls.nd.close()
        cls.topo.close()
        subprocess.run(["rm", "-rf", cls.tmp], check=False)

    def guest(self, *cmd, **kw):
        return iu.run(*self.topo.in_ns(self.topo.g, *cmd), check=False, **kw)

    def test_1_start_and_configure_guest(self):
        topo = self.topo
        # G has nothing but lo and the TAP, and no address on it.
        self.assertEqual(topo.links(topo.g), ["lo", TAP])
        # netstackd() first asserts that nothing can leave the machine.
        self.assertEqual(TAP, "nsttap")
        type(self).nd = nd = topo.netstackd(dns_upstream=DNSMASQ)
        iu.run("ip", "-n", topo.g, "link", "set", TAP, "up")

        script = os.path.join(self.tmp, "udhcpc.sh")
        with open(script, "w") as f:
            f.write(f"""#!/bin/sh
env > {self.tmp}/udhcpc.$1
if [ "$1" = bound ]; then
  ip addr add $ip/$mask dev $interface
  ip route add default via $router dev $interface
fi
""")
        os.chmod(script, 0o755)
        type(self).client = subprocess.Popen(
            topo.in_ns(topo.g, "busybox", "udhcpc", "-i", TAP, "-f", "-t",
                       "5", "-T", "1", "-s", script),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        bound = os.path.join(self.tmp, "udhcpc.bound")
        self.assertTrue(iu.wait_for(lambda: os.path.exists(bound), 15),
                        "udhcpc got no lease: " + nd.log())
        with open(bound) as f:
            env = f.read()
        self.assertIn("ip=10.0.2.100\n", env)
        self.assertIn("router=10.0.2.2\n", env)
        self.assertIn("dns=10.0.2.3", env)

        def v4_ready():
            r = self.guest("ip", "-4", "route", "show", "default").stdout
            return "via 10.0.2.2" in r
        self.assertTrue(iu.wait_for(v4_ready, 5))

        def slaac_ready():
            a = self.guest("ip", "-6", "addr", "show", "dev", TAP).stdout
            r = self.guest("ip", "-6", "route", "show", "default").stdout
            return (re.search(r"inet6 fd00::[0-9a-f:]+/64 scope global"
                              r"(?! tentative)", a) is not None
                    and "tentative" not in a and "via fe80::" in r)
        self.assertTrue(iu.wait_for(slaac_ready, 20),
                        self.guest("ip", "-6", "addr").stdout +
                        self.guest("ip", "-6", "route").stdout)
        c = nd.counters()
        self.assertGreaterEqual(c.get("backend.dhcp4.leases_granted", 0), 1,
                                {k: v for k, v in c.items() if "dhcp" in k})
        self.assertTrue(any(k.startswith("backend.ra.") for k in c), c)

    def test_2_udp_echo_every_size_both_families(self):
        rng = random.Random(13)
        sizes = sorted({1, 2, 7, 100, 512, 1400, 1472, 1473, 2000, 4096,
                        8972, 16384, 32768, 50000, 64000, 65000}
                       | {rng.randint(1, 65000) for _ in range(20)})
        for fam, addr in (("4", H4), ("6", H6)):
            with self.subTest(family=fam):
                r = self.guest(sys.executable, "-c", GUEST_CLIENT, addr,
                               str(ECHO_PORT), fam, ",".join(map(str, sizes)),
                               timeout=300)
                print(f"IPv{fam} echo: {r.stdout.strip()}", flush=True)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        c = self.nd.counters()
        self.assertGreaterEqual(c.get("backend.udp.opened", 0), 2)
        self.assertGreaterEqual(c.get("backend.udp.datagrams_to_guest", 0),
                                2 * len(sizes))

    def test_3_ping_both_families(self):
        for args in (["ping", "-c", "3", "-W", "2", H4],
                     ["ping", "-6", "-c", "3", "-W", "2", H6]):
            with self.subTest(args=args):
                r = self.guest(*args, timeout=30)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                self.assertIn("3 received", r.stdout)
        c = self.nd.counters()
        self.assertGreaterEqual(c.get("backend.ping.replies", 0), 6)

    def test_4_dns_udp_and_tcp_both_families(self):
        for server in ("10.0.2.3", "fd00::3"):
            for proto in ("+notcp", "+tcp"):
                for qtype, want in (("A", "10.77.0.9"), ("AAAA", "fd77::9")):
                    with self.subTest(server=server, proto=proto,
                                      qtype=qtype):
                        r = self.guest("dig", f"@{server}", proto, "+short",
                                       "+time=2", "+tries=2", "backend.test",
                                       qtype)
                        self.assertEqual(r.stdout.strip(), want,
                                         r.stdout + r.stderr)
        c = self.nd.counters()
        self.assertGreaterEqual(c.get("backend.dns.answers.udp", 0), 4)
        self.assertGreaterEqual(c.get("backend.dns.answers.tcp", 0), 4)

    def test_5_exit_counters(self):
        self.assertEqual(self.nd.stop(), 0, self.nd.log())
        c = self.nd.exit_counters()
        self.assertEqual(c.get("backend.tcp_host_fds_open"), 0, self.nd.log())
        self.assertIn("backend.udp.opened", c)


if __name__ == "__main__":
    unittest.main()
