"""The conformance suite's harness: one device under test (DUT) per kind,
each in a network namespace of its own behind a veth pair whose other end
is in a peer namespace with no addresses, where the test plays the remote
peer with raw frames (AF_PACKET). The peer answers ARP and NDP for its
own address itself; the peer namespace's kernel has no address and IPv6
off, so it never answers for the crafted connections.

  LinuxDut     the kernel in the DUT namespace, driven by linux_dut.py
  NetstackDut  netstackd --packet on the DUT's veth end, driven through
               its --control socket

Both DUTs take the same control protocol (Control), so a scenario is
written once. Everything is undone by close(), also after a failure.
"""
import ctypes
import errno
import json
import os
import select
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

from tests.conformance import wire as w

RUNFILES = os.environ.get("TEST_SRCDIR", "")
WORKSPACE = os.environ.get("TEST_WORKSPACE", "netstack")
_HERE = os.path.dirname(os.path.abspath(__file__))


def runfile(path):
    if RUNFILES:
        return os.path.join(RUNFILES, WORKSPACE, path)
    return os.path.join(_HERE, "..", "..", path)


NETSTACKD = os.environ.get("NETSTACKD") or runfile("tools/netstackd/netstackd")
LINUX_DUT = os.path.join(_HERE, "linux_dut.py")

PEER_MAC = "02:00:00:77:00:01"
NET4, NET6 = "10.77.1", "fd77:1::"
PEER4, DUT4 = f"{NET4}.1", f"{NET4}.2"
PEER6, DUT6 = f"{NET6}1", f"{NET6}2"
# Another address on the DUT's link the peer also answers for (an ICMP
# error "from a router", a second client).
ROUTER4, ROUTER6 = f"{NET4}.254", f"{NET6}fe"

CLONE_NEWNET = 0x40000000
# Mutation modes, to see each scenario fail when the behaviour it checks
# is gone (docs/TESTING.md): "deaf" drops every frame the DUT sends (ARP
# and NDP still answered), "mute" drops every frame the peer would send.
BREAK = os.environ.get("NST_CONFORMANCE_BREAK", "")
_libc = ctypes.CDLL(None, use_errno=True)


def run(*cmd, check=True, timeout=30):
    return subprocess.run(list(cmd), check=check, capture_output=True,
                          text=True, timeout=timeout)


def setns(fd):
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"setns: {os.strerror(e)}")


class DutError(Exception):
    def __init__(self, reply):
        super().__init__(f"errno {reply.get('errno')} "
                         f"({errno.errorcode.get(reply.get('errno'), '?')}): "
                         f"{reply.get('error')}")
        self.errno = reply.get("errno")


class Control:
    """The control channel to a DUT: call(op, ...) returns the reply's
    fields or raises DutError; try_call returns (reply, errno)."""

    def __init__(self, path, timeout=10):
        deadline = time.time() + timeout
        while True:
            try:
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.sock.connect(path)
                break
            except OSError:
                self.sock.close()
                if time.time() > deadline:
                    raise
                time.sleep(0.05)
        self.buf = b""

    def raw(self, req):
        self.sock.sendall((json.dumps(req) + "\n").encode())
        while b"\n" not in self.buf:
            b = self.sock.recv(1 << 20)
            if not b:
                raise AssertionError("the DUT closed its control channel")
            self.buf += b
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def call(self, op, **kw):
        r = self.raw({"op": op, **kw})
        if not r.get("ok"):
            raise DutError(r)
        return r

    def try_call(self, op, **kw):
        r = self.raw({"op": op, **kw})
        return r, (0 if r.get("ok") else r.get("errno"))

    def wait(self, op, timeout=3.0, **kw):
        """Repeats a non-blocking call while it says EAGAIN."""
        deadline = time.time() + timeout
        while True:
            r, e = self.try_call(op, **kw)
            if e != errno.EAGAIN or time.time() > deadline:
                if e:
                    raise DutError(r)
                return r
            time.sleep(0.01)

    def wait_until(self, pred, timeout=3.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if pred():
                return True
            time.sleep(0.01)
        return pred()

    def close(self):
        self.sock.close()


class Peer:
    """The raw end: an AF_PACKET socket on the peer's veth end, opened in
    the peer namespace. A reader thread answers ARP and NDP for the peer's
    addresses and queues every other frame the DUT sends."""

    def __init__(self, netns, ifname, dut_mac):
        self.dut_mac = dut_mac
        self.mac = PEER_MAC
        self.ours4 = {PEER4, ROUTER4}
        self.ours6 = {PEER6, ROUTER6}
        self.lock = threading.Condition()
        self.frames = []  # (time, Frame)
        self.log = []     # every (time, direction, Frame), for reports
        self.stop = False
        here = os.open("/proc/self/ns/net", os.O_RDONLY)
        there = os.open(f"/var/run/netns/{netns}", os.O_RDONLY)
        try:
            setns(there)
            try:
                self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW,
                                          socket.htons(0x0003))
                self.sock.bind((ifname, 0))
            finally:
                setns(here)
        finally:
            os.close(here)
            os.close(there)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.thread = threading.Thread(target=self._reader, daemon=True)
        self.thread.start()

    def close(self):
        self.stop = True
        self.thread.join(timeout=2)
        self.sock.close()

    def _reader(self):
        while not self.stop:
            r, _, _ = select.select([self.sock], [], [], 0.1)
            if not r:
                continue
            try:
                raw, addr = self.sock.recvfrom(1 << 16)
            except OSError:
                continue
            if addr[2] == socket.PACKET_OUTGOING:
                continue
            f = w.Frame(raw)
            now = time.time()
            if self._answer_neighbor(f):
                continue
            if BREAK == "deaf":
                continue
            with self.lock:
                self.log.append((now, "in", f))
                self.frames.append((now, f))
                self.lock.notify_all()

    def _answer_neighbor(self, f):
        if f.arp:
            op, sha, spa, tpa = f.arp
            if op == 1 and tpa in self.ours4:
                self.sock.send(w.arp_reply(self.mac, tpa, sha, spa))
            return True
        if f.icmp and f.family == 6 and f.icmp[0] in (133, 135, 143):
            if f.icmp[0] == 135:
                target = str(__import__("ipaddress").ip_address(
                    f.icmp[2][4:20]))
                if target in self.ours6:
                    self.sock.send(w.neighbor_advert(self.mac, target,
                                                     f.eth_src, f.src if
                                                     f.src != "::" else
                                                     "ff02::1"))
            return True
        return False

    def send_frame(self, raw):
        with self.lock:
            self.log.append((time.time(), "out", w.Frame(raw)))
        if BREAK == "mute":
            return
        self.sock.send(raw)

    def send_ip(self, family, packet):
        et = w.ETH_IPV4 if family == 4 else w.ETH_IPV6
        self.send_frame(w.ether(self.dut_mac, self.mac, et, packet))

    def flush(self):
        with self.lock:
            self.frames.clear()
            self.log.clear()

    def expect(self, pred, timeout=2.0):
        """The first queued frame that matches (removed from the queue),
        waiting up to `timeout`; None if none came."""
        deadline = time.time() + timeout
        with self.lock:
            while True:
                for i, (t, f) in enumerate(self.frames):
                    if pred(f):
                        del self.frames[i]
                        f.time = t
                        return f
                left = deadline - time.time()
                if left <= 0:
                    return None
                self.lock.wait(left)

    def collect(self, pred, duration):
        """Every matching frame that arrives within `duration` (and those
        already queued), removed from the queue."""
        time.sleep(duration)
        with self.lock:
            out = []
            rest = []
            for t, f in self.frames:
                if pred(f):
                    f.time = t
                    out.append(f)
                else:
                    rest.append((t, f))
            self.frames = rest
            return out

    def report(self, last=40):
        with self.lock:
            if not self.log:
                return "(no frames)"
            t0 = self.log[0][0]
            return "\n".join(f"  {t - t0:8.3f} {d:3} {f!r}"
                             for t, d, f in self.log[-last:])


class Topology:
    """Two namespaces and a veth pair: DUT end `dut0`, peer end `peer0`."""

    def __init__(self, tag):
        self.dut_ns = f"cf-{os.getpid()}-{tag}-d"
        self.peer_ns = f"cf-{os.getpid()}-{tag}-p"
        self.made = []

    def setup(self):
        for ns in (self.dut_ns, self.peer_ns):
            run("ip", "netns", "add", ns)
            self.made.append(ns)
            run("ip", "-n", ns, "link", "set", "lo", "up")
        run("ip", "link", "add", "dut0", "netns", self.dut_ns, "type", "veth",
            "peer", "name", "peer0", "netns", self.peer_ns)
        self.sysctl(self.peer_ns, "net.ipv6.conf.peer0.disable_ipv6", 1)
        run("ip", "-n", self.peer_ns, "link", "set", "peer0", "address",
            PEER_MAC)
        # Wire packets only: no TSO/GSO/GRO on either end, so segment
        # sizes are what the DUT's TCP chose.
        for ns, dev in ((self.dut_ns, "dut0"), (self.peer_ns, "peer0")):
            run("ip", "netns", "exec", ns, "ethtool", "-K", dev, "tso", "off",
                "gso", "off", "gro", "off", check=False)
        run("ip", "-n", self.peer_ns, "link", "set", "peer0", "up")

    @staticmethod
    def sysctl(ns, name, value):
        run("ip", "netns", "exec", ns, "sysctl", "-q", "-w", f"{name}={value}")

    def mac(self, ns, dev):
        out = run("ip", "-n", ns, "-j", "link", "show", dev).stdout
        return json.loads(out)[0]["address"]

    def close(self):
        for ns in reversed(self.made):
            run("ip", "netns", "del", ns, check=False)
        self.made = []


class Dut:
    name = "?"

    def __init__(self):
        self.topo = Topology(self.name[0])
        self.ctl_path = os.path.join(tempfile.gettempdir(),
                                     f"cf-{os.getpid()}-{self.name}.sock")
        self.proc = None
        self.peer = None
        self.ctl = None
        self.log_path = None

    def start(self):
        self.topo.setup()
        self.configure()
        self.launch()
        self.ctl = Control(self.ctl_path)
        self.mac = self.topo.mac(self.topo.dut_ns, "dut0")
        self.peer = Peer(self.topo.peer_ns, "peer0", self.mac)
        return self

    def log(self):
        if not self.log_path or not os.path.exists(self.log_path):
            return ""
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def close(self):
        for x in (self.peer, self.ctl):
            if x is not None:
                try:
                    x.close()
                except OSError:
                    pass
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.topo.close()
        if os.path.exists(self.ctl_path):
            os.unlink(self.ctl_path)


class LinuxDut(Dut):
    name = "linux"

    def configure(self):
        ns = self.topo.dut_ns
        s = self.topo.sysctl
        s(ns, "net.ipv6.conf.dut0.accept_dad", 0)
        s(ns, "net.ipv6.conf.dut0.accept_ra", 0)
        # ICMP errors are rate limited per destination (1 s); the
        # scenarios provoke a few in a row.
        s(ns, "net.ipv4.icmp_ratelimit", 0)
        s(ns, "net.ipv6.icmp.ratelimit", 0)
        run("ip", "-n", ns, "addr", "add", f"{DUT4}/24", "dev", "dut0")
        run("ip", "-n", ns, "addr", "add", f"{DUT6}/64", "dev", "dut0",
            "nodad")
        run("ip", "-n", ns, "link", "set", "dut0", "up")

    def launch(self):
        fd, self.log_path = tempfile.mkstemp(prefix="cf-linux-", suffix=".log")
        os.close(fd)
        with open(self.log_path, "w") as f:
            self.proc = subprocess.Popen(
                ["ip", "netns", "exec", self.topo.dut_ns, sys.executable,
                 LINUX_DUT, self.ctl_path], stdout=f, stderr=f)


class NetstackDut(Dut):
    name = "netstack"

    def configure(self):
        ns = self.topo.dut_ns
        self.topo.sysctl(ns, "net.ipv6.conf.dut0.disable_ipv6", 1)
        run("ip", "-n", ns, "link", "set", "dut0", "up")

    def launch(self):
        fd, self.log_path = tempfile.mkstemp(prefix="cf-netstackd-",
                                             suffix=".log")
        os.close(fd)
        args = [NETSTACKD, "--packet", "dut0", "--netns", self.topo.dut_ns,
                f"--addr={DUT4}/24", f"--addr6={DUT6}/64",
                f"--control={self.ctl_path}"]
        pcap = os.environ.get("NST_CONFORMANCE_PCAP")
        if pcap:
            args.append(f"--pcap={pcap}")
        with open(self.log_path, "w") as f:
            self.proc = subprocess.Popen(args, stdout=f, stderr=f)
        deadline = time.time() + 10
        while "running on" not in self.log():
            if self.proc.poll() is not None or time.time() > deadline:
                raise AssertionError(f"netstackd did not start: {self.log()}")
            time.sleep(0.05)


# --- the peer's side of one TCP connection ----------------------------------

def seq_add(a, n):
    return (a + n) & 0xFFFFFFFF


def seq_diff(a, b):
    """a - b in sequence space, signed."""
    d = (a - b) & 0xFFFFFFFF
    return d - (1 << 32) if d & 0x80000000 else d


class TcpPeer:
    """The remote end of one TCP connection with the DUT, played by hand.
    Sequence numbers are tracked for the common case; every send can
    override them. `ts` on: the peer sends timestamps (its TSval counts
    milliseconds from a random base) and echoes the DUT's last TSval."""

    def __init__(self, t, sport, dport, family=None, ts=True, sack=True,
                 wscale=7, mss=1460, window=65535, iss=0x10000000):
        self.t = t
        self.peer = t.peer
        self.family = family or t.family
        self.src = PEER4 if self.family == 4 else PEER6
        self.dst = DUT4 if self.family == 4 else DUT6
        self.sport, self.dport = sport, dport
        self.use_ts, self.use_sack, self.wscale = ts, sack, wscale
        self.mss, self.window = mss, window
        self.iss = iss
        self.snd_nxt = iss
        self.rcv_nxt = None
        self.irs = None
        self.ts_base = 1000000
        self.ts_recent = 0
        self.t0 = time.time()

    def tsval(self):
        return self.ts_base + int((time.time() - self.t0) * 1000)

    def options(self, syn=False, extra=()):
        opts = []
        if syn:
            opts.append((w.OPT_MSS, self.mss))
            if self.use_sack:
                opts.append((w.OPT_SACK_OK, None))
            if self.wscale is not None:
                opts += [(w.OPT_NOP, None), (w.OPT_WSCALE, self.wscale)]
        if self.use_ts:
            opts += [(w.OPT_NOP, None), (w.OPT_NOP, None),
                     (w.OPT_TS, (self.tsval(), self.ts_recent))]
        return opts + list(extra)

    def send(self, flags, payload=b"", seq=None, ack=None, window=None,
             options=None, urg=0, bad_checksum=False):
        if seq is None:
            seq = self.snd_nxt
        if ack is None:
            ack = self.rcv_nxt or 0
        if options is None:
            options = self.options(syn=bool(flags & w.SYN))
        if window is None:
            window = self.window
        if not flags & w.ACK:
            ack = 0 if ack is None else ack
        seg = w.tcp_segment(self.src, self.dst, self.sport, self.dport, seq,
                            ack, flags, window, options, payload, urg,
                            bad_checksum)
        if self.family == 4:
            pkt = w.ipv4_packet(self.src, self.dst, w.PROTO_TCP, seg)
        else:
            pkt = w.ipv6_packet(self.src, self.dst, w.PROTO_TCP, seg)
        self.peer.send_ip(self.family, pkt)
        adv = len(payload) + (1 if flags & w.SYN else 0) + (
            1 if flags & w.FIN else 0)
        if seq == self.snd_nxt:
            self.snd_nxt = seq_add(seq, adv)

    def mine(self, f):
        return (f.tcp is not None and f.src == self.dst and
                f.tcp.sport == self.dport and f.tcp.dport == self.sport)

    def expect(self, flags=None, timeout=2.0, pred=None, what=""):
        """The next segment of this connection (with exactly `flags`, when
        given, and matching `pred`); fails the scenario if none comes."""
        def match(f):
            return (self.mine(f) and (flags is None or f.tcp.flags == flags)
                    and (pred is None or pred(f.tcp)))
        f = self.peer.expect(match, timeout)
        if f is None:
            self.t.fail(f"no segment {what or ''} with flags "
                        f"{w.flag_str(flags) if flags is not None else 'any'}"
                        f" within {timeout} s")
        seg = f.tcp
        seg.time = f.time
        ts = seg.opt(w.OPT_TS)
        if ts:
            self.ts_recent = ts[0]
        return seg

    def none(self, timeout=0.5, pred=None, what="segment"):
        """Asserts that no segment of this connection (matching pred)
        comes within `timeout`."""
        f = self.peer.expect(lambda f: self.mine(f) and (
            pred is None or pred(f.tcp)), timeout)
        if f is not None:
            self.t.fail(f"unexpected {what}: {f.tcp!r}")

    def rel_seq(self, seg):
        return seq_diff(seg.seq, self.irs)

    def rel_ack(self, seg):
        return seq_diff(seg.ack, self.iss)

    # -- handshakes --------------------------------------------------------

    def connect(self, syn_options=None):
        """Active open toward a DUT listener: SYN, SYN-ACK, ACK."""
        self.send(w.SYN, options=syn_options)
        synack = self.expect(w.SYN | w.ACK, what="SYN-ACK")
        self.t.assertEqual(synack.ack, seq_add(self.iss, 1), "SYN-ACK's ack")
        self.irs = synack.seq
        self.rcv_nxt = seq_add(synack.seq, 1)
        self.synack = synack
        self.send(w.ACK)
        return synack

    def accept_syn(self, timeout=2.0):
        """Passive open: the DUT connected to us; answer its SYN."""
        syn = self.expect(w.SYN, timeout=timeout, what="SYN")
        self.irs = syn.seq
        self.rcv_nxt = seq_add(syn.seq, 1)
        self.syn = syn
        self.send(w.SYN | w.ACK)
        ack = self.expect(w.ACK, what="ACK of our SYN-ACK")
        return syn, ack

    def data(self, payload, flags=w.ACK | w.PSH, **kw):
        self.send(flags, payload, **kw)

    def ack_data(self, seg):
        """ACKs what `seg` carried."""
        n = len(seg.payload) + (1 if seg.flags & w.FIN else 0)
        self.rcv_nxt = seq_add(seg.seq, n)
        self.send(w.ACK)

    def read_data(self, nbytes, timeout=2.0, ack=True):
        """Collects `nbytes` of in-order payload from the DUT, ACKing each
        segment. Returns the bytes."""
        got = b""
        deadline = time.time() + timeout
        while len(got) < nbytes:
            seg = self.expect(timeout=max(0.05, deadline - time.time()),
                              pred=lambda s: len(s.payload) > 0,
                              what=f"data ({len(got)} of {nbytes} bytes)")
            if seg.seq == self.rcv_nxt:
                got += seg.payload
                self.rcv_nxt = seq_add(self.rcv_nxt, len(seg.payload))
                if ack:
                    self.send(w.ACK)
        return got
