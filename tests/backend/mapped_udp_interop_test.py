#!/usr/bin/env python3
"""A guest's UDP to an IPv4-mapped IPv6 address never reaches the host's
loopback (review 2026-12-06, finding 3).

The review's proof of concept, as a test: the guest kernel would route
[::ffff:127.0.0.1] as IPv4 to its own loopback, so the guest writes the
frame itself through AF_PACKET (CMD has CAP_NET_RAW in its own network
namespace; a VM owns its NIC): Ethernet + IPv6 (fd00::100 -> the mapped
address) + UDP with a correct checksum, to netstackd's MAC. An AF_INET6
host socket connected to ::ffff:127.0.0.1 talks IPv4 to the host's
127.0.0.1, and ::ffff:0.0.0.0 is 0.0.0.0, which Linux also takes as the
loopback. Before the fix both reached a server on H's 127.0.0.1 without
--host-loopback and their replies came back to the guest.

The topology of backend_topology.py (G the guest kernel on a TAP,
netstackd --backend in H, no route off the machine). In H a UDP server on
127.0.0.1:5555 (what must stay unreachable) and one on [2001:db8:1::1]:5556
(the control: the same hand-built frame to an ordinary address is relayed
and answered, so a silent 5555 means the gateway refused, not that the
frame was wrong). The guest sends to [::ffff:127.0.0.1]:5555,
[::ffff:0.0.0.0]:5555 and the IPv4-compatible [::7f00:1]:5555, then the
control. Shown: the control's reply arrives; the loopback server gets
nothing and no reply comes from a mapped address; netstackd counts
drop.ipv6_mapped_destination 3 and opened one UDP flow (the control's).
Needs root.
"""
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

from tests.backend.backend_topology import H6, BackendTopology
from tests.interop import interop_util as iu

TAP = "nsttap"
LOOPBACK_PORT = 5555
CONTROL_PORT = 5556
GUEST_PORT = 40000

# A UDP server in H: binds every "addr port" of argv[2:], appends one JSON
# line per datagram to argv[1] and answers it with b"reply:" + datagram.
SERVER = r"""
import json, select, socket, sys
log = sys.argv[1]
socks = []
for spec in sys.argv[2:]:
    addr, port = spec.rsplit(" ", 1)
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_DGRAM)
    s.bind((addr, int(port)))
    socks.append(s)
while True:
    for s in select.select(socks, [], [])[0]:
        data, peer = s.recvfrom(65535)
        with open(log, "a") as f:
            f.write(json.dumps({"at": s.getsockname()[:2], "from": peer[:2],
                                "data": data.decode(errors="replace")}) + "\n")
        s.sendto(b"reply:" + data, peer)
"""

# The guest's side, run in G: sends each [dst, port, payload] of argv[4]
# as a hand-built Ethernet + IPv6 + UDP frame from argv[3]:40000 to the
# gateway's MAC (argv[2]) on AF_PACKET, then prints as JSON every UDP
# datagram to its port that the TAP brings within 2 s after the last.
GUEST = r"""
import json, socket, struct, sys, time
iface, gw_mac, src6 = sys.argv[1], bytes.fromhex(sys.argv[2].replace(":", "")), sys.argv[3]
specs = json.loads(sys.argv[4])
SPORT = %d
ETH_P_IPV6 = 0x86dd
def csum(data):
    if len(data) %% 2:
        data += b"\0"
    s = sum(struct.unpack("!%%dH" %% (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff
with open(f"/sys/class/net/{iface}/address") as f:
    my_mac = bytes.fromhex(f.read().strip().replace(":", ""))
src = socket.inet_pton(socket.AF_INET6, src6)
# Our kernel would answer the control's reply with a port unreachable.
absorb = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
absorb.bind(("::", SPORT))
raw = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_IPV6))
raw.bind((iface, ETH_P_IPV6))
for dst6, dport, payload in specs:
    dst = socket.inet_pton(socket.AF_INET6, dst6)
    body = payload.encode()
    n = 8 + len(body)
    udp = struct.pack("!HHHH", SPORT, dport, n, 0) + body
    c = csum(src + dst + struct.pack("!IxxxB", n, 17) + udp) or 0xffff
    udp = udp[:6] + struct.pack("!H", c) + udp[8:]
    ip = struct.pack("!IHBB", 6 << 28, n, 17, 64) + src + dst
    raw.send(gw_mac + my_mac + struct.pack("!H", ETH_P_IPV6) + ip + udp)
replies = []
raw.settimeout(0.2)
deadline = time.time() + 2
while time.time() < deadline:
    try:
        frame = raw.recv(70000)
    except socket.timeout:
        continue
    ip = frame[14:]
    if len(ip) < 48 or ip[6] != 17 or ip[24:40] != src:
        continue
    sport, dport = struct.unpack("!HH", ip[40:44])
    if dport != SPORT:
        continue
    replies.append({"from": socket.inet_ntop(socket.AF_INET6, ip[8:24]),
                    "port": sport, "data": ip[48:].decode(errors="replace")})
print(json.dumps(replies))
""" % GUEST_PORT


class MappedUdpTest(unittest.TestCase):
    def setUp(self):
        if os.geteuid() != 0:
            self.skipTest("needs root")
        self.topo = BackendTopology()
        self.tmp = tempfile.mkdtemp(prefix="nst-mapped-udp-")
        self.nd = None
        self.addCleanup(self.cleanup)
        self.topo.setup()
        self.topo.configure_guest()

    def cleanup(self):
        if self.nd is not None:
            self.nd.close()
        self.topo.close()
        subprocess.run(["rm", "-rf", self.tmp], check=False)

    def gateway_mac(self):
        """netstackd's MAC, from G's neighbour table after G's kernel
        talked to fd00::2."""
        g = self.topo.g
        mac = []

        def resolved():
            iu.run(*self.topo.in_ns(g, sys.executable, "-c",
                                    "import socket; socket.socket(socket."
                                    "AF_INET6, socket.SOCK_DGRAM).sendto("
                                    "b'x', ('fd00::2', 9))"), check=False)
            out = iu.run("ip", "-n", g, "-6", "neigh", "show", "fd00::2",
                         "dev", TAP).stdout.split()
            if "lladdr" in out:
                mac.append(out[out.index("lladdr") + 1])
                return True
            return False

        self.assertTrue(iu.wait_for(resolved, 10), "fd00::2 not resolved")
        return mac[0]

    def test_mapped_destinations_never_reach_host_loopback(self):
        topo = self.topo
        log = os.path.join(self.tmp, "server.log")
        open(log, "w").close()
        topo.spawn(topo.h, sys.executable, "-c", SERVER, log,
                   f"127.0.0.1 {LOOPBACK_PORT}", f"{H6} {CONTROL_PORT}")
        ok = iu.wait_for(lambda: all(
            s in iu.run(*topo.in_ns(topo.h, "ss", "-Huln")).stdout
            for s in (f"127.0.0.1:{LOOPBACK_PORT}", f"[{H6}]:{CONTROL_PORT}")),
            10)
        self.assertTrue(ok, "the UDP servers do not listen in H")
        # No --host-loopback: the gateway's address does not lead to H's
        # loopback, and neither may any other.
        self.nd = topo.netstackd()
        gw_mac = self.gateway_mac()

        specs = [["::ffff:127.0.0.1", LOOPBACK_PORT, "to-mapped-127.0.0.1"],
                 ["::ffff:0.0.0.0", LOOPBACK_PORT, "to-mapped-0.0.0.0"],
                 ["::7f00:1", LOOPBACK_PORT, "to-compatible-127.0.0.1"],
                 [H6, CONTROL_PORT, "control"]]
        out = iu.run(*topo.in_ns(topo.g, sys.executable, "-c", GUEST, TAP,
                                 gw_mac, "fd00::100", json.dumps(specs)),
                     timeout=30).stdout
        replies = json.loads(out)
        time.sleep(0.5)  # anything on its way to the loopback server
        with open(log) as f:
            got = [json.loads(l) for l in f if l.strip()]
        counters = self.nd.counters()
        detail = (f"server got {got}\nguest got {replies}\n"
                  + "\n".join(f"{k} {v}" for k, v in sorted(counters.items())
                              if "udp" in k or "mapped" in k))

        # The control: the hand-built frame is right, relayed and answered.
        self.assertIn({"from": H6, "port": CONTROL_PORT,
                       "data": "reply:control"}, replies, detail)
        self.assertEqual([g["data"] for g in got], ["control"], detail)
        # Nothing from a mapped (or compatible) address came back.
        self.assertEqual([r for r in replies if r["from"] != H6], [], detail)
        self.assertEqual(counters.get("drop.ipv6_mapped_destination"), 3,
                         detail)
        self.assertEqual(counters.get("backend.udp.opened"), 1, detail)


if __name__ == "__main__":
    unittest.main()
