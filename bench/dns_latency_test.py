"""bench/dns_latency.py without namespaces: its DNS query and answer
codec, the client against a DNS server on loopback (one that answers, one
that says NXDOMAIN, one that drops), the statistics, and the policy file
that bench/backend_benchmark's netstackd+policy runs with (the same for
the same size, the rule kinds the issue asks for, the server's rule last).
"""
import importlib.machinery
import importlib.util
import ipaddress
import os
import socket
import struct
import sys
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import dns_latency as dl  # noqa: E402


def load_bb():
    path = os.path.join(HERE, "backend_benchmark")
    loader = importlib.machinery.SourceFileLoader("backend_benchmark", path)
    spec = importlib.util.spec_from_loader("backend_benchmark", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


bb = load_bb()


class FakeDns:
    """A UDP DNS server on 127.0.0.1: answers A 203.0.113.7 for names
    under .test, NXDOMAIN for the others; drops queries for drop.test."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.seen = []
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while True:
            try:
                q, peer = self.sock.recvfrom(2048)
            except OSError:
                return
            qid, name = struct.unpack("!H", q[:2])[0], dl.question_name(q)
            self.seen.append(name)
            if name == "drop.test":
                continue
            question = q[12:]
            if name.endswith(".test"):
                answer = (b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 30, 4) +
                          socket.inet_aton("203.0.113.7"))
                head = struct.pack("!HHHHHH", qid, 0x8180, 1, 1, 0, 0)
            else:
                answer = b""
                head = struct.pack("!HHHHHH", qid, 0x8183, 1, 0, 0, 0)
            self.sock.sendto(head + question + answer, peer)

    def close(self):
        self.sock.close()


class Codec(unittest.TestCase):
    def test_query_is_one_a_question(self):
        q = dl.make_query(0x1234, "www.Example-8.test")
        self.assertEqual(q[:12], struct.pack("!HHHHHH", 0x1234, 0x0100, 1, 0,
                                             0, 0))
        self.assertEqual(dl.question_name(q), "www.Example-8.test")
        self.assertEqual(q[-4:], struct.pack("!HH", 1, 1))

    def test_answer_fields(self):
        ok = struct.pack("!HHHHHH", 7, 0x8180, 1, 2, 0, 0)
        self.assertEqual(dl.answer_fields(ok), (7, 0, 2))
        nx = struct.pack("!HHHHHH", 9, 0x8183, 1, 0, 0, 0)
        self.assertEqual(dl.answer_fields(nx), (9, 3, 0))
        self.assertIsNone(dl.answer_fields(b"\x00\x07"))


class Client(unittest.TestCase):
    def setUp(self):
        self.server = FakeDns()

    def tearDown(self):
        self.server.close()

    def test_every_query_answered_and_timed(self):
        names = ["a.test", "b.test"]
        r = dl.measure(("127.0.0.1", self.server.port), names, count=50,
                       warmup=4, timeout=1.0)
        self.assertEqual(r["queries"], 50)
        self.assertEqual(r["errors"], 0)
        self.assertEqual(len(r["samples_us"]), 50)
        self.assertTrue(all(s > 0 for s in r["samples_us"]))
        self.assertLessEqual(r["p50_us"], r["p99_us"])
        # Warm-up and measured queries, the names in turn.
        self.assertEqual(self.server.seen[:4], ["a.test", "b.test"] * 2)
        self.assertEqual(len(self.server.seen), 54)

    def test_nxdomain_and_no_answer_are_errors(self):
        r = dl.measure(("127.0.0.1", self.server.port), ["x.invalid"],
                       count=3, warmup=0, timeout=1.0)
        self.assertEqual(r["errors"], 3)
        self.assertEqual(r["rcodes"], {"3": 3})
        r = dl.measure(("127.0.0.1", self.server.port), ["drop.test"],
                       count=2, warmup=0, timeout=0.05)
        self.assertEqual(r["errors"], 2)
        self.assertEqual(r["timeouts"], 2)

    def test_probe_says_the_rcode(self):
        addr = ("127.0.0.1", self.server.port)
        self.assertEqual(dl.probe(addr, "a.test", 1.0), 0)
        self.assertEqual(dl.probe(addr, "x.invalid", 1.0), 3)
        self.assertIsNone(dl.probe(addr, "drop.test", 0.05))


class Stats(unittest.TestCase):
    def test_percentiles(self):
        xs = list(range(1, 101))
        self.assertEqual(dl.percentile(xs, 50), 50)
        self.assertEqual(dl.percentile(xs, 99), 99)
        self.assertEqual(dl.percentile([5], 99), 5)

    def test_summary_and_ratio(self):
        s = dl.summary([100.0] * 98 + [300.0, 500.0])
        self.assertEqual(s["p50_us"], 100.0)
        self.assertEqual(s["p99_us"], 300.0)
        self.assertAlmostEqual(s["mean_us"], 106.0)
        blocks = [{"none": {"p50_us": 100, "p99_us": 200, "mean_us": 110},
                   "policy": {"p50_us": 109, "p99_us": 260, "mean_us": 122}},
                  {"none": {"p50_us": 100, "p99_us": 200, "mean_us": 100},
                   "policy": {"p50_us": 300, "p99_us": 200, "mean_us": 90}},
                  {"none": {"p50_us": 50, "p99_us": 100, "mean_us": 60},
                   "policy": {"p50_us": 50, "p99_us": 130, "mean_us": 90}}]
        ratios = dl.block_ratios(blocks)
        self.assertAlmostEqual(ratios["p50_us"], 1.09)
        self.assertAlmostEqual(ratios["p99_us"], 1.3)
        self.assertAlmostEqual(ratios["mean_us"], 122 / 110)
        verdicts = dl.goals(ratios)
        self.assertEqual([ok for _, ok in verdicts], [True, False])
        self.assertIn("p50 1.090x", verdicts[0][0])


class PolicyFile(unittest.TestCase):
    def rules(self, n=1000):
        return bb.policy_rules(n).splitlines()

    def test_size_and_the_same_each_time(self):
        self.assertEqual(len(self.rules()), 1000)
        self.assertEqual(len(self.rules(3)), 3)
        self.assertEqual(bb.policy_rules(1000), bb.policy_rules(1000))

    def test_every_kind(self):
        lines = self.rules()
        denies = [l for l in lines if l.startswith("deny ")]
        self.assertTrue(5 <= len(denies) <= 50, len(denies))
        self.assertTrue(any(l.startswith("allow *.example-") for l in lines))
        self.assertTrue(any(l.startswith("allow cdn-") for l in lines))
        self.assertTrue(any("[2001:db8:" in l for l in lines))
        self.assertTrue(any(l.endswith(":5000-5999") for l in lines))
        self.assertTrue(any("/16" in l for l in lines))
        self.assertTrue(any(l.startswith("allow tcp:") and l.count(".") == 3
                            for l in lines))

    def test_only_the_last_rule_allows_the_server(self):
        """Rule by rule, the way docs/POLICY.md reads: no rule but the
        last admits 203.0.113.1 for TCP 5201/5202 or UDP 5201, and no
        deny covers it."""
        server = ipaddress.ip_address(bb.SERVER)
        lines = self.rules()
        self.assertEqual(lines[-1], f"allow {bb.SERVER}")

        def covers(line):
            verb, rule = line.split(" ", 1)
            proto = None
            for p in ("tcp:", "udp:", "icmp:"):
                if rule.startswith(p):
                    proto, rule = p[:-1], rule[len(p):]
            if rule.startswith("["):
                return False  # IPv6
            host, _, ports = rule.partition(":")
            if not host[0].isdigit():
                return False  # a name: admits only pinned addresses
            net = ipaddress.ip_network(host)
            lo, _, hi = ports.partition("-")
            port_ok = (not ports or
                       int(lo) <= 5201 <= int(hi or lo) or
                       int(lo) <= 5202 <= int(hi or lo))
            return (server in net and port_ok and
                    proto in (None, "tcp", "udp"))

        self.assertEqual([l for l in lines if covers(l)], [lines[-1]])
        # ... but two rules meet the server's /24 on other ports.
        self.assertIn("allow tcp:203.0.113.0/24:443", lines)
        self.assertIn("deny tcp:203.0.113.0/24:25", lines)

    def test_the_queried_names_are_allowed_by_name_rules(self):
        lines = set(self.rules())
        for name in dl.NAMES:
            parts = name.split(".", 1)
            self.assertTrue(f"allow *.{parts[1]}" in lines or
                            f"allow {name}" in lines, name)
        self.assertNotIn(dl.DENIED_NAME.split(".", 1)[1],
                         " ".join(lines))


if __name__ == "__main__":
    unittest.main()
