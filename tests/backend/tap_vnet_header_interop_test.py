#!/usr/bin/env python3
"""A guest that writes its own virtio-net headers to netstackd's TAP
(issue #35).

backend_topology.py's G, H and S: netstackd --backend --tap --mtu 1500
in H (host GSO, so the TAP carries a virtio-net header), H with no
default route.
A process in G with CAP_NET_RAW opens an AF_PACKET socket on the TAP
with PACKET_VNET_HDR and writes TCP frames to netstackd whose headers
lie: gso_size 0, a gso_size past the TAP's MTU, gso_type TCPV6
on an IPv4 frame, and an IPv4 length that disagrees with the GSO frame;
hdr_len, csum_start and csum_offset past the frame. Linux refuses some at
send() (EINVAL) and passes others on. netstackd must count each one
that reaches it under link.tap.rx_bad_vnet_hdr.<reason>, stay up, and
serve the next TCP flow of G's (an echo through netstackd to H).
Needs root.
"""
import json
import os
import subprocess
import sys
import unittest

from tests.backend.backend_topology import H4, BackendTopology
from tests.interop import interop_util as iu

ECHO_PORT = 7035
TAP = "nsttap"

# Run in G: writes the lies and prints {what: "sent" | "EINVAL ..."}.
LIAR = r"""
import json, socket, struct, sys
tap, dst_mac, src_ip, dst_ip, port, mtu = sys.argv[1:7]
mtu = int(mtu)
# Past the MTU: IP + TCP headers + gso_size > mtu; the frame one byte
# longer than a segment, or Linux takes it for no GSO frame at all.
big = mtu - 39
def csum(b):
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16: s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff
src_mac = open(f"/sys/class/net/{tap}/address").read().strip()
eth = bytes.fromhex(dst_mac.replace(":", "")) + \
      bytes.fromhex(src_mac.replace(":", "")) + b"\x08\x00"
def tcp4(n, ip_len=None):
    tcp = struct.pack("!HHIIBBHHH", 40000, int(port), 1, 1, 0x50, 0x18,
                      65535, 0, 0) + b"x" * n
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, ip_len or 20 + len(tcp), 1,
                     0, 64, 6, 0, socket.inet_aton(src_ip),
                     socket.inet_aton(dst_ip))
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    return eth + ip + tcp
def vh(flags, gso, hdr_len, gso_size, cs, co):
    return struct.pack("<BBHHHH", flags, gso, hdr_len, gso_size, cs, co)
lies = {
    "gso_size 0": (vh(1, 1, 54, 0, 34, 16), tcp4(4000)),
    "gso_size past the MTU": (vh(1, 1, 54, big, 34, 16), tcp4(big + 1)),
    "TCPV6 on IPv4": (vh(1, 4, 54, 1448, 34, 16), tcp4(4000)),
    "IP length 100": (vh(1, 1, 54, 1448, 34, 16), tcp4(4000, ip_len=100)),
    "hdr_len past": (vh(1, 1, 60000, 1448, 34, 16), tcp4(4000)),
    "csum_start past": (vh(1, 0, 0, 0, 5000, 16), tcp4(100)),
    "csum_offset past": (vh(1, 0, 0, 0, 34, 5000), tcp4(100)),
}
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
s.setsockopt(263, 15, 1)  # SOL_PACKET, PACKET_VNET_HDR
s.bind((tap, 0))
out = {}
for what, (h, f) in lies.items():
    try:
        s.send(h + f)
        out[what] = "sent"
    except OSError as e:
        out[what] = f"{e.strerror}"
print(json.dumps(out))
"""

ECHO = r"""
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
data = bytes(range(256)) * 4096
c.sendall(data)
c.shutdown(socket.SHUT_WR)
got = b""
while True:
    b = c.recv(65536)
    if not b: break
    got += b
sys.exit(0 if got == data else 1)
"""


class TapVnetHeaderTest(unittest.TestCase):
    def setUp(self):
        if os.geteuid() != 0:
            self.skipTest("needs root")
        self.topo = BackendTopology()
        self.addCleanup(self.topo.close)
        self.topo.setup()
        self.topo.configure_guest()
        self.topo.tcp_echo_server(ECHO_PORT)

    def echo(self):
        return iu.run(*self.topo.in_ns(self.topo.g, sys.executable, "-c",
                                       ECHO, H4, str(ECHO_PORT)),
                      check=False).returncode

    def test_lying_headers_are_counted_and_the_next_flow_served(self):
        topo = self.topo
        # MTU 1500: at 65520 a frame past the MTU no longer fits IP's
        # 16-bit lengths. netstackd sets the TAP's MTU.
        nd = topo.netstackd("--mtu", "1500")  # asserts H's isolation first
        self.addCleanup(nd.close)
        self.assertEqual(self.echo(), 0, f"echo before{nd.log()}")
        # netstackd's MAC, from G's neighbour table after the echo.
        neigh = iu.run("ip", "-n", topo.g, "-j", "neigh", "show", "10.0.2.2",
                       "dev", TAP).stdout
        mac = json.loads(neigh)[0]["lladdr"]
        link = json.loads(iu.run("ip", "-n", topo.g, "-j", "link", "show",
                                 TAP).stdout)[0]
        mtu = link["mtu"]
        self.assertEqual(mtu, 1500)
        before = nd.counters()
        r = iu.run(*topo.in_ns(topo.g, sys.executable, "-c", LIAR, TAP, mac,
                               "10.0.2.100", H4, str(ECHO_PORT), str(mtu)))
        sent = json.loads(r.stdout)
        print("PACKET_VNET_HDR lies written in G:", sent, flush=True)
        # A flow after the lies: once it is served, they were all read.
        self.assertEqual(self.echo(), 0, f"echo after{nd.log()}")
        c = nd.counters()
        self.assertIsNone(nd.proc.poll(), nd.log())
        bad = {k: v for k, v in c.items()
               if k.startswith("link.tap.rx_bad_vnet_hdr")}
        print(f"netstackd (TAP MTU {mtu}):", bad, flush=True)
        reasons = {
            "gso_size past the MTU": "gso_bad_size",
            "IP length 100": "gso_bad_ip_length",
        }
        want = {}
        for what, reason in reasons.items():
            if sent[what] == "sent":
                want[reason] = want.get(reason, 0) + 1
        # These pass Linux 6.18's checks; a kernel that refuses them too
        # leaves nothing to count.
        self.assertEqual(sent["gso_size past the MTU"], "sent", sent)
        for reason, n in want.items():
            key = f"link.tap.rx_bad_vnet_hdr.{reason}"
            self.assertEqual(c.get(key, 0) - before.get(key, 0), n, bad)
        self.assertEqual(c["link.tap.rx_bad_vnet_hdr"]
                         - before.get("link.tap.rx_bad_vnet_hdr", 0),
                         sum(want.values()), bad)
        # The rest never reached netstackd: Linux refused them at send().
        for what in ("gso_size 0", "hdr_len past", "csum_start past",
                     "csum_offset past"):
            self.assertNotEqual(sent[what], "sent", sent)


if __name__ == "__main__":
    unittest.main()
