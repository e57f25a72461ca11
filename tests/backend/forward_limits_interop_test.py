"""Spliced -t connections are bounded, and network clients cannot take the
guest's own fds (review 2026-12-06, finding 7).

Each spliced connection holds the client's fd and a socket in the guest's
namespace, and up to two pipes while data moves. Idle clients of a
published port once used up netstackd's fds, and then the guest's own new
flows got RST (backend.tcp_end.connect_failed).

netstackd -t 18080:8080 -- forward_hold_peer.py guest (holds every
forwarded connection; on a signal file, makes 5 connections of its own to
an echo server in H through the backend) runs in H (BackendTopology: lo
and a veth into an empty sink namespace, no default route; asserted
before each start). forward_hold_peer.py clients opens idle connections
to the forward from H.

  the fd reserve: netstackd with a hard fd limit of 1024 that it may not
    raise (no CAP_SYS_RESOURCE), default flags. The limit is far short of
    the guest's flows' budget, so forwards get a quarter of it (netstackd
    says how many connections on stderr); 600 clients: that many are
    held, the rest are reset (forward.1.refused_limit), none waits in the
    backlog, and the guest's own connections all succeed.
  the flags: --max-forward-conns=30 --max-conns-per-forward=20 on two
    forwards: 25 clients on the first (20 held, 5 reset), 25 on the second
    (10 held: the total; 15 reset); 5 of the first's closed, 5 more on the
    second are held. Bad values are usage errors.

Through the stack (--forward-path=stack, and always for a VM) a
connection is a backend TCP flow holding the client's fd. Clients once
took the guest's own flow table (a second review of issue #30's fixes,
finding 4: at --max-tcp-flows 32, 40 idle clients left the guest 32
connections held and its own connect() refused, ECONNREFUSED). Inbound
flows now have a share of their own (--max-forward-conns, and
--max-conns-per-forward for each forward):

  the guest's share: --forward-path=stack --max-tcp-flows 32, 40 idle
    clients: all 40 held, and the guest's own connections succeed.
  the flags through the stack: as above, the limits per forward and in
    all, the refusals counted (forward.N.refused_limit,
    backend.tcp_refused_inbound_limit).
  the fd reserve through the stack: a hard limit of 1024; one fd a
    connection, a quarter of the fds, the rest reset.
Needs root, prlimit and setpriv.
"""
import json
import os
import re
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

from tests.backend.backend_topology import H4, BackendTopology
from tests.interop import interop_util as iu

PEER = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                    "forward_hold_peer.py")
ECHO_PORT = 17000
# netstackd may not raise its hard fd limit (some containers take
# CAP_SYS_RESOURCE from root too).
NO_SYS_RESOURCE = ("setpriv", "--bounding-set=-sys_resource",
                   "--inh-caps=-sys_resource")
HARD_1024 = ("prlimit", "--nofile=1024:1024", *NO_SYS_RESOURCE)
# A shell's usual soft limit; netstackd (root) raises it.
SOFT_1024 = ("prlimit",
             f"--nofile=1024:{resource.getrlimit(resource.RLIMIT_NOFILE)[1]}")


class Clients:
    """forward_hold_peer.py clients in H, driven line by line."""

    def __init__(self, topo):
        self.p = subprocess.Popen(
            topo.in_ns(topo.h, sys.executable, PEER, "clients"),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(self, line, timeout=60):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        # One line answers each command: nothing is buffered past it.
        ready, _, _ = select.select([self.p.stdout], [], [], timeout)
        assert ready, f"no answer to {line!r} in {timeout} s"
        return json.loads(self.p.stdout.readline())

    def settled(self, port, timeout=15):
        """PORT's state once it has not changed for a second."""
        last, since = None, time.monotonic()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            now = self.ask(f"state {port}")
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= 1:
                break
            time.sleep(0.2)
        return last

    def close(self):
        if self.p.poll() is None:
            self.p.stdin.close()
            try:
                self.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.p.stdout.close()


class ForwardLimitsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root")
        for tool in ("prlimit", "setpriv", "unshare"):
            if not iu.have(tool):
                raise unittest.SkipTest(f"needs {tool}")
        cls.topo = BackendTopology()
        cls.tmp = tempfile.mkdtemp(prefix="nst-fwdlim-")
        try:
            cls.topo.setup_host()
            cls.topo.tcp_echo_server(ECHO_PORT)
        except BaseException:
            cls.topo.close()
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        cls.topo.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def start(self, *flags, wrap=()):
        """netstackd --verbose FLAGS -- the holding guest; returns
        (process, the guest's directory, the stderr file) once the guest
        says ready. Stopped (SIGTERM) at cleanup."""
        tag = time.monotonic_ns()
        directory = os.path.join(self.tmp, f"guest.{tag}")
        os.mkdir(directory)
        err = open(os.path.join(self.tmp, f"err.{tag}"), "w+")
        # CMD is this test's script and interpreter and writes its results
        # in our 0700 directory: root's uid (sandbox_args adds --runas 0).
        cmd = self.topo.sandbox_args("--verbose", *flags, "--",
                                     sys.executable, PEER, "guest", "8080",
                                     H4, str(ECHO_PORT), directory, wrap=wrap)
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err,
                             text=True)
        self.addCleanup(self.stop, p, err)
        line = p.stdout.readline().strip()
        if line != "ready":
            err.seek(0)
            self.fail(f"the guest did not start: {line!r} {err.read()}")
        return p, directory, err

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

    def clients(self):
        c = Clients(self.topo)
        self.addCleanup(c.close)
        return c

    def guest_round(self, directory, n):
        """The guest's 5 own connections to H's echo server, and the
        number of forwarded connections it holds."""
        open(os.path.join(directory, f"go.{n}"), "w").close()
        result = os.path.join(directory, f"result.{n}")
        self.assertTrue(iu.wait_for(lambda: os.path.exists(result), 60),
                        "the guest did not answer")
        with open(result) as f:
            return json.load(f)

    def test_clients_cannot_take_the_guests_fds(self):
        n = 600  # 2 fds each in netstackd: past a limit of 1024
        p, directory, err = self.start("-t", "18080:8080", wrap=HARD_1024)
        clients = self.clients()
        self.assertEqual(clients.ask(f"open 18080 {n}"),
                         {"opened": n, "errors": []})
        state = clients.settled(18080)
        got = self.guest_round(directory, 0)
        self.assertEqual(got["outbound"], ["ok"] * 5,
                         f"the guest's own connections failed while it held "
                         f"{got['held']} forwarded ones (clients: {state})")
        rc, text = self.stop(p, err)
        self.assertEqual(rc, 0, text)
        # What fits: a quarter of the fds, 6 for each connection.
        m = re.search(r"spliced forward connections: at most (\d+) of "
                      r"--max-forward-conns 1024", text)
        self.assertIsNotNone(m, text)
        fit = int(m.group(1))
        print(f"  fd reserve: {fit} spliced connections fit in a hard limit "
              f"of 1024; {n - fit} of {n} clients reset, the guest's own 5 "
              f"connections made", file=sys.stderr)
        self.assertGreater(fit, 0)
        self.assertLess(fit, n)
        self.assertEqual(state, {"open": fit, "reset": n - fit, "closed": 0})
        self.assertEqual(got["held"], fit)
        c = iu.parse_counters(text)
        self.assertEqual(c["forward.1.accepted"], fit)
        self.assertEqual(c["forward.1.refused_limit"], n - fit)
        self.assertEqual(c["forward.1.accept_errors"], 0)
        self.assertEqual(c["forward.1.failed"], 0)
        self.assertEqual(c.get("backend.tcp_end.connect_failed", 0), 0)
        self.assertEqual(c["backend.tcp_flows_opened"], 5)

    def test_stack_clients_cannot_take_the_guests_flows(self):
        n = 40  # past --max-tcp-flows
        p, directory, err = self.start("--forward-path=stack",
                                       "--max-tcp-flows=32", "-t",
                                       "18080:8080", wrap=SOFT_1024)
        clients = self.clients()
        self.assertEqual(clients.ask(f"open 18080 {n}"),
                         {"opened": n, "errors": []})
        state = clients.settled(18080)
        got = self.guest_round(directory, 0)
        self.assertEqual(got["outbound"], ["ok"] * 5,
                         f"the guest's own connections failed while it held "
                         f"{got['held']} forwarded ones (clients: {state})")
        self.assertEqual(state, {"open": n, "reset": 0, "closed": 0})
        self.assertEqual(got["held"], n)
        rc, text = self.stop(p, err)
        self.assertEqual(rc, 0, text)
        c = iu.parse_counters(text)
        self.assertEqual(c["forward.1.accepted"], n)
        self.assertEqual(c["forward.1.refused_limit"], 0)
        self.assertEqual(c["backend.tcp_inbound_established"], n)
        self.assertEqual(c["backend.tcp_refused_flow_limit"], 0)
        self.assertEqual(c["backend.tcp_refused_inbound_limit"], 0)
        self.assertEqual(c["backend.tcp_flows_established"], 5)

    def test_stack_clients_cannot_take_the_guests_fds(self):
        n = 600  # past what a quarter of a limit of 1024 holds
        p, directory, err = self.start("--forward-path=stack", "-t",
                                       "18080:8080", wrap=HARD_1024)
        clients = self.clients()
        self.assertEqual(clients.ask(f"open 18080 {n}"),
                         {"opened": n, "errors": []})
        state = clients.settled(18080)
        got = self.guest_round(directory, 0)
        self.assertEqual(got["outbound"], ["ok"] * 5,
                         f"the guest's own connections failed while it held "
                         f"{got['held']} forwarded ones (clients: {state})")
        rc, text = self.stop(p, err)
        self.assertEqual(rc, 0, text)
        m = re.search(r"forward connections through the stack: at most "
                      r"(\d+) of --max-forward-conns 1024", text)
        self.assertIsNotNone(m, text)
        fit = int(m.group(1))
        print(f"  fd reserve through the stack: {fit} connections fit in a "
              f"hard limit of 1024; {n - fit} of {n} clients reset, the "
              f"guest's own 5 connections made", file=sys.stderr)
        self.assertGreater(fit, 0)
        self.assertLess(fit, n)
        self.assertEqual(state, {"open": fit, "reset": n - fit, "closed": 0})
        self.assertEqual(got["held"], fit)
        c = iu.parse_counters(text)
        self.assertEqual(c["forward.1.accepted"], fit)
        self.assertEqual(c["forward.1.refused_limit"], n - fit)
        self.assertEqual(c["backend.tcp_refused_inbound_limit"], n - fit)
        self.assertEqual(c.get("backend.tcp_end.connect_failed", 0), 0)
        self.assertEqual(c["backend.tcp_flows_established"], 5)

    def test_the_limits_per_forward_and_in_all(self):
        self.limits_per_forward_and_in_all("splice")

    def test_the_limits_through_the_stack(self):
        self.limits_per_forward_and_in_all("stack")

    def limits_per_forward_and_in_all(self, path):
        p, directory, err = self.start(
            f"--forward-path={path}", "-t", "18080:8080", "-t", "18081:8080",
            "--max-forward-conns=30", "--max-conns-per-forward=20",
            wrap=SOFT_1024)
        clients = self.clients()
        self.assertEqual(clients.ask("open 18080 25")["opened"], 25)
        self.assertEqual(clients.settled(18080),
                         {"open": 20, "reset": 5, "closed": 0})
        self.assertEqual(clients.ask("open 18081 25")["opened"], 25)
        self.assertEqual(clients.settled(18081),
                         {"open": 10, "reset": 15, "closed": 0})
        self.assertEqual(self.guest_round(directory, 0),
                         {"held": 30, "outbound": ["ok"] * 5})
        # Slots come back when connections end.
        self.assertEqual(clients.ask("close 18080 5"), {"closed": 5})
        # The guest sees them end and closes its side; then the relays end.
        held = None
        for i in range(1, 50):
            held = self.guest_round(directory, i)["held"]
            if held == 25:
                break
            time.sleep(0.2)
        self.assertEqual(held, 25)
        self.assertEqual(clients.ask("open 18081 5")["opened"], 30)
        self.assertEqual(clients.settled(18081),
                         {"open": 15, "reset": 15, "closed": 0})
        rc, text = self.stop(p, err)
        self.assertEqual(rc, 0, text)
        if path == "splice":
            self.assertIn("30 spliced forward connections (6 fds each)", text)
        else:
            self.assertIn("30 forward connections through the stack (1 fd "
                          "each)", text)
        c = iu.parse_counters(text)
        self.assertEqual(c["forward.1.accepted"], 20)
        self.assertEqual(c["forward.1.refused_limit"], 5)
        self.assertEqual(c["forward.2.accepted"], 15)
        self.assertEqual(c["forward.2.refused_limit"], 15)
        for i in (1, 2):
            self.assertEqual(c[f"forward.{i}.accept_errors"], 0)
            self.assertEqual(c[f"forward.{i}.failed"], 0)
        if path == "stack":
            # The forward's own limit resets before the backend sees the
            # client; the total is the backend's inbound share.
            self.assertEqual(c["backend.tcp_refused_inbound_limit"], 15)
            self.assertEqual(c["backend.tcp_refused_flow_limit"], 0)

    def test_bad_values_are_usage_errors(self):
        for flag, why in (
                ("--max-forward-conns=0", "--max-forward-conns 0 out of range"),
                ("--max-conns-per-forward=0",
                 "--max-conns-per-forward 0 out of range")):
            p = subprocess.run(self.topo.sandbox_args(
                "-t", "18080:8080", flag, "--", "true"),
                capture_output=True, text=True, timeout=30)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(why, p.stderr)


if __name__ == "__main__":
    # Bazel's timeout sends SIGTERM: fail the test, and let the cleanups
    # remove the namespaces and processes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("SIGTERM"))
    unittest.main(verbosity=2)
