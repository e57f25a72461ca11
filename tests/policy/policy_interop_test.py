"""The egress policy (issue #33, must-show 1) from a guest namespace, with
real clients (curl, dig, ping, socat, and guest_probe.py for UDP and for
timing ICMP), over IPv4 and IPv6. policy_env.py describes the namespaces,
the names dnsmasq answers and the servers.

AllowlistTest runs netstackd with ALLOWLIST; OpenTest with no allow rule
(open mode: only two deny rules and the metadata addresses refused) and
doubles as the control: what AllowlistTest sees refused is reachable
there, so a refusal is the policy's and not a missing server or route.

Every refusal is timed by the client itself (curl's time_total, dig's
query time, guest_probe's clock) and must take under 100 ms.

The pin test: pin.test answers with a TTL of PIN_TTL seconds; a pin lasts
TTL + 60 s of grace (PinTable::kPinGrace). The address is reached by
literal right after the answer (admitted) and again after TTL + grace +
3 s (refused); setUpClass makes the pin, the test named test_z_* (last)
waits out what remains. Needs root, dnsmasq, curl, dig, ping, socat.
"""
import errno
import os
import time
import unittest

from tests.interop import interop_util as iu
from tests.policy.policy_env import (NAT64_DENIED, NAT64_METADATA, METADATA,
                                     PIN_TTL, RESOLVER, RESOLVER6, PolicyEnv)

FAST_MS = 100
PIN_GRACE = 60
ALLOWLIST = [
    "--allow", "allowed.test",
    "--allow", "keep.test",
    "--allow", "*.wild.test",
    "--allow", "tcp:ports.test:8080",
    "--allow", "rebind.test",
    "--allow", "cname.test",
    "--allow", "pin.test",
    "--allow", "mixed.test",
    "--deny", "mixed.test",
    "--deny", "denied.test",
]
CURL_REFUSED = 7  # "Failed to connect": RST (refused) or unreachable


def needs_tools(cls):
    if os.geteuid() != 0:
        raise unittest.SkipTest("needs root")
    for tool in ("dnsmasq", "curl", "dig", "ping", "socat"):
        if not iu.have(tool):
            raise unittest.SkipTest(f"needs {tool}")


class PolicyCase(unittest.TestCase):
    FLAGS = []

    @classmethod
    def setUpClass(cls):
        needs_tools(cls)
        cls.env = PolicyEnv()
        try:
            cls.env.setup()
            cls.env.start(*cls.FLAGS)
        except BaseException:
            cls.env.close()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.env.close()

    def assert_works(self, url, want_body):
        code, body, t = self.env.curl(url)
        self.assertEqual((code, body), (0, want_body),
                         f"{url}: curl exit {code} after {t:.3f} s")

    def assert_refused(self, url):
        """curl fails to connect (an RST: 'Connection refused'), fast."""
        code, body, t = self.env.curl(url)
        self.assertEqual(code, CURL_REFUSED,
                         f"{url}: curl exit {code} body {body!r} ({t:.3f} s)")
        self.assertLess(t * 1000, FAST_MS, f"{url}: refused after {t:.3f} s")
        print(f"  refused {url} in {t * 1000:.1f} ms", flush=True)

    def assert_nxdomain(self, name, qtype="A", server="10.0.2.3"):
        status, answers, ms, out = self.env.dig(name, qtype, server)
        self.assertEqual(status, "NXDOMAIN", out)
        self.assertEqual(answers, [], out)
        self.assertLess(ms, FAST_MS, out)

    def assert_answers(self, name, qtype, want, server="10.0.2.3"):
        status, answers, ms, out = self.env.dig(name, qtype, server)
        self.assertEqual(status, "NOERROR", out)
        self.assertEqual(sorted(d for t, d in answers if t == qtype),
                         sorted(want), out)
        return answers

    def assert_udp_refused(self, addr, port, size=64, first=0):
        r = self.env.probe("udp", addr, port, size, first)
        # ICMP type 3 code 13 is EHOSTUNREACH to a connected UDP socket;
        # ICMPv6 type 1 code 1 (administratively prohibited) is EACCES.
        want = errno.EACCES if ":" in addr else errno.EHOSTUNREACH
        self.assertEqual(r["errno"], want, f"udp {addr}:{port}: {r}")
        self.assertLess(r["ms"], FAST_MS, f"udp {addr}:{port}: {r}")
        print(f"  udp {addr}:{port} refused ({r['errname']}) in "
              f"{r['ms']:.1f} ms", flush=True)

    def assert_udp_echo(self, addr, port, size=64, first=0):
        r = self.env.probe("udp", addr, port, size, first)
        self.assertTrue(r["echo"], f"udp {addr}:{port}: {r}")

    def assert_ping_refused(self, addr):
        v6 = ":" in addr
        t0 = time.monotonic()
        p = self.env.g_run("ping", "-c1", "-W3", addr)
        wall = time.monotonic() - t0
        self.assertNotEqual(p.returncode, 0, p.stdout)
        want = "Administratively prohibited" if v6 else "Packet filtered"
        self.assertIn(want, p.stdout, p.stdout + p.stderr)
        self.assertLess(wall, 1.5, f"ping waited {wall:.2f} s: {p.stdout}")
        r = self.env.probe("icmp", addr)
        self.assertEqual((r["type"], r["code"]), (1, 1) if v6 else (3, 13),
                         f"ping {addr}: {r}")
        self.assertLess(r["ms"], FAST_MS, f"ping {addr}: {r}")
        print(f"  ping {addr}: '{want}' in {r['ms']:.1f} ms", flush=True)


class AllowlistTest(PolicyCase):
    FLAGS = ALLOWLIST

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        # The pin whose expiry test_z_pin_expires_after_ttl_and_grace sees.
        # pin.test is asked once only: another answer would renew the pin.
        status, answers, _, out = cls.env.dig("pin.test")
        cls.pin_answer = (status, answers, out)
        cls.pinned_at = time.monotonic()
        cls.pin_first = cls.env.curl("http://198.51.100.80/")

    def test_allowed_name_works(self):
        for server in ("10.0.2.3", "fd00::3"):
            self.assert_answers("allowed.test", "A", ["198.51.100.10"], server)
            self.assert_answers("allowed.test", "AAAA", ["2001:db8:1::10"],
                                server)
        self.assert_works("http://allowed.test/", "ok 198.51.100.10")
        code, body, _ = self.env.curl("http://allowed.test/", "-6")
        self.assertEqual((code, body), (0, "ok 2001:db8:1::10"))

    def test_denied_name_gets_nxdomain_and_its_literal_is_refused(self):
        for server in ("10.0.2.3", "fd00::3"):
            for qtype in ("A", "AAAA"):
                self.assert_nxdomain("denied.test", qtype, server)
        # No rule names it (allowlist: denied); allowed and denied (the
        # deny wins).
        self.assert_nxdomain("unlisted.test")
        self.assert_nxdomain("mixed.test")
        self.assert_refused("http://198.51.100.20/")
        self.assert_refused("http://[2001:db8:1::20]/")
        self.assert_refused("http://198.51.100.21/")
        self.assert_refused("http://198.51.100.22/")
        code, _, _ = self.env.curl("http://denied.test/")
        self.assertEqual(code, 6, "curl: the name should not resolve")

    def test_wildcard_admits_subdomains_not_the_apex(self):
        self.assert_answers("sub.wild.test", "A", ["198.51.100.31"])
        self.assert_answers("sub.wild.test", "AAAA", ["2001:db8:1::31"])
        self.assert_answers("a.b.wild.test", "A", ["198.51.100.32"])
        self.assert_works("http://sub.wild.test/", "ok 198.51.100.31")
        code, body, _ = self.env.curl("http://sub.wild.test/", "-6")
        self.assertEqual((code, body), (0, "ok 2001:db8:1::31"))
        self.assert_works("http://a.b.wild.test/", "ok 198.51.100.32")
        self.assert_nxdomain("wild.test")
        self.assert_nxdomain("wild.test", "AAAA")
        self.assert_refused("http://198.51.100.30/")
        self.assert_refused("http://[2001:db8:1::30]/")

    def test_port_rule(self):
        self.assert_answers("ports.test", "A", ["198.51.100.40"])
        self.assert_answers("ports.test", "AAAA", ["2001:db8:1::40"])
        self.assert_works("http://ports.test:8080/", "ok 198.51.100.40")
        self.assert_works("http://[2001:db8:1::40]:8080/", "ok 2001:db8:1::40")
        self.assert_refused("http://198.51.100.40:8081/")
        self.assert_refused("http://[2001:db8:1::40]:8081/")
        # tcp: only: UDP to the same address is not admitted.
        self.assert_udp_refused("198.51.100.40", 7000)
        self.assert_udp_refused("2001:db8:1::40", 7000)

    def test_rebinding_answers_are_stripped_and_refused(self):
        self.assert_answers("rebind.test", "A", ["198.51.100.50"])
        self.assert_answers("rebind.test", "AAAA", ["2001:db8:1::50"])
        self.assert_works("http://rebind.test/", "ok 198.51.100.50")
        self.assert_refused("http://10.1.2.3/")
        self.assert_refused("http://[fd12::3]/")

    def test_cname_chain_pins_the_target(self):
        answers = self.assert_answers("cname.test", "A", ["198.51.100.60"])
        self.assertIn(("CNAME", "target.test."), answers)
        self.assert_answers("cname.test", "AAAA", ["2001:db8:1::60"])
        self.assert_works("http://cname.test/", "ok 198.51.100.60")
        code, body, _ = self.env.curl("http://cname.test/", "-6")
        self.assertEqual((code, body), (0, "ok 2001:db8:1::60"))
        # The target's own name is not allowed.
        self.assert_nxdomain("target.test")

    def test_other_resolvers_are_refused(self):
        """Plain DNS, DoT and DoH to an address not admitted (H's RESOLVER
        and RESOLVER6 run dnsmasq on 53 and listeners on 853 and 443;
        OpenTest reaches them)."""
        for server in (RESOLVER, RESOLVER6):
            host = f"[{server}]" if ":" in server else server
            for extra in ((), ("+tcp",)):
                t0 = time.monotonic()
                status, _, _, out = self.env.dig("allowed.test", "A", server,
                                                 *extra)
                ms = (time.monotonic() - t0) * 1000
                self.assertIsNone(status, out)
                self.assertNotIn("timed out", out)
                self.assertLess(ms, 1000,
                                f"dig {extra} took {ms:.0f} ms: {out}")
            for port in (853, 443):
                r = self.env.probe("connect", server, port)
                self.assertEqual(r["errno"], errno.ECONNREFUSED, r)
                self.assertLess(r["ms"], FAST_MS, r)
                p = self.env.g_run("socat", "-T2", "-",
                                   f"TCP:{host}:{port}")
                self.assertIn("Connection refused", p.stderr)
            self.assert_refused(f"https://{host}/dns-query")
            self.assert_udp_refused(server, 53)
            self.assert_udp_refused(server, 443, 1200, 0xC3)

    def test_mapped_and_nat64_forms_of_a_denied_address(self):
        self.assert_refused("http://[::ffff:198.51.100.20]/")
        self.assert_refused(f"http://[{NAT64_DENIED}]/")
        self.assert_udp_refused(NAT64_DENIED, 7000)

    def test_udp_and_quic_like_datagrams(self):
        self.assert_answers("allowed.test", "A", ["198.51.100.10"])
        self.assert_answers("allowed.test", "AAAA", ["2001:db8:1::10"])
        for addr in ("198.51.100.10", "2001:db8:1::10"):
            self.assert_udp_echo(addr, 7000)
            self.assert_udp_echo(addr, 443, 1200, 0xC3)
        for addr in ("198.51.100.20", "2001:db8:1::20"):
            self.assert_udp_refused(addr, 7000)
            self.assert_udp_refused(addr, 443, 1200, 0xC3)

    def test_ping(self):
        self.assert_answers("allowed.test", "A", ["198.51.100.10"])
        self.assert_answers("allowed.test", "AAAA", ["2001:db8:1::10"])
        for addr in ("198.51.100.10", "2001:db8:1::10"):
            p = self.env.g_run("ping", "-c1", "-W2", addr)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assert_ping_refused("198.51.100.20")
        self.assert_ping_refused("2001:db8:1::20")

    def test_z_pin_expires_after_ttl_and_grace(self):
        status, answers, out = self.pin_answer
        self.assertEqual((status, answers), ("NOERROR",
                                             [("A", "198.51.100.80")]), out)
        code, body, t = self.pin_first
        self.assertEqual((code, body), (0, "ok 198.51.100.80"),
                         "the pin did not admit its address")
        # Still admitted within TTL + grace.
        self.assert_works("http://198.51.100.80/", "ok 198.51.100.80")
        left = self.pinned_at + PIN_TTL + PIN_GRACE + 3 - time.monotonic()
        if left > 0:
            print(f"  waiting {left:.0f} s for pin.test's pin to expire",
                  flush=True)
            time.sleep(left)
        self.assert_refused("http://198.51.100.80/")


class OpenTest(PolicyCase):
    """Open mode: no allow rule; two deny rules."""
    FLAGS = ["--deny", "denied.test", "--deny", "198.51.100.21"]

    def test_deny_rules_in_open_mode(self):
        """A deny name rule answers NXDOMAIN; a deny address rule refuses
        the address. Open mode pins nothing, so the denied name's address
        reached as a literal is not refused (docs/POLICY.md):
        test_control_everything_else_is_reached reaches it."""
        self.assert_nxdomain("denied.test")
        self.assert_nxdomain("denied.test", "AAAA", "fd00::3")
        self.assert_answers("unlisted.test", "A", ["198.51.100.21"])
        self.assert_refused("http://198.51.100.21/")
        self.assert_udp_refused("198.51.100.21", 7000)
        self.assert_ping_refused("198.51.100.21")

    def test_metadata_refused_in_open_mode(self):
        for addr in METADATA:
            host = f"[{addr}]" if ":" in addr else addr
            self.assert_refused(f"http://{host}/latest/meta-data/")
        self.assert_refused(f"http://[{NAT64_METADATA}]/")
        self.assert_udp_refused(METADATA[0], 7000)
        self.assert_ping_refused(METADATA[0])

    def test_control_everything_else_is_reached(self):
        """What AllowlistTest refuses, reached in open mode."""
        self.assert_works("http://198.51.100.20/", "ok 198.51.100.20")
        self.assert_works("http://[2001:db8:1::20]/", "ok 2001:db8:1::20")
        self.assert_works(f"http://[{NAT64_DENIED}]/", f"ok {NAT64_DENIED}")
        self.assert_works("http://198.51.100.40:8081/", "ok 198.51.100.40")
        self.assert_works("http://10.1.2.3/", "ok 10.1.2.3")
        self.assert_answers("wild.test", "A", ["198.51.100.30"])
        self.assert_answers("sub.wild.test", "A", ["198.51.100.31"])
        self.assert_answers("rebind.test", "A",
                            ["127.0.0.1", "10.1.2.3", "198.51.100.50"])
        for server in (RESOLVER, RESOLVER6):
            self.assert_answers("allowed.test", "A", ["198.51.100.10"],
                                server)
            for port in (853, 443):
                r = self.env.probe("connect", server, port)
                self.assertEqual(r["errno"], 0, r)
        self.assert_udp_echo("198.51.100.20", 7000)
        self.assert_udp_echo("2001:db8:1::20", 443, 1200, 0xC3)
        p = self.env.g_run("ping", "-c1", "-W2", "198.51.100.20")
        self.assertEqual(p.returncode, 0, p.stdout)


class EgressNoneTest(PolicyCase):
    """--egress none: nothing out, DNS included."""
    FLAGS = ["--egress", "none"]

    def test_nothing_leaves(self):
        self.assert_nxdomain("allowed.test")
        self.assert_nxdomain("allowed.test", "AAAA", "fd00::3")
        self.assert_refused("http://198.51.100.10/")
        self.assert_refused("http://[2001:db8:1::10]/")
        self.assert_udp_refused("198.51.100.10", 7000)
        self.assert_udp_refused(RESOLVER, 53)
        self.assert_ping_refused("198.51.100.10")
        self.assert_ping_refused("2001:db8:1::10")


if __name__ == "__main__":
    unittest.main(verbosity=2)
