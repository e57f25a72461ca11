"""The flow log (issue #33, must-show 3), with netstackd --netns G in H
(policy_env.py) and `--allow allowed.test --flow-log FILE`.

test_1: one of each event from real clients (a DNS query denied, a TCP
flow opened and closed, TCP, UDP and ping refused): every line of the file
parses as JSON with the fields docs/POLICY.md documents, each with its
type, and the expected events are there with the right values.

test_2: a flood of FLOOD denied connects (guest_probe.py flood: nonblocking
connects, each socket closed at once) to a denied address beside an
endless download from allowed.test:
  - netstackd's RSS grows by less than MAX_RSS_GROWTH_KIB (denied SYNs
    make no flow; VmRSS sampled every 0.1 s);
  - the log stays within its rate cap (1,000 lines a second, a second's
    burst) and its size cap, and counts what it dropped;
  - the download's rate during the flood, as a share of its rate before
    it, is printed ("download kept X of its rate"). It is a speed goal
    (issue #33 asks for at least 0.5), so it is asserted only when
    NST_POLICY_MIN_RATIO is set, as a benchmark run does: a timed
    assertion on this shared 2-core machine would fail on its load, not
    on netstackd (the README's rule: speed goals live in benchmarks).
    The benchmark of that goal is bench/flood_benchmark.py --cases
    cpu,denied (docs/BENCHMARKS.md, "Refused by the egress policy"),
    against a CPU-loop control in the same run.
    The flood runs at nice 19: this machine has 2 cores, and the guest
    kernel's work for the flooder's connects is not netstackd's; nice
    keeps it from taking the download's reader's CPU, not netstackd's.
Needs root, dnsmasq, curl, dig, ping.
"""
import json
import os
import re
import subprocess
import sys
import threading
import time
import unittest

from tests.interop import interop_util as iu
from tests.policy.policy_env import PROBE, PolicyEnv

FLOOD = iu.env_int("NST_POLICY_FLOOD", 100000)
_MIN_RATIO = os.environ.get("NST_POLICY_MIN_RATIO", "")
MIN_RATIO = float(_MIN_RATIO) if _MIN_RATIO else None
# A denied SYN makes no flow and no host socket: RSS should barely move.
# An ASan build (--config=asan) keeps freed memory in quarantine (256 MiB
# at most by default).
with open(iu.NETSTACKD, "rb") as _f:
    SANITIZED = b"__asan_init" in _f.read()
MAX_RSS_GROWTH_KIB = (300 if SANITIZED else 16) * 1024
RATE_CAP = 1000  # --flow-log-rate's default
SIZE_CAP = 256 << 10  # --flow-log-max-bytes, small enough to rotate here
# The fields of every line, and of some events (docs/POLICY.md).
COMMON = {"time": str, "event": str, "proto": str, "src": str, "dst": str,
          "port": int, "verdict": str, "reason": str}
OPTIONAL = {"name": str, "rule": str, "dropped": int}
CLOSED = {"bytes_out": int, "bytes_in": int, "duration_ms": (int, float)}
EVENTS = {"opened", "refused", "closed", "dns_denied"}
REASONS = {"open", "allow_rule", "pinned_name", "deny_rule", "not_allowed",
           "egress_none", "special_address", "metadata"}
TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def cpu_seconds(pid):
    """utime + stime of `pid`, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


class FlowLogTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root")
        for tool in ("dnsmasq", "curl", "dig", "ping"):
            if not iu.have(tool):
                raise unittest.SkipTest(f"needs {tool}")
        cls.env = PolicyEnv()
        try:
            cls.env.setup()
            cls.log_path = os.path.join(cls.env.tmp, "flows.jsonl")
            cls.env.start("--allow", "allowed.test", "--flow-log-max-bytes",
                          str(SIZE_CAP), flow_log=cls.log_path)
        except BaseException:
            cls.env.close()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.env.close()

    def lines(self):
        with open(self.log_path) as f:
            return f.read().splitlines()

    def check_line(self, text):
        try:
            obj = json.loads(text)
        except ValueError as e:
            self.fail(f"not JSON ({e}): {text!r}")
        self.assertIsInstance(obj, dict, text)
        for key, kind in COMMON.items():
            self.assertIn(key, obj, text)
            self.assertIsInstance(obj[key], kind, text)
        for key, kind in OPTIONAL.items():
            if key in obj:
                self.assertIsInstance(obj[key], kind, text)
        self.assertRegex(obj["time"], TIME, text)
        self.assertIn(obj["event"], EVENTS, text)
        self.assertIn(obj["proto"], ("tcp", "udp", "icmp"), text)
        self.assertIn(obj["verdict"], ("allow", "deny"), text)
        self.assertIn(obj["reason"], REASONS, text)
        if obj["event"] == "closed":
            for key, kind in CLOSED.items():
                self.assertIsInstance(obj.get(key), kind, text)
        unknown = set(obj) - set(COMMON) - set(OPTIONAL) - set(CLOSED)
        self.assertEqual(unknown, set(), f"undocumented fields: {text}")
        return obj

    def tap_tx(self):
        """The guest's tap0: (TX packets, TX dropped)."""
        out = self.env.g_run("cat", "/sys/class/net/tap0/statistics/tx_packets",
                             "/sys/class/net/tap0/statistics/tx_dropped")
        packets, dropped = map(int, out.stdout.split())
        return packets, dropped

    def wait_lines(self, predicate, timeout=5):
        found = []
        def ok():
            found[:] = [json.loads(l) for l in self.lines()]
            return predicate(found)
        iu.wait_for(ok, timeout)
        return found

    def test_1_every_line_parses_with_the_documented_fields(self):
        env = self.env
        status, _, _, out = env.dig("denied.test")
        self.assertEqual(status, "NXDOMAIN", out)
        status, _, _, out = env.dig("allowed.test")
        self.assertEqual(status, "NOERROR", out)
        code, body, _ = env.curl("http://allowed.test/")
        self.assertEqual((code, body), (0, "ok 198.51.100.10"))
        code, _, _ = env.curl("http://198.51.100.20/")
        self.assertEqual(code, 7)
        env.probe("udp", "198.51.100.20", 7000, 64, 0)
        env.probe("icmp", "198.51.100.20")

        def complete(objs):
            kinds = {(o.get("event"), o.get("proto")) for o in objs}
            kinds |= {(o.get("event"), None) for o in objs}
            return {("dns_denied", None), ("opened", "tcp"),
                    ("closed", "tcp"), ("refused", "tcp"), ("refused", "udp"),
                    ("refused", "icmp")} <= kinds
        self.wait_lines(complete)
        lines = self.lines()
        self.assertTrue(lines, "the flow log is empty")
        objs = [self.check_line(l) for l in lines]
        for o in objs:
            print("  " + json.dumps(o), flush=True)

        def one(**want):
            got = [o for o in objs
                   if all(o.get(k) == v for k, v in want.items())]
            self.assertTrue(got, f"no line with {want} in:\n" +
                            "\n".join(lines))
            return got[0]

        d = one(event="dns_denied", name="denied.test")
        self.assertEqual(d["verdict"], "deny")
        # The guest's own address and source port that asked, and the
        # forwarder's address and port it asked.
        self.assertRegex(d["src"], r"^10\.0\.2\.100:\d+$", d)
        self.assertNotEqual(d["src"], "10.0.2.100:0", d)
        self.assertEqual((d["dst"], d["port"], d["proto"]),
                         ("10.0.2.3", 53, "udp"), d)
        opened = one(event="opened", proto="tcp", dst="198.51.100.10",
                     port=80)
        self.assertEqual((opened["verdict"], opened["reason"],
                          opened.get("name")),
                         ("allow", "pinned_name", "allowed.test"))
        self.assertIn("allowed.test", opened.get("rule", ""))
        self.assertTrue(opened["src"].startswith("10.0.2.100:"), opened)
        closed = one(event="closed", proto="tcp", dst="198.51.100.10",
                     port=80)
        self.assertGreater(closed["bytes_out"], 30)  # the GET
        self.assertGreater(closed["bytes_in"], 30)   # the answer
        self.assertGreaterEqual(closed["duration_ms"], 0)
        for proto, port in (("tcp", 80), ("udp", 7000), ("icmp", 0)):
            r = one(event="refused", proto=proto, dst="198.51.100.20",
                    port=port)
            self.assertEqual((r["verdict"], r["reason"]),
                             ("deny", "not_allowed"), r)

    def test_2_flood_of_denied_connects(self):
        env = self.env
        pid = env.nd.pid
        with open(f"/proc/{pid}/comm") as f:
            self.assertEqual(f.read().strip(), "netstackd")
        status, _, _, out = env.dig("allowed.test")
        self.assertEqual(status, "NOERROR", out)
        c0 = env.counters()
        tx0 = self.tap_tx()
        rss_before = rss_kib(pid)
        peak = [rss_before]
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                peak[0] = max(peak[0], rss_kib(pid))
                time.sleep(0.1)
        sampler = threading.Thread(target=sample)
        sampler.start()
        hold = subprocess.Popen(
            env.g_cmd(sys.executable, PROBE, "hold", "198.51.100.10", "9000",
                      "600"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(3)  # the rate alone
            cpu0 = cpu_seconds(pid)
            flood = env.g_run("nice", "-n", "19", sys.executable, PROBE,
                              "flood", "198.51.100.20", "80", str(FLOOD),
                              timeout=600)
            cpu1 = cpu_seconds(pid)
            time.sleep(1)
        finally:
            hold.terminate()
            out, err = hold.communicate(timeout=30)
            stop.set()
            sampler.join()
        self.assertEqual(flood.returncode, 0, flood.stdout + flood.stderr)
        f = json.loads(flood.stdout.strip().splitlines()[-1])
        progress = [tuple(map(float, l.split()[1:4]))
                    for l in out.splitlines() if l.startswith("progress")]
        self.assertTrue(progress, f"the download printed nothing: {err}")

        def bytes_at(t):
            before = [n for n, _, at in progress if at <= t]
            return before[-1] if before else 0

        def rate(t0, t1):
            return (bytes_at(t1) - bytes_at(t0)) / (t1 - t0)

        first = progress[0][2]
        alone = rate(first + 0.5, f["start"])
        during = rate(f["start"], f["end"])
        c = env.counters()
        tx = self.tap_tx()
        lines_flood = c["flow_log.lines"] - c0["flow_log.lines"]
        rotated = self.log_path + ".1"
        sizes = [os.path.getsize(p) for p in (self.log_path, rotated)
                 if os.path.exists(p)]
        size = sum(sizes)
        print(f"  flood: {FLOOD} connects in {f['seconds']:.1f} s "
              f"({FLOOD / f['seconds']:.0f}/s); netstackd RSS "
              f"{rss_before} KiB before, peak {peak[0]} KiB; log +"
              f"{lines_flood} lines, {size} bytes; download "
              f"{alone / 1e6:.0f} MB/s alone, {during / 1e6:.0f} MB/s during "
              f"({during / alone:.2f})", flush=True)
        # Every connect is a SYN that netstackd refused or that the TAP's
        # queue dropped before netstackd read it (the guest's tap0 TX
        # dropped).
        refused = (c["backend.policy.refused_tcp"]
                   - c0["backend.policy.refused_tcp"])
        tap_dropped = tx[1] - tx0[1]
        print(f"  SYNs: {refused} refused by netstackd, {tap_dropped} "
              f"dropped by the guest's TAP queue, {tx[0] - tx0[0]} frames "
              f"sent by the guest; netstackd's CPU during the flood "
              f"{(cpu1 - cpu0) / f['seconds'] * 100:.0f}%", flush=True)
        self.assertGreaterEqual(refused + tap_dropped, FLOOD)
        print("  counters: " + " ".join(
            f"{k}={v}" for k, v in sorted(c.items())
            if "policy" in k or "flow_log" in k), flush=True)
        self.assertLess(peak[0] - rss_before, MAX_RSS_GROWTH_KIB)
        # The rate cap: at most RATE_CAP lines a second plus a second's
        # burst, over the flood and the second after it.
        self.assertLessEqual(lines_flood,
                             RATE_CAP * (f["seconds"] + 3) + RATE_CAP)
        # The size cap: FILE and FILE.1, each at most the cap and a line.
        for one in sizes:
            self.assertLessEqual(one, SIZE_CAP + 1024, sizes)
        self.assertGreater(c["flow_log.rotations"], c0["flow_log.rotations"])
        self.assertGreater(c["flow_log.dropped_rate"],
                           c0["flow_log.dropped_rate"])
        self.assertEqual(c["flow_log.write_errors"], 0)
        print(f"  download kept {during / alone:.2f} of its rate during the "
              f"flood (issue #33's goal: 0.5)", flush=True)
        if MIN_RATIO is not None:
            self.assertGreaterEqual(during, MIN_RATIO * alone)
        said_dropped = 0
        for path in (rotated, self.log_path):
            with open(path) as f:
                for l in f.read().splitlines():
                    said_dropped += self.check_line(l).get("dropped", 0)
        self.assertGreater(said_dropped, 0, "no line says what was dropped")


if __name__ == "__main__":
    unittest.main(verbosity=2)
