"""What the flood tests (backend_flood_interop_test.py,
backend_exhaustion_interop_test.py) and bench/flood_benchmark.py share:
flood_peer.py run in the guest, netstackd's memory, the guest link's
kernel counters, a transfer's rate (iperf3) and ping RTTs while something
else runs.

SYN accounting. The guest's frames cross the TAP, whose transmit ring
drops what netstackd has not read in time (`ip -s link`: TX dropped in
G, the link's own counter). A SYN netstackd read reaches TCP, which
counts it under one outcome; the accounting in syn_accounting() checks
that outcomes + drops at the link == SYNs sent, with the guest kernel's
own frames (its RSTs to SYN-ACKs it never asked for, Tcp OutRsts in its
/proc/net/snmp) taken out of the link's numbers.
"""
import json
import os
import re
import subprocess
import sys
import threading
import time
import unittest

from tests.backend.backend_topology import BackendTopology
from tests.interop import interop_util as iu

FLOOD_PEER = iu.runfile("tests/backend/flood_peer.py")
# netstackd built with ASan/UBSan (--config=asan): slower, and more memory.
with open(iu.NETSTACKD, "rb") as _f:
    SANITIZED = b"__asan_init" in _f.read()


def log(msg):
    print(f"flood: {msg}", file=sys.stderr, flush=True)


def netstackd_pid(nd):
    return int(nd.log().split(", pid ")[1].split()[0])


def memory_kib(pid):
    """{"VmRSS": KiB, "VmHWM": KiB} of `pid`."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = int(line.split()[1])
    return out


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def link_stats(ns, dev):
    """The kernel's counters of `dev` in `ns`: tx_packets, tx_dropped,
    rx_packets, rx_dropped."""
    out = iu.run("ip", "-n", ns, "-s", "-j", "link", "show", dev).stdout
    s = json.loads(out)[0]["stats64"]
    q = json.loads(iu.run("tc", "-n", ns, "-s", "-j", "qdisc", "show", "dev",
                          dev).stdout or "[]")
    return {"tx_packets": s["tx"]["packets"], "tx_dropped": s["tx"]["dropped"],
            "rx_packets": s["rx"]["packets"], "rx_dropped": s["rx"]["dropped"],
            # Dropped by the device's queueing discipline before the device
            # saw them (not in tx_dropped).
            "qdisc_drops": sum(x.get("drops", 0) for x in q)}


def tcp_snmp(ns):
    """The Tcp line of /proc/net/snmp in `ns` (IPv4 and IPv6 share it)."""
    out = iu.run("ip", "netns", "exec", ns, "cat", "/proc/net/snmp").stdout
    rows = [l.split()[1:] for l in out.splitlines() if l.startswith("Tcp:")]
    return {k: int(v) for k, v in zip(rows[0], rows[1])}


def fixed_neighbour(ns, addr, dev="nsttap"):
    """The MAC of `addr` as `ns` resolves it (a ping first), made a
    permanent neighbour entry of `dev`; returns the MAC."""
    iu.run("ip", "netns", "exec", ns, "ping", "-c", "1", "-W", "2", addr,
           check=False)
    out = iu.run("ip", "-n", ns, "neigh", "show", addr).stdout
    m = re.search(r"lladdr (\S+)", out)
    assert m, f"{ns} has no neighbour entry for {addr}: {out!r}"
    # Fixed from now on: a flood drops the sender's own ARP probes at the
    # TAP too, its entry fails, and its kernel then queues and discards
    # what it sends (RSTs among them) while it resolves again, out of
    # every counter the accounting reads.
    iu.run("ip", "-n", ns, "neigh", "replace", addr, "lladdr", m.group(1),
           "nud", "permanent", "dev", dev)
    return m.group(1)


def gateway_mac(topo, addr="10.0.2.2"):
    """netstackd's MAC, as the guest resolved it, fixed."""
    return fixed_neighbour(topo.g, addr)


def flood(ns, *args, timeout=300):
    """flood_peer.py ARGS in `ns`; its JSON report."""
    r = iu.run("ip", "netns", "exec", ns, sys.executable, FLOOD_PEER,
               *[str(a) for a in args], timeout=timeout, check=False)
    assert r.returncode == 0, f"flood_peer {args}: {r.stderr}"
    return json.loads(r.stdout.strip().splitlines()[-1])


class Background:
    """flood_peer.py in a thread (its report in .result)."""

    def __init__(self, ns, *args):
        self.result = None
        self.error = None

        def go():
            try:
                self.result = flood(ns, *args)
            except BaseException as e:  # reported by join()
                self.error = e

        self.t = threading.Thread(target=go, daemon=True)
        self.t.start()

    def join(self, timeout=300):
        self.t.join(timeout)
        if self.error:
            raise self.error
        assert self.result is not None, "flood_peer did not finish"
        return self.result


class CpuLoop:
    """A process that keeps one core busy for `seconds` and sends nothing:
    the control for a flood, whose sender takes a core too. join() as
    Background's, with the flood report's fields."""

    def __init__(self, seconds):
        self.seconds = seconds
        self.p = subprocess.Popen([sys.executable, "-c", (
            "import time\n"
            f"end = time.monotonic() + {seconds}\n"
            "while time.monotonic() < end:\n"
            "    pass\n")])

    def join(self, timeout=300):
        self.p.wait(timeout)
        return {"sent": 0, "seconds": self.seconds, "rate": 0}


class MemorySampler:
    """Samples VmRSS of `pid` every 50 ms until stop(); .peak_rss."""

    def __init__(self, pid):
        self.pid = pid
        self.peak_rss = 0
        self.stopping = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stopping.is_set():
            try:
                self.peak_rss = max(self.peak_rss,
                                    memory_kib(self.pid)["VmRSS"])
            except (OSError, KeyError):
                return
            time.sleep(0.05)

    def stop(self):
        self.stopping.set()
        self.t.join(5)
        return self.peak_rss


def iperf3_rate(topo, server, seconds, port=5201, reverse=False):
    """Bits per second of an iperf3 TCP transfer from G to `server` (H's
    iperf3 server, already started) over `seconds` (-R: H to G)."""
    cmd = ["iperf3", "-c", server, "-p", str(port), "-t", str(seconds), "-J",
           "--connect-timeout", "5000"]
    if reverse:
        cmd.append("-R")
    r = iu.run(*topo.in_ns(topo.g, *cmd), timeout=seconds + 60, check=False)
    try:
        j = json.loads(r.stdout)
    except ValueError:
        raise AssertionError(f"iperf3: {r.stdout[-2000:]} {r.stderr[-2000:]}")
    if "error" in j:
        raise AssertionError(f"iperf3: {j['error']}")
    return j["end"]["sum_received"]["bits_per_second"]


# An established transfer under a flood: it runs LEAD seconds alone, then
# the flood starts and it goes on; its rate before and during come from
# the same connection's samples (a quarter second each; those next to the
# start, and to the flood's start, left out).
LEAD = 1.5
SAMPLE = 0.25


def _windows(samples, t_flood, seconds):
    """samples: (start, end, bits) since the transfer began; the rates
    before the flood (from SAMPLE to t_flood) and during it (SAMPLE after
    t_flood, for `seconds`)."""
    def rate(lo, hi):
        inside = [(s, e, b) for s, e, b in samples if s >= lo and e <= hi]
        span = sum(e - s for s, e, _ in inside)
        return sum(b for _, _, b in inside) / span if span > 0 else 0.0
    return (rate(SAMPLE, t_flood),
            rate(t_flood + SAMPLE, t_flood + seconds))


def iperf3_under(topo, server, seconds, start_flood, port=5201,
                 reverse=False):
    """An iperf3 transfer from G to `server` (-R: from it), established and
    LEAD s old when start_flood() is called, then `seconds` more: (bits/s
    before, bits/s during, what start_flood returned)."""
    cmd = ["iperf3", "-c", server, "-p", str(port), "-t",
           str(LEAD + seconds), "-i", str(SAMPLE), "-J", "--connect-timeout",
           "5000"] + (["-R"] if reverse else [])
    for attempt in range(5):
        p = subprocess.Popen(topo.in_ns(topo.g, *cmd), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        t0 = time.monotonic()
        try:
            p.wait(LEAD)
        except subprocess.TimeoutExpired:
            break  # running
        # Ended before the flood: the server still busy with the last
        # test ends it at once; anything else is reported below.
        out, err = p.communicate()
        if "busy" not in out or attempt == 4:
            raise AssertionError(f"iperf3 ended early: {out[-2000:]} "
                                 f"{err[-2000:]}")
        time.sleep(1)
    flood = start_flood()
    t_flood = time.monotonic() - t0
    out, err = p.communicate(timeout=LEAD + seconds + 60)
    try:
        j = json.loads(out)
    except ValueError:
        raise AssertionError(f"iperf3: {out[-2000:]} {err[-2000:]}")
    if "error" in j:
        raise AssertionError(f"iperf3: {j['error']}")
    samples = [(i["sum"]["start"], i["sum"]["end"],
                i["sum"]["bits_per_second"] * i["sum"]["seconds"])
               for i in j["intervals"]]
    # The test began when iperf3 had connected, a little after t0: the
    # flood's start on its clock is at most t_flood.
    before, during = _windows(samples, t_flood, seconds)
    return before, during, flood


# One TCP connection from a kernel into a stack listener (the discard
# port), sampling its bytes acknowledged (tcpi_bytes_acked, offset 120 of
# struct tcp_info, Linux 4.1+) every SAMPLE s, as "t bytes" lines.
_SENDER = """
import socket, struct, sys, time
host, port, seconds, sample = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
s = socket.create_connection((host, port), timeout=5)
s.settimeout(None)
buf = bytes(1 << 18)
t0 = time.monotonic()
print("start", t0, flush=True)
next_at = t0 + sample
while True:
    s.send(buf)
    now = time.monotonic()
    if now >= next_at:
        info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
        print(now - t0, struct.unpack_from("Q", info, 120)[0], flush=True)
        next_at += sample
        if now - t0 >= seconds:
            break
s.close()
"""


def kernel_sender_under(ns, addr, port, seconds, start_flood):
    """A kernel TCP connection from `ns` into `addr`:`port`, LEAD s old when
    start_flood() is called, then `seconds` more: (bits/s before, bits/s
    during, what start_flood returned)."""
    p = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c",
                          _SENDER, addr, str(port), str(LEAD + seconds),
                          str(SAMPLE)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    first = p.stdout.readline().split()
    assert first and first[0] == "start", (first, p.stderr.read())
    t0 = float(first[1])
    time.sleep(max(0.0, t0 + LEAD - time.monotonic()))
    flood = start_flood()
    t_flood = time.monotonic() - t0
    out, err = p.communicate(timeout=LEAD + seconds + 60)
    assert p.returncode == 0, err
    points = [(0.0, 0)] + [(float(t), int(b)) for t, b in
                           (l.split() for l in out.splitlines() if l)]
    samples = [(a[0], b[0], (b[1] - a[1]) * 8)
               for a, b in zip(points, points[1:])]
    before, during = _windows(samples, t_flood, seconds)
    return before, during, flood


def start_iperf3_server(topo, port=5201):
    p = topo.spawn(topo.h, "iperf3", "-s", "-p", str(port))
    ok = iu.wait_for(lambda: f":{port} " in iu.run(
        *topo.in_ns(topo.h, "ss", "-ltnH")).stdout, 10)
    assert ok, "iperf3 -s did not start in H"
    return p


def ping_rtts(topo, addr, count, interval=0.2, timeout=60):
    """RTTs in ms of `count` pings from G to `addr` (lost ones missing)."""
    r = iu.run(*topo.in_ns(topo.g, "ping", "-n", "-c", str(count), "-i",
                           str(interval), "-W", "1", addr),
               timeout=timeout, check=False)
    return [float(m) for m in re.findall(r"time=([\d.]+) ms", r.stdout)]


class PingSampler:
    """Pings from G in the background; rtts() when done."""

    def __init__(self, topo, addr, count, interval=0.2):
        self.out = []
        self.t = threading.Thread(target=lambda: self.out.extend(
            ping_rtts(topo, addr, count, interval)), daemon=True)
        self.t.start()
        self.count = count

    def rtts(self):
        self.t.join(self.count * 1.5 + 30)
        return self.out


def rtt_summary(rtts, count):
    if not rtts:
        return f"0 of {count} answered"
    s = sorted(rtts)
    return (f"{len(s)} of {count} answered, median {s[len(s) // 2]:.3f} ms, "
            f"max {s[-1]:.3f} ms")


def syn_outcomes(c):
    """How the SYNs netstackd's TCP layer read ended, from its counters
    (a delta of two counter readings): held for a host connect, its
    retransmission absorbed while held, dropped at the held-SYN cap, shed
    over the connect rate, sent a
    RST at once (the backend refused it: flow limit, policy), answered by a listener (a half-open connection, a SYN cookie),
    or dropped by a listener (its queues full, cookies off; the connection
    limit)."""
    return {
        "held": c.get("tcp.syns_held", 0),
        "held_retransmit": c.get("tcp.held_syn_retransmits", 0),
        "held_limit": c.get("tcp.held_syn_limit_drops", 0),
        # Dropped, no RST, over --busy-syn-rate: the backend's (a host
        # connect) and a listener's (a SYN-ACK).
        "shed": c.get("backend.tcp_syns_shed", 0),
        "listener_shed": c.get("tcp.syns_shed", 0),
        # The backend's refusals (each a RST); not drop.tcp_no_listener,
        # which also counts the guest's RSTs that arrive after their
        # connection ended. Host mode has no SynHandler: a SYN to a port
        # without a listener would be drop.tcp_no_listener there.
        "refused_rst": sum(c.get(f"backend.tcp_refused_{k}", 0) for k in (
            "flow_limit", "host_loopback", "no_service",
            "mapped_destination")),
        # passive_opens also counts a cookie's connection and a held SYN
        # accepted (already counted as held).
        "half_open": c.get("tcp.passive_opens", 0)
        - c.get("tcp.syn_cookies_accepted", 0)
        - c.get("tcp.held_syns_accepted", 0),
        "cookie": c.get("tcp.syn_cookies_sent", 0),
        "listen_overflow": c.get("drop.tcp_listen_overflow", 0),
        "half_open_limit": c.get("drop.tcp_half_open_limit", 0)
        - c.get("tcp.held_syn_limit_drops", 0),
        "connection_limit": c.get("drop.tcp_connection_limit", 0),
    }


def delta(after, before):
    return {k: v - before.get(k, 0) for k, v in after.items()
            if isinstance(v, int)}


def syn_accounting(sent, nd_delta, link_delta, snmp_delta, refused=0):
    """Explains every SYN sent: those netstackd's TCP read (by outcome) and
    those the TAP dropped. The guest link's transmit drops also hold the
    guest kernel's own frames (RSTs to our SYN-ACKs, Tcp OutRsts); those
    netstackd did not read were dropped. Returns (outcomes, dropped SYNs,
    unexplained): unexplained = sent - outcomes - dropped SYNs, which is 0
    unless the guest sent frames other than SYNs and RSTs meanwhile (its
    IPv6 router solicitations and such, counted as `other`). `sent`: the
    frames the socket took; `refused`: those it refused (ENOBUFS, the
    guest's own queueing discipline full), never sent."""
    outcomes = syn_outcomes(nd_delta)
    syns_in = sum(outcomes.values())
    rsts_in = nd_delta.get("tcp.segments_in", 0) - syns_in
    # A flood frame the qdisc dropped was refused to the sender (ENOBUFS:
    # flood_peer's "refused", not in `sent`); the qdisc's other drops are
    # the kernel's RSTs.
    rsts_out = snmp_delta.get("OutRsts", 0) - (link_delta["qdisc_drops"]
                                               - refused)
    rsts_dropped = rsts_out - rsts_in
    # Every guest frame netstackd read that is not TCP: the others.
    other = nd_delta.get("link.nsttap.rx_frames", 0) - nd_delta.get(
        "tcp.segments_in", 0)
    dropped_syns = link_delta["tx_dropped"] - rsts_dropped
    return {"outcomes": outcomes, "syns_in": syns_in, "rsts_in": rsts_in,
            "link_tx": link_delta["tx_packets"],
            "netstackd_rx": nd_delta.get("link.nsttap.rx_frames", 0),
            "netstackd_rx_dropped": nd_delta.get("link.nsttap.rx_dropped", 0),
            "rsts_out": rsts_out, "dropped_at_link": link_delta["tx_dropped"],
            "qdisc_drops": link_delta["qdisc_drops"],
            "dropped_syns": dropped_syns, "other_frames": other,
            "unexplained": sent - syns_in - dropped_syns}


class BackendCase(unittest.TestCase):
    """A test class's topology: BackendTopology, H's servers
    (start_servers(), each subclass its own), netstackd --backend with
    NETSTACKD_ARGS, and the guest configured; cls.topo, cls.nd, cls.pid
    and cls.mac (netstackd's MAC, fixed in the guest's neighbour table).
    H's listen queues are deep (16,384), so that H never drops what
    netstackd connects. At the end netstackd must exit 0 holding no host
    TCP fd."""
    NETSTACKD_ARGS = ()

    @classmethod
    def start_servers(cls, h):
        raise NotImplementedError

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root")
        cls.topo = BackendTopology()
        try:
            cls.topo.setup()
            iu.run(*cls.topo.in_ns(cls.topo.h, "sysctl", "-q", "-w",
                                   "net.core.somaxconn=16384",
                                   "net.ipv4.tcp_max_syn_backlog=16384"))
            cls.start_servers(cls.topo.h)
            cls.nd = cls.topo.netstackd(*cls.NETSTACKD_ARGS)
            cls.topo.configure_guest()
            cls.pid = netstackd_pid(cls.nd)
            cls.mac = gateway_mac(cls.topo)
        except BaseException:
            cls.topo.close()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            code = cls.nd.stop()
            log = cls.nd.log()
            c = cls.nd.exit_counters()
            cls.nd.close()
            assert code == 0, f"netstackd exited {code}: {log[-3000:]}"
            assert c.get("backend.tcp_host_fds_open") == 0, c
        finally:
            cls.topo.close()

    @classmethod
    def wait_listening(cls, h, proto, port, count):
        """Waits until H has `count` sockets on `port` (proto "t" or "u")."""
        state = "LISTEN" if proto == "t" else "UNCONN"
        ok = iu.wait_for(lambda: iu.run(*cls.topo.in_ns(
            h, "ss", f"-l{proto}nH", f"sport = :{port}")).stdout.count(
                state) == count, 10)
        assert ok, f"the server on port {port} in H did not start"
