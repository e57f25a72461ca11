"""A policy replaced while transfers run (issue #33, must-show 2): through
the forward API's {"op":"policy"} and by SIGHUP rereading --policy FILE.

The guest (policy_env.py) holds four endless downloads from H's stream
server (port 9000): from allowed.test and keep.test, each over IPv4 and
IPv6, all admitted by pins. The new policy allows keep.test only: the
allowed.test downloads must be reset (the guest's recv fails with
ECONNRESET) soon after the change, and the keep.test ones keep receiving
until their end. A new connect to allowed.test's address is then refused.
Needs root, dnsmasq, dig.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time
import unittest

from tests.interop import interop_util as iu
from tests.policy.policy_env import PROBE, PolicyEnv

HOLD_SECONDS = 6
CHANGE_AT = 2.0
# From just before the request (or the file's rewrite and SIGHUP) to the
# guest's ECONNRESET.
RESET_WITHIN = 0.5
FLOWS = {  # (address, still allowed after the change)
    "198.51.100.10": False,
    "2001:db8:1::10": False,
    "198.51.100.11": True,
    "2001:db8:1::11": True,
}
BEFORE = ["allow allowed.test", "allow keep.test"]
AFTER = ["allow keep.test"]


def api(path, request):
    """One request to the forward API; its answer, parsed."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(path)
        s.sendall(json.dumps(request).encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    return json.loads(buf)


class PolicyChangeTest(unittest.TestCase):
    def setUp(self):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root")
        for tool in ("dnsmasq", "dig"):
            if not iu.have(tool):
                raise unittest.SkipTest(f"needs {tool}")
        self.env = PolicyEnv()
        self.addCleanup(self.env.close)
        self.env.setup()
        self.policy_file = os.path.join(self.env.tmp, "policy")
        with open(self.policy_file, "w") as f:
            f.write("".join(l + "\n" for l in BEFORE))
        self.api_path = os.path.join(self.env.tmp, "api.sock")

    def run_change(self, change):
        """Starts the four downloads, calls change() CHANGE_AT seconds in,
        and checks each download's end."""
        env = self.env
        for name in ("allowed.test", "keep.test"):
            for qtype in ("A", "AAAA"):
                status, answers, _, out = env.dig(name, qtype)
                self.assertEqual(status, "NOERROR", out)
                self.assertEqual(len(answers), 1, out)
        procs = {}
        for addr in FLOWS:
            procs[addr] = subprocess.Popen(
                env.g_cmd(sys.executable, PROBE, "hold", addr, "9000",
                          str(HOLD_SECONDS)),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        outs = {}
        try:
            time.sleep(CHANGE_AT)
            t_change = time.monotonic()  # the probes' clock too
            change()
            for a, p in procs.items():
                outs[a] = p.communicate(timeout=HOLD_SECONDS + 10)
        finally:
            for a, p in procs.items():
                if a not in outs:
                    if p.poll() is None:
                        p.kill()
                    outs[a] = p.communicate()
        for addr, allowed_after in FLOWS.items():
            out, err = outs[addr]
            lines = out.strip().splitlines()
            self.assertTrue(lines, f"{addr}: no output: {err}")
            end = json.loads(lines[-1])
            progress = [tuple(map(float, l.split()[1:3])) for l in lines[:-1]]
            moved_before = [n for n, t in progress if t < CHANGE_AT - 0.3]
            self.assertTrue(moved_before and moved_before[-1] > 0,
                            f"{addr}: no data before the change: {out}{err}")
            if allowed_after:
                self.assertEqual(end["end"], "time", f"{addr}: {end}")
                after = [n for n, t in progress if t > CHANGE_AT + 1.0]
                self.assertTrue(after and after[-1] > moved_before[-1],
                                f"{addr}: stopped after the change: {out}")
                print(f"  {addr}: untouched, {end['bytes'] >> 20} MiB in "
                      f"{end['seconds']:.1f} s", flush=True)
            else:
                self.assertEqual(end["end"], "reset", f"{addr}: {end}")
                took = end["at"] - t_change
                self.assertLess(took, RESET_WITHIN, f"{addr}: reset late: {end}")
                print(f"  {addr}: reset {took * 1000:.0f} ms after the "
                      f"change was asked for", flush=True)
        # New flows follow the new policy.
        for addr, allowed_after in FLOWS.items():
            r = env.probe("connect", addr, 9000)
            self.assertEqual(r["errno"] == 0, allowed_after, f"{addr}: {r}")
        counters = env.counters()
        resets = {k: v for k, v in counters.items() if "reset_on_change" in k}
        self.assertTrue(resets and max(resets.values()) >= 2,
                        f"no policy reset counter >= 2: {resets}")

    def closed_lines(self, log):
        """The flow log's 'closed' lines for the downloads (port 9000; by
        destination, the one with the most bytes: the new-flow checks'
        connects after the change close with few)."""
        def read():
            with open(log) as f:
                objs = [json.loads(l) for l in f.read().splitlines()]
            out = {}
            for o in objs:
                if o["event"] == "closed" and o["port"] == 9000:
                    if o["bytes_in"] > out.get(o["dst"], {}).get("bytes_in", -1):
                        out[o["dst"]] = o
            return out
        iu.wait_for(lambda: len(read()) >= len(FLOWS), 5)
        return read()

    def test_forward_api_replace(self):
        log = os.path.join(self.env.tmp, "flows.jsonl")
        self.env.start("--policy", self.policy_file, api=self.api_path,
                       flow_log=log)
        got = api(self.api_path, {"op": "policy"})
        self.assertTrue(got.get("ok"), got)
        self.assertEqual(got.get("policy", {}).get("mode"), "allowlist", got)
        self.assertIn("allowed.test", json.dumps(got["policy"]))

        def change():
            answer = api(self.api_path, {"op": "policy", "replace": AFTER})
            self.assertTrue(answer.get("ok"), answer)
            # The two allowed.test downloads, IPv4 and IPv6.
            self.assertEqual(answer.get("reset"), 2, answer)

        self.run_change(change)
        got = api(self.api_path, {"op": "policy"})
        self.assertIn("keep.test", json.dumps(got["policy"]))
        self.assertNotIn("allowed.test", json.dumps(got["policy"]))
        # A bad policy is refused and changes nothing.
        bad = api(self.api_path, {"op": "policy",
                                  "replace": ["allow tcp:x.test:0-"]})
        self.assertFalse(bad.get("ok"), bad)
        self.assertIn("error", bad)
        self.assertEqual(api(self.api_path, {"op": "policy"}), got)
        # The flow log closes each download: the reset ones denied by the
        # new policy, the others allowed, each with its bytes.
        closed = self.closed_lines(log)
        for addr, allowed_after in FLOWS.items():
            o = closed.get(addr)
            self.assertIsNotNone(o, f"{addr}: no closed line: {closed}")
            self.assertEqual(o["verdict"], "allow" if allowed_after else "deny",
                             o)
            self.assertGreater(o["bytes_in"], 1 << 20, o)

    def test_sighup_rereads_the_policy_file(self):
        self.env.start("--policy", self.policy_file)

        def change():
            with open(self.policy_file, "w") as f:
                f.write("".join(l + "\n" for l in AFTER))
            self.env.nd.send_signal(signal.SIGHUP)

        self.run_change(change)
        self.assertIsNone(self.env.nd.poll(), "netstackd exited on SIGHUP")
        # A file that does not parse keeps the policy in force, and says so.
        with open(self.policy_file, "w") as f:
            f.write("allow keep.test\nallow tcp:x.test:0-\n")
        self.env.nd.send_signal(signal.SIGHUP)
        ok = iu.wait_for(lambda: "line 2" in self.env.log(), 5)
        self.assertTrue(ok, f"no message naming line 2: {self.env.log()}")
        self.assertIsNone(self.env.nd.poll(), "netstackd exited on SIGHUP")
        for addr, allowed_after in FLOWS.items():
            r = self.env.probe("connect", addr, 9000)
            self.assertEqual(r["errno"] == 0, allowed_after, f"{addr}: {r}")


if __name__ == "__main__":
    unittest.main(verbosity=2)
