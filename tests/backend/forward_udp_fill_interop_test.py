"""A full table of -u client flows lets a new client in (the second review
of issue #30, finding 5; the first review's finding 8 on the spliced path).

Each -u client address (source address and port) is a client flow, and
at most --max-udp-flows of them are open. Before, a full table refused
every new client until a flow had been idle for --udp-timeout (180 s):
40 ports of one host, each sending one datagram the guest never answered,
locked a real client out of --max-udp-flows=32. Now a flow the guest has
not answered closes after 30 s (conntrack's UNREPLIED), and a full table
evicts the least recently active unanswered flow, else the least recently
active one (forward.N.udp_evicted_unreplied, udp_evicted_replied).

netstackd --max-udp-flows=N -u 15353:5353 -- a UDP server on the guest's
0.0.0.0:5353 that answers only datagrams marked "real" (a flood's are
left unanswered, as a server that ignores junk would) runs in H
(BackendTopology: lo and a veth into an empty sink namespace, no default
route; asserted before each start). The clients run in H and send to H's
veth address.

  a flood of unanswered clients: an answered client, then 40 flood
    ports, then a new real client: it is answered, and the first keeps
    its flow; 10 unanswered flows evicted, none refused. On the spliced
    path (the default for -- CMD) and through the stack.
  every flow answered: 5 real clients in a table of 4; the fifth evicts
    the least recently active, which, back, evicts the next.
Needs root.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

from tests.backend.backend_topology import H4, BackendTopology
from tests.interop import interop_util as iu

# CMD's interpreter: one that every uid may run (CMD need not keep the
# caller's uid; this process's may be under /root).
GUEST_PYTHON = next((p for p in ("/usr/bin/python3", sys.executable)
                     if os.access(p, os.X_OK)), sys.executable)
# The guest: echoes datagrams that start with b"real", ignores the rest.
GUEST = """
import os, signal, socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 5353))
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
print("ready", flush=True)
while True:
    data, peer = s.recvfrom(65536)
    if data.startswith(b"real"):
        s.sendto(data, peer)
"""

# The clients, in H: a script of steps from argv[1] (JSON), each
# ["real", name] (send name's datagram, up to 3 tries, 1 s each: true if
# it came back) or ["flood", n] (n new ports send one datagram each).
# Prints the results of the "real" steps as a JSON list.
CLIENTS = """
import json, socket, sys, time
addr = (sys.argv[2], int(sys.argv[3]))
socks, out, flood = {}, [], []
for step in json.loads(sys.argv[1]):
    if step[0] == "flood":
        for _ in range(step[1]):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.connect(addr)
            s.send(b"flood")
            flood.append(s)
        time.sleep(0.5)
        continue
    name = step[1]
    if name not in socks:
        socks[name] = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        socks[name].connect(addr)
        socks[name].settimeout(1)
    s, ok = socks[name], False
    for _ in range(3):
        s.send(b"real " + name.encode())
        try:
            ok = s.recv(100) == b"real " + name.encode()
            break
        except socket.timeout:
            pass
    out.append(ok)
print(json.dumps(out))
"""


class ForwardUdpFillTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root")
        if not iu.have("unshare"):
            raise unittest.SkipTest("needs unshare")
        cls.topo = BackendTopology()
        cls.tmp = tempfile.mkdtemp(prefix="nst-udpfill-")
        try:
            cls.topo.setup_host()
        except BaseException:
            cls.topo.close()
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        cls.topo.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def start(self, *flags):
        """netstackd --verbose FLAGS -u 15353:5353 -- the guest; returns
        (process, the stderr file) once the guest says ready. Stopped
        (SIGTERM) at cleanup."""
        err = open(os.path.join(self.tmp, f"err.{time.monotonic_ns()}"), "w+")
        cmd = self.topo.sandbox_args("--verbose", *flags, "-u", "15353:5353",
                                     "--", GUEST_PYTHON, "-c", GUEST)
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err,
                             text=True)
        self.addCleanup(self.stop, p, err)
        line = p.stdout.readline().strip()
        if line != "ready":
            err.seek(0)
            self.fail(f"the guest did not start: {line!r} {err.read()}")
        return p, err

    def stop(self, p, err):
        """SIGTERM to netstackd (passed on to CMD); its status and what it
        printed (the counters, at exit). Safe to call twice."""
        if err.closed:
            return p.returncode, ""
        if p.poll() is None:
            p.terminate()
        try:
            rc = p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = p.wait()
        p.stdout.close()
        err.seek(0)
        text = err.read()
        err.close()
        return rc, text

    def clients(self, steps):
        p = subprocess.run(
            self.topo.in_ns(self.topo.h, sys.executable, "-c", CLIENTS,
                            json.dumps(steps), H4, "15353"),
            capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout)

    def flood_then_a_real_client(self, *flags):
        p, err = self.start("--max-udp-flows=32", *flags)
        got = self.clients([["real", "a"], ["flood", 40], ["real", "b"],
                            ["real", "a"]])
        rc, text = self.stop(p, err)
        self.assertEqual(rc, 0, text)
        c = iu.parse_counters(text)
        figures = {k: c.get(f"forward.1.{k}") for k in (
            "accepted", "udp_refused_limit", "udp_evicted_unreplied",
            "udp_evicted_replied", "datagrams_from_guest")}
        self.assertEqual(got, [True, True, True],
                         f"a real client after 40 unanswered ports: {figures}")
        # 42 client flows in a table of 32: the 10 least recently active
        # unanswered ones made room; the answered one stayed.
        self.assertEqual(figures, {
            "accepted": 42, "udp_refused_limit": 0,
            "udp_evicted_unreplied": 10, "udp_evicted_replied": 0,
            "datagrams_from_guest": 3}, text)
        self.assertEqual(c["forward.1.datagrams_to_guest"], 43)
        self.assertEqual(c["forward.1.udp_expired_unreplied"], 0)
        return c

    def test_a_flood_of_unanswered_clients_spliced(self):
        c = self.flood_then_a_real_client()
        # Through sockets in the guest's namespace, not the backend's table.
        self.assertEqual(c["backend.udp.inbound.opened"], 0)

    def test_a_flood_of_unanswered_clients_through_the_stack(self):
        c = self.flood_then_a_real_client("--forward-path=stack")
        self.assertEqual(c["backend.udp.inbound.opened"], 42)
        self.assertEqual(c["backend.udp.inbound.evicted_unreplied"], 10)

    def test_every_flow_answered(self):
        p, err = self.start("--max-udp-flows=4")
        # a..e each answered; e evicts a (the least recently active), and
        # a, back, evicts b. c, d and e keep their flows.
        got = self.clients([["real", n] for n in "abcde"] +
                           [["real", n] for n in "cdea"])
        self.assertEqual(got, [True] * 9)
        rc, text = self.stop(p, err)
        self.assertEqual(rc, 0, text)
        c = iu.parse_counters(text)
        self.assertEqual(c["forward.1.accepted"], 6, text)
        self.assertEqual(c["forward.1.udp_evicted_replied"], 2, text)
        self.assertEqual(c["forward.1.udp_evicted_unreplied"], 0, text)
        self.assertEqual(c["forward.1.udp_refused_limit"], 0, text)


if __name__ == "__main__":
    unittest.main()
