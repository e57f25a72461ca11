"""A local user must not take over a -u forward's port (review 2026-12-06,
finding 6).

For UDP, SO_REUSEADDR on two sockets is all the kernel asks before it lets
them share an address and port, whoever owns them, and the newest socket
then receives the clients' datagrams and answers from the forward's own
address. netstackd once set it on its -u sockets.

netstackd -u 19100:9100 -- forward_guest_server.py (a UDP echo server on
the guest's 127.0.0.1:9100) runs in H (BackendTopology: lo and a veth into
an empty sink namespace, no default route; asserted before the start).
A process of uid 65534 in H then binds 0.0.0.0:19100 (and 127.0.0.1,
[::]) with SO_REUSEADDR: each bind must fail with EADDRINUSE, and a
client's datagram must come back from the guest, seen there. Needs root
and setpriv.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

from tests.backend.backend_topology import BackendTopology
from tests.interop import interop_util as iu

GUEST = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                     "forward_guest_server.py")
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
HOST_PORT, GUEST_PORT = 19100, 9100

# Binds (family, addr, HOST_PORT) with SO_REUSEADDR and says how that went
# as one JSON line; if bound, waits 3 s for a datagram, answers it with
# "forged" and says what it got.
ATTACKER = r"""
import errno, json, socket, sys
family = socket.AF_INET6 if sys.argv[1] == "6" else socket.AF_INET
s = socket.socket(family, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
if family == socket.AF_INET6:
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
try:
    s.bind((sys.argv[2], int(sys.argv[3])))
except OSError as e:
    print(json.dumps({"bound": False, "errno": errno.errorcode[e.errno]}),
          flush=True)
    sys.exit(0)
print(json.dumps({"bound": True}), flush=True)
s.settimeout(3)
try:
    data, peer = s.recvfrom(65536)
    s.sendto(b"forged", peer)
    print(json.dumps({"got": data.decode(errors="replace")}), flush=True)
except socket.timeout:
    print(json.dumps({"got": None}), flush=True)
"""

# Sends one datagram to 127.0.0.1:HOST_PORT and prints the answer (or
# "timeout").
CLIENT = r"""
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(2)
s.sendto(sys.argv[1].encode(), ("127.0.0.1", int(sys.argv[2])))
try:
    print(s.recv(65536).decode(errors="replace"))
except socket.timeout:
    print("timeout")
"""


class ForwardHijackTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root")
        for tool in ("setpriv", "unshare"):
            if not iu.have(tool):
                raise unittest.SkipTest(f"needs {tool}")
        cls.topo = BackendTopology()
        cls.tmp = tempfile.mkdtemp(prefix="nst-hijack-")
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
        """netstackd --verbose FLAGS -- the guest's servers; returns
        (process, its clients file, its stderr file) once the guest says
        ready. Stopped (SIGTERM) at cleanup."""
        tag = time.monotonic_ns()
        clients = os.path.join(self.tmp, f"clients.{tag}")
        err = open(os.path.join(self.tmp, f"err.{tag}"), "w+")
        cmd = self.topo.sandbox_args("--verbose", *flags, "--",
                                     sys.executable, GUEST, os.devnull,
                                     clients)
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err,
                             text=True)
        self.addCleanup(self.stop, p, err)
        line = p.stdout.readline().strip()
        if line != "ready":
            err.seek(0)
            self.fail(f"the guest did not start: {line!r} {err.read()}")
        return p, clients, err

    def stop(self, p, err):
        """SIGTERM to netstackd; its status and what it printed (the
        counters). Safe to call twice."""
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

    def in_h(self, *cmd):
        return self.topo.in_ns(self.topo.h, *cmd)

    def test_another_user_cannot_bind_beside_a_udp_forward(self):
        p, clients, err = self.start("-u", f"{HOST_PORT}:{GUEST_PORT}")
        # The forward works before anyone tries.
        out = iu.run(*self.in_h(sys.executable, "-c", CLIENT, "before",
                                str(HOST_PORT))).stdout.strip()
        self.assertEqual(out, "before")
        for family, addr in (("4", "0.0.0.0"), ("4", "127.0.0.1"),
                             ("6", "::")):
            with self.subTest(addr=addr):
                attacker = subprocess.Popen(
                    self.in_h(*NOBODY, sys.executable, "-c", ATTACKER, family,
                              addr, str(HOST_PORT)),
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                try:
                    first = json.loads(attacker.stdout.readline())
                    query = f"query-for-the-guest-{addr}"
                    answer = iu.run(*self.in_h(
                        sys.executable, "-c", CLIENT, query,
                        str(HOST_PORT))).stdout.strip()
                    rest, e = attacker.communicate(timeout=10)
                finally:
                    if attacker.poll() is None:
                        attacker.kill()
                        attacker.communicate()
                self.assertEqual(first, {"bound": False,
                                         "errno": "EADDRINUSE"},
                                 f"uid 65534 bound {addr}:{HOST_PORT} beside "
                                 f"netstackd; then it printed {rest!r} {e!r} "
                                 f"and the client got {answer!r}")
                self.assertEqual(answer, query, "the guest did not answer")
        rc, text = self.stop(p, err)
        self.assertEqual(rc, 0, text)
        with open(clients) as f:
            self.assertIn("udp9100 127.0.0.1", f.read())
        c = iu.parse_counters(text)
        self.assertEqual(c["forward.1.datagrams_to_guest"], 4)
        self.assertEqual(c["forward.1.datagrams_from_guest"], 4)


if __name__ == "__main__":
    # Bazel's timeout sends SIGTERM: fail the test, and let the cleanups
    # remove the namespaces and processes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("SIGTERM"))
    unittest.main(verbosity=2)
