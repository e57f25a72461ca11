#!/usr/bin/env python3
"""netstackd --backend keeps TCP's end-of-stream semantics: the Linux kernel
is the guest (G, on a TAP), real sockets in the host namespace H
(backend_topology.py), and the same scenario kernel to kernel (a client in
the sink namespace S, over the veth to H) as the reference where the claim
is "as the kernel would give".

Shown, over IPv4 and IPv6:
  - half-close both ways: one side sends, shuts down its write side and
    keeps reading; the other reads to EOF and only then sends its own
    bytes. Every byte arrives (sha256) and each EOF comes after the other
    side's shutdown and with exactly the bytes sent before it;
  - a reset (SO_LINGER 0 close) from either side while either side sends:
    the other side's recv/send fails as it does kernel to kernel
    (ECONNRESET for a reader, ECONNRESET or EPIPE for a sender), and the
    flow ends as backend.tcp_end.guest_reset / host_reset;
  - a slow reader on either side (64 KiB every 25 ms while 16 MiB come):
    every byte arrives, netstackd's RSS grows by less than 64 MiB and
    backend.tcp_buffered_bytes stays bounded;
  - the guest process SIGKILLed, or H's server SIGKILLed, while sending
    or receiving: the flow ends as the kernel's close makes it (FIN:
    closed; RST: guest_reset / host_reset) and the other side sees what
    it would kernel to kernel;
  - the guest's link taken down mid-transfer (the guest goes silent): the
    flow ends by the guest-side retransmission timeout (guest_error) and
    the host socket gets a reset.
After each scenario every host socket is closed: backend.tcp_host_fds_open
is 0 and netstackd's /proc/<pid>/fd count is back to its baseline.
Needs root.
"""
import json
import os
import subprocess
import sys
import time
import unittest

from tests.backend.backend_topology import H4, H6, BackendTopology
from tests.interop import interop_util as iu

S4, S6 = "198.51.100.2", "2001:db8:1::2"
BIG = 64 << 20  # a transfer that is still running when something happens
SLOW_BYTES = iu.env_int("NST_BACKEND_SLOW_BYTES", 16 << 20)
RSS_GROWTH_LIMIT = 64 << 20

# One end of a TCP connection, driven by a JSON argument:
#   connect [addr, port] | listen [addr, port] (one connection; prints
#     "ready" once listening)
#   send N: seeded random bytes (seed); after_eof: only once the peer's
#     EOF was read; shut: shutdown(SHUT_WR) after them, shut_delay seconds
#     later; abort_sent: SO_LINGER 0 close after that many bytes sent
#   recv: read to EOF or error; chunk/sleep: a slow reader (MSG_WAITALL
#     chunks, a sleep after each); abort_recv: SO_LINGER 0 close after
#     that many bytes read
#   mark: print "mark" once that many bytes moved (sent + received)
#   linger_close: the final close is SO_LINGER 0
# Prints one JSON line at the end: byte counts, sha256s, the times of the
# shutdown and of the EOF, and the errno names of a failed send / recv.
PEER = r"""
import errno, hashlib, json, random, socket, struct, sys, threading, time
a = json.loads(sys.argv[1])
def name(e):
    return errno.errorcode.get(e.errno, str(e.errno))
role, (addr, port) = ("connect", a["connect"]) if "connect" in a else ("listen", a["listen"])
fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
if role == "listen":
    l = socket.socket(fam, socket.SOCK_STREAM)
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind((addr, port))
    l.listen(1)
    print("ready", flush=True)
    s, _ = l.accept()
    l.close()
else:
    s = socket.create_connection((addr, port), timeout=10)
s.settimeout(a.get("timeout", 60))
out = {"sent": 0, "received": 0}
moved = [0]
lock = threading.Lock()
marked = threading.Event()
eof = threading.Event()
aborted = threading.Event()
def progress(n):
    with lock:
        moved[0] += n
        if a.get("mark") is not None and moved[0] >= a["mark"] and not marked.is_set():
            marked.set()
            print("mark", flush=True)
def abort():
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    aborted.set()
    s.close()
def sender():
    if a.get("after_eof"):
        eof.wait()
    rng = random.Random(a.get("seed", 1))
    h = hashlib.sha256()
    left = a["send"]
    try:
        while left > 0:
            b = rng.randbytes(min(1 << 16, left))
            if a.get("abort_sent") is not None:
                b = b[:max(1, a["abort_sent"] - out["sent"])]
            s.sendall(b)
            h.update(b)
            out["sent"] += len(b)
            left -= len(b)
            progress(len(b))
            if a.get("abort_sent") is not None and out["sent"] >= a["abort_sent"]:
                return abort()
        if a.get("shut"):
            time.sleep(a.get("shut_delay", 0))
            out["t_shut"] = time.time()
            s.shutdown(socket.SHUT_WR)
    except OSError as e:
        out["send_error"] = name(e)
    finally:
        out["sent_sha"] = h.hexdigest()
t = None
if a.get("send"):
    t = threading.Thread(target=sender)
    t.start()
if a.get("recv"):
    h = hashlib.sha256()
    chunk = a.get("chunk", 1 << 16)
    try:
        while True:
            b = s.recv(chunk, socket.MSG_WAITALL if a.get("sleep") else 0)
            if not b:
                out["t_eof"] = time.time()
                break
            h.update(b)
            out["received"] += len(b)
            progress(len(b))
            if a.get("abort_recv") is not None and out["received"] >= a["abort_recv"]:
                abort()
                break
            if a.get("sleep"):
                time.sleep(a["sleep"])
    except OSError as e:
        out["recv_error"] = name(e)
    out["received_sha"] = h.hexdigest()
    eof.set()
if t is not None:
    t.join()
if not aborted.is_set():
    if a.get("linger_close"):
        abort()
    else:
        s.close()
print(json.dumps(out), flush=True)
"""


def sha_of(nbytes, seed=1):
    """The sha256 PEER's sender computes for `nbytes` from `seed`."""
    import hashlib
    import random
    rng = random.Random(seed)
    h = hashlib.sha256()
    while nbytes > 0:
        b = rng.randbytes(min(1 << 16, nbytes))
        h.update(b)
        nbytes -= len(b)
    return h.hexdigest()


class Peer:
    """One PEER process in a namespace; result() is its JSON line."""

    def __init__(self, topo, ns, **args):
        self.proc = subprocess.Popen(
            topo.in_ns(ns, sys.executable, "-c", PEER, json.dumps(args)),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        topo.procs.append(self.proc)
        self.lines = []

    def expect(self, word, timeout=30):
        """Waits for `word` on a line of its own (ready, mark)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.lines.append(line)
            if line.strip() == word:
                return
        raise AssertionError(f"peer did not say {word}: {self.lines} "
                             f"{self.proc.stderr.read() if self.proc.poll() is not None else ''}")

    def result(self, timeout=90):
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            raise AssertionError(f"peer hung: {err}")
        lines = [l for l in (self.lines + out.splitlines()) if l.startswith("{")]
        if not lines:
            raise AssertionError(f"peer printed no result (rc "
                                 f"{self.proc.returncode}): {err}")
        return json.loads(lines[-1])

    def kill(self):
        self.proc.kill()
        self.proc.communicate()


class BackendTcpSemanticsTest(unittest.TestCase):
    port = 7100

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root")
        cls.topo = BackendTopology()
        cls.nd = None
        try:
            cls.topo.setup()
            s = cls.topo.s
            # The reference client lives in S, on the other end of H's veth.
            iu.run("ip", "-n", s, "addr", "add", f"{S4}/24", "dev", "sveth")
            iu.run("ip", "-n", s, "addr", "add", f"{S6}/64", "dev", "sveth",
                   "nodad")
            cls.nd = cls.topo.netstackd()
            cls.topo.configure_guest()
            cls.fd_baseline = cls.fd_count()
        except BaseException:
            if cls.nd is not None:
                cls.nd.close()
            cls.topo.close()
            raise

    @classmethod
    def tearDownClass(cls):
        if cls.nd is not None:
            print(cls.nd.log()[-6000:], file=sys.stderr)
            cls.nd.close()
        cls.topo.close()

    @classmethod
    def fd_count(cls):
        return len(os.listdir(f"/proc/{cls.nd.proc.pid}/fd"))

    @classmethod
    def next_port(cls):
        cls.port += 1
        return cls.port

    def rss(self):
        with open(f"/proc/{self.nd.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) << 10
        raise AssertionError("no VmRSS")

    def server(self, addr, port, **args):
        p = Peer(self.topo, self.topo.h, listen=[addr, port], **args)
        p.expect("ready")
        return p

    def client(self, via, addr, port, **args):
        """A client in G (through the backend) or in S (the kernel)."""
        ns = self.topo.g if via == "backend" else self.topo.s
        return Peer(self.topo, ns, connect=[addr, port], **args)

    def settled(self, before=None):
        """Waits until no flow is open; asserts every host socket closed
        (counter and /proc fd count). Returns the counters' change since
        `before`."""
        c = {}

        def idle():
            nonlocal c
            c = self.nd.counters()
            return (c.get("backend.tcp_flows_open") == 0 and
                    self.fd_count() == self.fd_baseline)
        ok = iu.wait_for(idle, 30, interval=0.3)
        self.assertTrue(ok, f"flows open {c.get('backend.tcp_flows_open')}, "
                        f"fds {self.fd_count()} vs {self.fd_baseline}")
        self.assertEqual(c["backend.tcp_host_fds_open"], 0)
        if before is None:
            return c
        return {k: v - before.get(k, 0) for k, v in c.items()
                if k.startswith("backend.tcp_end.") and v != before.get(k, 0)}

    def ends(self):
        return self.nd.counters()

    # -- 4a: half-close ----------------------------------------------------

    def half_close(self, via, addr, first):
        """`first` ("guest" = the connecting side, or "host") sends 1 MiB,
        shuts down its write side 0.3 s later and reads on; the other side
        reads to EOF and only then sends 2 MiB and closes."""
        port = self.next_port()
        n_first, n_second = 1 << 20, 2 << 20
        shutter = dict(send=n_first, seed=3, shut=True, shut_delay=0.3,
                       recv=True)
        answerer = dict(send=n_second, seed=4, after_eof=True, shut=True,
                        recv=True)
        if first == "guest":
            srv = self.server(addr, port, **answerer)
            cli = self.client(via, addr, port, **shutter)
            a, b = cli.result(), srv.result()
        else:
            srv = self.server(addr, port, **shutter)
            cli = self.client(via, addr, port, **answerer)
            a, b = srv.result(), cli.result()
        # a shut down first; b read its EOF, then sent.
        for r in (a, b):
            self.assertNotIn("send_error", r)
            self.assertNotIn("recv_error", r)
        self.assertEqual(b["received"], n_first)
        self.assertEqual(b["received_sha"], sha_of(n_first, 3))
        self.assertEqual(a["received"], n_second)
        self.assertEqual(a["received_sha"], sha_of(n_second, 4))
        # Each EOF came after the other side's shutdown, not before it
        # (nor late: within a second).
        self.assertGreaterEqual(b["t_eof"], a["t_shut"])
        self.assertLess(b["t_eof"] - a["t_shut"], 1.0)
        self.assertGreaterEqual(a["t_eof"], b["t_shut"])
        self.assertLess(a["t_eof"] - b["t_shut"], 1.0)
        return a, b

    def test_4a_half_close_both_ways(self):
        for addr in (H4, H6):
            for first in ("guest", "host"):
                with self.subTest(addr=addr, first=first):
                    before = self.ends()
                    self.half_close("backend", addr, first)
                    d = self.settled(before)
                    self.assertEqual(d, {"backend.tcp_end.closed": 1})

    # -- 4b: resets mid-transfer ------------------------------------------

    def reset_case(self, via, addr, aborter, direction):
        """`aborter` ("guest"/"host") closes with SO_LINGER 0 after 4 MiB
        while bytes flow `direction` ("up": guest to host, "down")."""
        port = self.next_port()
        guest_sends = direction == "up"
        sender = dict(send=BIG)
        reader = dict(recv=True)
        if aborter == ("guest" if guest_sends else "host"):
            sender["abort_sent"] = 4 << 20
        else:
            reader["abort_recv"] = 4 << 20
        srv = self.server(addr, port, **(reader if guest_sends else sender))
        cli = self.client(via, addr, port, **(sender if guest_sends else reader))
        g, h = cli.result(), srv.result()
        other = h if aborter == "guest" else g
        if guest_sends == (aborter == "guest"):
            return other.get("recv_error", "EOF")
        return other.get("send_error", "completed")

    def test_4b_reset_from_each_side(self):
        expect_end = {"guest": "backend.tcp_end.guest_reset",
                      "host": "backend.tcp_end.host_reset"}
        for addr, ref in ((H4, S4), (H6, S6)):
            for aborter in ("guest", "host"):
                for direction in ("up", "down"):
                    with self.subTest(addr=addr, aborter=aborter,
                                      direction=direction):
                        kernel = self.reset_case("kernel", addr, aborter,
                                                 direction)
                        before = self.ends()
                        got = self.reset_case("backend", addr, aborter,
                                              direction)
                        d = self.settled(before)
                        print(f"reset {addr} by {aborter} {direction}: "
                              f"backend {got}, kernel {kernel}",
                              file=sys.stderr)
                        # The kernel's answer; a sender may see either
                        # errno (the RST or the write after it).
                        allowed = ({"ECONNRESET", "EPIPE"}
                                   if kernel in ("ECONNRESET", "EPIPE")
                                   else {kernel})
                        self.assertIn(kernel, ("ECONNRESET", "EPIPE"))
                        self.assertIn(got, allowed)
                        self.assertEqual(d, {expect_end[aborter]: 1})

    # -- 4c: slow readers -------------------------------------------------

    def slow_pair(self, via, addr, reader_side):
        port = self.next_port()
        sender = dict(send=SLOW_BYTES, seed=5, shut=True)
        reader = dict(recv=True, chunk=64 << 10, sleep=0.025)
        srv = self.server(addr, port, **(reader if reader_side == "host"
                                         else sender))
        cli = self.client(via, addr, port,
                          **(reader if reader_side == "guest" else sender))
        return srv, cli

    def slow_reader(self, addr, reader_side):
        # The kernel to kernel time, for the report.
        t0 = time.time()
        srv, cli = self.slow_pair("kernel", addr, reader_side)
        r = (srv if reader_side == "host" else cli).result()
        self.assertEqual(r["received"], SLOW_BYTES)
        kernel_dt = time.time() - t0
        rss0 = self.rss()
        c0 = self.nd.counters()
        base = (c0["backend.tcp_bytes_guest_to_host"] +
                c0["backend.tcp_bytes_host_to_guest"])
        srv, cli = self.slow_pair("backend", addr, reader_side)
        peak_rss, peak_buf = rss0, 0
        t0 = last_move = time.time()
        moved, max_gap = None, 0.0
        while cli.proc.poll() is None or srv.proc.poll() is None:
            peak_rss = max(peak_rss, self.rss())
            c = self.nd.counters()
            peak_buf = max(peak_buf, c.get("backend.tcp_buffered_bytes", 0))
            now = time.time()
            m = (c["backend.tcp_bytes_guest_to_host"],
                 c["backend.tcp_bytes_host_to_guest"])
            if m != moved:
                moved, last_move = m, now
            # Until every byte went through (the reader's kernel then
            # still holds a receive buffer's worth, read out slowly).
            if sum(m) - base < SLOW_BYTES:
                max_gap = max(max_gap, now - last_move)
            time.sleep(0.2)
            self.assertLess(time.time() - t0, 120, "transfer too slow")
        dt = time.time() - t0
        r = (srv if reader_side == "host" else cli).result()
        self.assertEqual(r.get("recv_error"), None)
        self.assertEqual(r["received"], SLOW_BYTES)
        self.assertEqual(r["received_sha"], sha_of(SLOW_BYTES, 5))
        print(f"slow {reader_side} reader {addr}: {SLOW_BYTES >> 20} MiB in "
              f"{dt:.1f} s (kernel to kernel {kernel_dt:.1f} s), netstackd RSS +{(peak_rss - rss0) >> 10} KiB "
              f"(peak {peak_rss >> 10} KiB), peak "
              f"backend.tcp_buffered_bytes {peak_buf}, longest time without "
              f"a relayed byte {max_gap:.1f} s", file=sys.stderr)
        # The reader takes 64 KiB every 25 ms: the flow moves bytes at
        # least that often. A window that opened unannounced would leave
        # the sender to its persist timer, seconds at a time.
        self.assertLess(max_gap, 4.0, "the flow stalled")
        self.assertLess(peak_rss - rss0, RSS_GROWTH_LIMIT)
        # The buffered bytes are counted and bounded: the guest-to-host
        # pending bytes, the guest socket's receive window and its send
        # buffer (BackendLimits), not the 16 MiB.
        self.assertGreater(peak_buf, 0)
        self.assertLess(peak_buf, 8 << 20)

    def test_4c_slow_reader_each_side(self):
        for addr in (H4, H6):
            for side in ("guest", "host"):
                with self.subTest(addr=addr, reader=side):
                    before = self.ends()
                    self.slow_reader(addr, side)
                    d = self.settled(before)
                    self.assertEqual(d, {"backend.tcp_end.closed": 1})

    # -- 6: a side killed -------------------------------------------------

    def kill_case(self, via, addr, victim, direction):
        """SIGKILL `victim` ("guest"/"host") after 4 MiB moved
        `direction` ("up": guest to host, "down"). The survivor reads or
        sends on; returns what it saw."""
        port = self.next_port()
        guest_sends = direction == "up"
        sender = dict(send=BIG)
        # A reader that falls behind: when killed it holds unread bytes.
        reader = dict(recv=True, chunk=64 << 10, sleep=0.01)
        killed = dict(mark=4 << 20)
        srv = self.server(addr, port, **(reader if guest_sends else sender),
                          **(killed if victim == "host" else {}))
        cli = self.client(via, addr, port,
                          **(sender if guest_sends else reader),
                          **(killed if victim == "guest" else {}))
        v, survivor = (cli, srv) if victim == "guest" else (srv, cli)
        v.expect("mark")
        v.kill()
        r = survivor.result()
        if (victim == "guest") == guest_sends:
            # The killed side was sending: the survivor reads.
            return r.get("recv_error", "EOF")
        return r.get("send_error", "completed")

    def test_6a_killed_guest_or_host_process(self):
        expect_end = {
            # A killed sender's kernel sends FIN (nothing unread): the
            # survivor reads EOF, closes, and the flow closes.
            ("guest", "up"): "backend.tcp_end.closed",
            ("host", "down"): "backend.tcp_end.closed",
            # A killed reader's kernel resets (unread bytes).
            ("guest", "down"): "backend.tcp_end.guest_reset",
            ("host", "up"): "backend.tcp_end.host_reset",
        }
        for addr, ref in ((H4, S4), (H6, S6)):
            for (victim, direction), end in expect_end.items():
                with self.subTest(addr=addr, victim=victim,
                                  direction=direction):
                    kernel = self.kill_case("kernel", addr, victim, direction)
                    before = self.ends()
                    got = self.kill_case("backend", addr, victim, direction)
                    d = self.settled(before)
                    print(f"kill {victim} {direction} {addr}: backend {got}, "
                          f"kernel {kernel}, ends {d}", file=sys.stderr)
                    if kernel in ("ECONNRESET", "EPIPE"):
                        self.assertIn(got, ("ECONNRESET", "EPIPE"))
                    else:
                        self.assertEqual(got, kernel)
                    self.assertEqual(d, {end: 1})


if __name__ == "__main__":
    unittest.main()
