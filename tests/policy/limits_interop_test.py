"""The per-guest limits (issue #33, docs/POLICY.md "Rate limits"), with
netstackd --netns G in H (policy_env.py: H has no route off the machine,
asserted before each start) and no policy (open mode).

test_1: --egress-rate 20Mbit. An iperf3 upload from G to H for UPLOAD_S
seconds arrives at 20 Mbit/s within 15% (iperf3's receiver figure),
while a download from H's stream server (guest_probe.py hold) runs
beside it: the download is not limited (it moves more than 4x the
upload's rate during the upload; its share of its own rate before the
upload is printed). backend.limit.egress_waits and egress_bytes_delayed
grow (TCP waited, nothing dropped). Then a UDP upload offered at 100
Mbit/s: what arrives is held to the rate, and the datagrams over it are
counted in backend.limit.egress_datagrams_dropped.

test_2: --new-flow-rate 10/s,burst=10 and --flow-log. CONNECTS
nonblocking connects at once from G (limits_probe.py): the burst (10)
connects in the first second, before any retransmission; the rest are
dropped without a RST, counted in backend.limit.new_flows_dropped_tcp
and logged as refused with reason rate_limited, and every one connects
later by its SYN retransmissions (nothing refused, nothing hangs). DNS
through the forwarder still answers. Then UDP_FLOWS new UDP flows at
once (a datagram each to H's echo port): the burst is echoed, the rest
dropped in silence (no ICMP error on any socket), counted in
backend.limit.new_flows_dropped_udp.
Needs root, dnsmasq, iperf3, dig.
"""
import json
import os
import subprocess
import sys
import time
import unittest

from tests.interop import interop_util as iu
from tests.policy.policy_env import PROBE, PolicyEnv

HERE = os.path.dirname(os.path.abspath(__file__))
LIMITS_PROBE = os.path.join(HERE, "limits_probe.py")

EGRESS_BITS = 20e6  # --egress-rate 20Mbit
UPLOAD_S = 5
TOLERANCE = 0.15
IPERF_TCP_PORT = 5201
IPERF_UDP_PORT = 5202
NEW_FLOW_RATE = 10
NEW_FLOW_BURST = 10
CONNECTS = 40
UDP_FLOWS = 25
SINK = "198.51.100.10"    # allowed.test's address: iperf3 and the hold port
STREAM = "198.51.100.11"  # keep.test's: policy_servers' endless stream


class LimitsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root")
        for tool in ("dnsmasq", "iperf3", "dig"):
            if not iu.have(tool):
                raise unittest.SkipTest(f"needs {tool}")
        cls.env = PolicyEnv()
        try:
            cls.env.setup()
            h = cls.env.topo.h
            for port in (IPERF_TCP_PORT, IPERF_UDP_PORT):
                cls.env.topo.spawn(h, "iperf3", "-s", "-p", str(port))
            time.sleep(0.5)
        except BaseException:
            cls.env.close()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.env.close()

    def tearDown(self):
        self.env.stop()

    def iperf3(self, *args, timeout=60):
        p = self.env.g_run("iperf3", "-c", SINK, "-J", *args, timeout=timeout)
        self.assertEqual(p.returncode, 0, p.stdout[-2000:] + p.stderr)
        return json.loads(p.stdout)

    def test_1_egress_rate_holds_an_upload_and_leaves_the_download(self):
        env = self.env
        env.start("--egress-rate", "20Mbit")
        self.assertIn("limits: new flows unlimited, egress 20 Mbit/s",
                      env.log())
        c0 = env.counters()
        hold = subprocess.Popen(
            env.g_cmd(sys.executable, PROBE, "hold", STREAM, "9000",
                      str(UPLOAD_S + 4)),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(2)  # the download alone
            t_up0 = time.monotonic()
            up = self.iperf3("-p", str(IPERF_TCP_PORT), "-t", str(UPLOAD_S),
                             timeout=UPLOAD_S + 30)
            t_up1 = time.monotonic()
        finally:
            out, err = hold.communicate(timeout=UPLOAD_S + 30)
        c1 = env.counters()
        got = up["end"]["sum_received"]["bits_per_second"]
        sent = up["end"]["sum_sent"]["bits_per_second"]
        progress = [tuple(map(float, l.split()[1:4]))
                    for l in out.splitlines() if l.startswith("progress")]
        self.assertTrue(progress, f"the download printed nothing: {err}")

        def bytes_at(t):
            before = [n for n, _, at in progress if at <= t]
            return before[-1] if before else 0

        def rate(t0, t1):
            return (bytes_at(t1) - bytes_at(t0)) / (t1 - t0)
        first = progress[0][2]
        alone = rate(first + 0.3, t_up0)
        during = rate(t_up0 + 0.5, t_up1 - 0.5)
        print(f"  upload: {got / 1e6:.2f} Mbit/s received ({sent / 1e6:.2f} "
              f"sent) at --egress-rate 20Mbit ({got / EGRESS_BITS:.3f}); "
              f"download {alone / 1e6:.1f} MB/s alone, {during / 1e6:.1f} "
              f"MB/s during the upload ({during / alone:.2f}; the machine is "
              f"shared)", flush=True)
        waits = c1["backend.limit.egress_waits"] - c0["backend.limit.egress_waits"]
        delayed = (c1["backend.limit.egress_bytes_delayed"]
                   - c0["backend.limit.egress_bytes_delayed"])
        print(f"  counters: egress_waits +{waits}, egress_bytes_delayed "
              f"+{delayed}, egress_datagrams_dropped "
              f"{c1['backend.limit.egress_datagrams_dropped']}", flush=True)
        self.assertLessEqual(abs(got / EGRESS_BITS - 1), TOLERANCE)
        self.assertGreater(during, 4 * EGRESS_BITS / 8)
        self.assertGreater(waits, 0)
        self.assertGreater(delayed, 0)
        self.assertEqual(c1["backend.limit.egress_datagrams_dropped"], 0)

        # UDP offered at five times the rate: held to it, the rest dropped.
        c0 = c1
        udp = self.iperf3("-p", str(IPERF_UDP_PORT), "-u", "-b", "100M",
                          "-l", "1200", "-t", "3", timeout=40)
        c1 = env.counters()
        s = udp["end"]["sum"]
        arrived = (s["packets"] - s["lost_packets"]) * 1200 * 8 / s["seconds"]
        dropped = (c1["backend.limit.egress_datagrams_dropped"]
                   - c0["backend.limit.egress_datagrams_dropped"])
        print(f"  UDP: {s['packets']} datagrams of 1200 bytes offered in "
              f"{s['seconds']:.1f} s, {arrived / 1e6:.2f} Mbit/s arrived, "
              f"{dropped} dropped by the limit", flush=True)
        self.assertGreater(dropped, 0)
        self.assertLessEqual(arrived, EGRESS_BITS * (1 + TOLERANCE))
        self.assertGreaterEqual(arrived, EGRESS_BITS * (1 - TOLERANCE))

    def test_2_new_flow_rate_lets_the_burst_through_and_counts_the_rest(self):
        env = self.env
        log_path = os.path.join(env.tmp, "limits-flows.jsonl")
        env.start("--new-flow-rate", f"{NEW_FLOW_RATE}/s,burst={NEW_FLOW_BURST}",
                  flow_log=log_path)
        self.assertIn(f"limits: new flows {NEW_FLOW_RATE}/s (burst "
                      f"{NEW_FLOW_BURST}), egress unlimited", env.log())
        c0 = env.counters()
        p = env.g_run(sys.executable, LIMITS_PROBE, "connects", SINK, "443",
                      str(CONNECTS), "30", timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        r = json.loads(p.stdout.strip().splitlines()[-1])
        c1 = env.counters()
        times = r["connected"]
        first = [t for t in times if t < 0.9]
        dropped = (c1["backend.limit.new_flows_dropped_tcp"]
                   - c0["backend.limit.new_flows_dropped_tcp"])
        print(f"  {CONNECTS} connects at once at --new-flow-rate "
              f"{NEW_FLOW_RATE}/s,burst={NEW_FLOW_BURST}: {len(first)} in "
              f"the first second, all {len(times)} by {max(times):.1f} s; "
              f"{dropped} SYNs dropped; errors {r['errors']}", flush=True)
        self.assertEqual(r["errors"], {})  # no RST, no timeout
        self.assertEqual(r["pending"], 0)
        self.assertEqual(len(times), CONNECTS)
        # The burst, and at most the rate's refill while the connects
        # went out (a few ms); nothing else before the first retransmission.
        self.assertGreaterEqual(len(first), NEW_FLOW_BURST)
        self.assertLessEqual(len(first), NEW_FLOW_BURST + 2)
        self.assertGreaterEqual(dropped, CONNECTS - len(first))
        self.assertEqual(c1["backend.limit.new_flows_dropped"]
                         - c0["backend.limit.new_flows_dropped"], dropped)
        status, _, _, out = env.dig("allowed.test")
        self.assertEqual(status, "NOERROR", out)
        time.sleep(NEW_FLOW_BURST / NEW_FLOW_RATE + 0.2)  # the burst again
        c0 = env.counters()
        p = env.g_run(sys.executable, LIMITS_PROBE, "udps", SINK, "7000",
                      str(UDP_FLOWS), "2", timeout=30)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        u = json.loads(p.stdout.strip().splitlines()[-1])
        c2 = env.counters()
        udp_dropped = (c2["backend.limit.new_flows_dropped_udp"]
                       - c0["backend.limit.new_flows_dropped_udp"])
        print(f"  {UDP_FLOWS} new UDP flows at once: {u['echoed']} echoed, "
              f"{udp_dropped} dropped; errors {u['errors']}", flush=True)
        self.assertEqual(u["errors"], {})  # dropped in silence, no ICMP
        self.assertGreaterEqual(u["echoed"], NEW_FLOW_BURST)
        self.assertLessEqual(u["echoed"], NEW_FLOW_BURST + 2)
        self.assertEqual(udp_dropped, UDP_FLOWS - u["echoed"])
        dropped += udp_dropped
        env.stop()  # flushes the log
        with open(log_path) as f:
            objs = [json.loads(l) for l in f.read().splitlines()]
        limited = [o for o in objs if o.get("reason") == "rate_limited"]
        self.assertEqual(len(limited), dropped)
        for o in limited:
            self.assertEqual((o["event"], o["verdict"], o["dst"]),
                             ("refused", "deny", SINK), o)
            self.assertIn((o["proto"], o["port"]), (("tcp", 443), ("udp", 7000)))
        opened = [o for o in objs if o["event"] == "opened"
                  and o["dst"] == SINK and o["port"] == 443]
        self.assertEqual(len(opened), CONNECTS)


if __name__ == "__main__":
    unittest.main(verbosity=2)
