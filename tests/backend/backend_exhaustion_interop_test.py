#!/usr/bin/env python3
"""A guest that takes all it may (issue 15 part 2), through netstackd
--backend (backend_topology.py): UDP flows to --max-udp-flows, TCP flows
to --max-tcp-flows, and fragment floods, IPv4 and IPv6.

backend_scale_interop_test already shows 10,000 TCP flows and the TCP
limit's RST; this test adds, with scale_peer.py for the TCP flows:
  - UDP: 1,100 flows from the guest to H's UDP echo server with
    --max-udp-flows 1024: 1,024 echo, the rest are refused
    (backend.udp.refused.limit, ICMP administratively prohibited), the
    table never holds more than 1,024; after --udp-timeout idle they
    close (flows_open 0) and new flows work;
  - TCP: 4,096 flows (the default limit) held open, the next one refused,
    opened in waves of 500 connects with --busy-syn-rate 0 (a wave makes
    the link busy, and the default rate would shed most of each wave's
    SYNs: seconds of retransmission that test nothing here;
    backend_flood_interop_test covers the shedding);
    after the guest closes them, flows_open and tcp_host_fds_open go back
    to 0 and new flows echo;
  - while each table is full, netstackd still answers: ping RTTs from G
    to the gateway 10.0.2.2 are printed and bounded (MAX_PING_MS);
  - fragments (flood_peer.py frag): 20,000 first fragments that never
    complete, 10,000 datagrams of overlapping fragments, 200 datagrams
    of 129 8-byte fragments, each family: the reassembler's memory never
    passes its 4 MiB (reassembly.peak_bytes_held), each fragment is
    accepted or dropped for a reason, each datagram completes, is
    dropped for a reason (memory_limit: evicted; overlap;
    too_many_fragments; timeout) or is still held; the held ones time out
    after --reassembly-timeout 5s (the timeout storm; the defaults, 30 s
    IPv4 and 60 s IPv6, would only make the test wait a minute longer);
    after all of it a datagram
    the guest's kernel fragments (route MTU 1400) still reassembles and
    echoes;
  - netstackd's VmRSS before, peak (VmHWM) and after each case is printed
    and stays under MAX_HWM_KIB.
Needs root. NETSTACKD=path runs another netstackd build (an ASan one).
"""
import sys
import time
import unittest

from tests.backend import flood_util as fu
from tests.backend.backend_topology import G4, G6, H4, H6
from tests.backend.scale_client import ECHO_PORT, SCALE_PEER, ScaleClient
from tests.interop import interop_util as iu

UDP_PORT = 7200
MAX_UDP = 1024
MAX_TCP = 4096
MAX_HWM_KIB = (512 if fu.SANITIZED else 128) * 1024
# A ping answered by netstackd itself while its tables are full. On this
# shared 2-core machine a scheduling hiccup is tens of ms; a stuck loop is
# seconds.
MAX_PING_MS = 500
REASSEMBLY_LIMIT = 4 << 20  # ReassemblerOptions::memory_limit_bytes


class BackendExhaustionTest(fu.BackendCase):
    # --udp-timeout outlasts the client's 5 s wait for the refused flows'
    # answers: the ICMP error budget (burst 50) leaves some unanswered, so
    # the client waits its whole timeout, and the table must still be full
    # when it is counted.
    NETSTACKD_ARGS = ("--max-udp-flows", str(MAX_UDP), "--udp-timeout", "8s",
                      "--reassembly-timeout", "5s", "--busy-syn-rate", "0")

    @classmethod
    def start_servers(cls, h):
        cls.topo.spawn(h, sys.executable, SCALE_PEER, "server",
                       str(ECHO_PORT), H4, H6)
        cls.topo.spawn(h, sys.executable, fu.FLOOD_PEER, "udpecho",
                       str(UDP_PORT), H4, H6)
        cls.wait_listening(h, "t", ECHO_PORT, 2)
        cls.wait_listening(h, "u", UDP_PORT, 2)

    def memory(self, label, mem0):
        m = fu.memory_kib(self.pid)
        fu.log(f"{label}: netstackd VmRSS before {mem0['VmRSS']} KiB, peak "
               f"(VmHWM) {m['VmHWM']} KiB, now {m['VmRSS']} KiB")
        self.assertLess(m["VmHWM"], MAX_HWM_KIB)
        return m

    def ping_check(self, label, rtts, count):
        fu.log(f"{label}: ping G -> 10.0.2.2: {fu.rtt_summary(rtts, count)}")
        self.assertGreaterEqual(len(rtts), count - 1, rtts)
        self.assertLess(max(rtts), MAX_PING_MS, rtts)

    def udp_flows(self, addr, n, timeout=5):
        return fu.flood(self.topo.g, "udpflows", addr, UDP_PORT, n, timeout)

    def test_1_udp_flows_to_the_limit(self):
        mem0 = fu.memory_kib(self.pid)
        c0 = self.nd.counters()
        tries = MAX_UDP + 76
        r = self.udp_flows(H4, tries)
        fu.log(f"UDP: {tries} flows: {r}")
        c = self.nd.counters()
        self.assertEqual(r["echoed"], MAX_UDP, r)
        self.assertEqual(c["backend.udp.flows_open"], MAX_UDP)
        refused = (c["backend.udp.refused.limit"] -
                   c0.get("backend.udp.refused.limit", 0))
        self.assertEqual(refused, tries - MAX_UDP)
        # The refused got an ICMP prohibited (EHOSTUNREACH), rate limited.
        self.assertEqual(r["errors"].get("EHOSTUNREACH", 0) +
                         r["errors"].get("timeout", 0), tries - MAX_UDP, r)
        # Full table: IPv6 is refused too, and netstackd still answers.
        r6 = self.udp_flows(H6, 20, timeout=2)
        self.assertEqual(r6["echoed"], 0, r6)
        rtts = fu.ping_rtts(self.topo, "10.0.2.2", 10, interval=0.1)
        self.ping_check("UDP table full", rtts, 10)
        self.memory("UDP flows", mem0)
        # The guest stops: after --udp-timeout (8 s) idle they close.
        ok = iu.wait_for(lambda: self.nd.counters()[
            "backend.udp.flows_open"] == 0, 20, interval=0.5)
        self.assertTrue(ok, "UDP flows did not expire")
        r = self.udp_flows(H6, 10)
        self.assertEqual(r["echoed"], 10, r)
        r = self.udp_flows(H4, 10)
        self.assertEqual(r["echoed"], 10, r)

    def test_2_tcp_flows_to_the_limit(self):
        # The fd baseline without UDP flows: test_1's last ones hold a host
        # socket each until --udp-timeout, which may end during this test.
        ok = iu.wait_for(lambda: self.nd.counters()[
            "backend.udp.flows_open"] == 0, 20, interval=0.5)
        self.assertTrue(ok, "UDP flows did not expire")
        mem0, fds0 = fu.memory_kib(self.pid), fu.fds(self.pid)
        client = ScaleClient(self.topo)
        self.addCleanup(client.close)
        r = client.ask(f"open {MAX_TCP} 500 20", timeout=MAX_TCP / 500 * 25)
        self.assertEqual(r["open"], MAX_TCP, r)
        pings = fu.PingSampler(self.topo, "10.0.2.2", 20, interval=0.1)
        probe = client.ask(f"probe {H4} {ECHO_PORT} 5", timeout=10)
        self.assertEqual(probe["result"], "ECONNREFUSED", probe)
        rnd = client.ask("round 1 30", timeout=60)
        self.assertEqual(rnd["verified"], MAX_TCP, rnd)
        self.ping_check("TCP table full, every flow echoing", pings.rtts(), 20)
        c = self.nd.counters()
        self.assertEqual(c["backend.tcp_flows_open"], MAX_TCP)
        self.memory(f"{MAX_TCP} TCP flows", mem0)
        self.assertEqual(client.ask("close", 30)["closed"], MAX_TCP)
        ok = iu.wait_for(lambda: (lambda c: c["backend.tcp_flows_open"] == 0
                                  and c["backend.tcp_host_fds_open"] == 0)(
                                      self.nd.counters()), 30, interval=1)
        self.assertTrue(ok, "TCP flows still open after the close")
        self.assertEqual(fu.fds(self.pid), fds0)
        # Recovered: new flows connect and echo.
        r = client.ask("open 20 20 10", timeout=30)
        self.assertEqual(r["open"], 20, r)
        self.assertEqual(client.ask("round 2 10", timeout=30)["verified"], 20)
        self.assertEqual(client.ask("close", 30)["closed"], 20)

    def frag_floods(self, src, dst):
        out = {}
        for kind, n in (("first", 20000), ("overlap", 10000), ("tiny", 200)):
            out[kind] = fu.flood(self.topo.g, "frag", "nsttap", self.mac, src,
                                 dst, kind, n)
        return out

    def test_3_fragment_floods(self):
        mem0 = fu.memory_kib(self.pid)
        c0 = self.nd.counters()
        l0 = fu.link_stats(self.topo.g, "nsttap")
        sent = {}
        for fam, src, dst in (("v4", G4, H4), ("v6", G6, H6)):
            for kind, r in self.frag_floods(src, dst).items():
                sent[f"{fam}.{kind}"] = r["sent"]
                fu.log(f"fragments {fam} {kind}: {r['sent']} in "
                       f"{r['seconds']:.2f} s ({r['rate']:.0f}/s)")
        time.sleep(1)
        c = self.nd.counters()
        d = fu.delta(c, c0)
        dl = fu.delta(fu.link_stats(self.topo.g, "nsttap"), l0)
        reass = {k: v for k, v in d.items() if k.startswith("reassembly.")}
        fu.log(f"reassembly counters after the floods: {reass}")
        fu.log(f"link: {dl['tx_dropped']} of the guest's frames dropped at "
               f"the TAP, {sum(sent.values())} fragments sent")
        self.assertLessEqual(c["reassembly.peak_bytes_held"], REASSEMBLY_LIMIT)
        self.assertLessEqual(c["reassembly.bytes_held"], REASSEMBLY_LIMIT)
        # Each fragment read: accepted, or dropped for one reason.
        frag_drops = sum(v for k, v in d.items()
                         if k.startswith("reassembly.fragment_drop."))
        self.assertEqual(d["reassembly.fragments_accepted"] + frag_drops,
                         d["reassembly.fragments_received"], reass)
        # Fragments read + dropped at the TAP = fragments sent (the guest
        # sent nothing else meanwhile but a few ND/RS frames).
        self.assertLessEqual(
            abs(sum(sent.values()) - d["reassembly.fragments_received"]
                - dl["tx_dropped"]), 4, (sent, reass, dl))
        for k in ("reassembly.datagram_drop.memory_limit",
                  "reassembly.datagram_drop.overlap",
                  "reassembly.datagram_drop.too_many_fragments"):
            self.assertGreater(d.get(k, 0), 0, (k, reass))
        self.memory("fragment floods", mem0)
        rtts = fu.ping_rtts(self.topo, "10.0.2.2", 5, interval=0.1)
        self.ping_check("after the fragment floods", rtts, 5)
        # The timeout storm: what is still held expires
        # (--reassembly-timeout 5s), counted.
        ok = iu.wait_for(lambda: self.nd.counters().get(
            "reassembly.datagrams_held", 0) == 0, 20, interval=0.5)
        c = self.nd.counters()
        d = fu.delta(c, c0)
        self.assertTrue(ok, c.get("reassembly.datagrams_held"))
        self.assertEqual(c["reassembly.bytes_held"], 0)
        self.assertGreater(d.get("reassembly.datagram_drop.timeout", 0), 0)
        dgram_drops = sum(v for k, v in d.items()
                          if k.startswith("reassembly.datagram_drop."))
        self.assertEqual(d["reassembly.datagrams_started"],
                         d.get("reassembly.datagrams_completed", 0)
                         + dgram_drops, d)
        fu.log("after the timeouts: " + str(
            {k: v for k, v in d.items() if k.startswith("reassembly.")}))
        # Still reassembling: the guest's kernel fragments a 4,000-byte
        # datagram at a route MTU of 1400, both families.
        g = self.topo.in_ns(self.topo.g, "ip")
        iu.run(*g, "route", "add", f"{H4}/32", "via", "10.0.2.2", "mtu",
               "lock", "1400")
        iu.run(*g, "-6", "route", "add", f"{H6}/128", "via", "fd00::2", "mtu",
               "1400")
        n0 = c.get("ipv4_reassembled", 0), c.get("ipv6_reassembled", 0)
        for addr in (H4, H6):
            r = fu.flood(self.topo.g, "udpflows", addr, UDP_PORT, 3, 5,
                         "--size", 4000)
            self.assertEqual(r["echoed"], 3, (addr, r))
        c = self.nd.counters()
        self.assertGreaterEqual(c.get("ipv4_reassembled", 0) - n0[0], 3)
        self.assertGreaterEqual(c.get("ipv6_reassembled", 0) - n0[1], 3)


if __name__ == "__main__":
    unittest.main()
