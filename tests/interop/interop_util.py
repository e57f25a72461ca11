"""Helpers for the interop tests: namespaces and links with the Linux kernel
as the peer, a netstackd process with its counters, transfers driven by
curl and socat, and tshark summaries of netstackd's pcap.

Everything a test creates is undone by close()/stop(), also on failure.
Needs root.
"""
import hashlib
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import tempfile
import threading
import time

RUNFILES = os.environ.get("TEST_SRCDIR", "")
WORKSPACE = os.environ.get("TEST_WORKSPACE", "netstack")
_HERE = os.path.dirname(os.path.abspath(__file__))


def runfile(path):
    """A runfile under Bazel, else the file in this source tree."""
    if RUNFILES:
        return os.path.join(RUNFILES, WORKSPACE, path)
    return os.path.join(_HERE, "..", "..", path)


NETSTACKD = os.environ.get("NETSTACKD") or runfile("tools/netstackd/netstackd")
PEER_CLIENT = runfile("tests/interop/peer_client.py")


def checksum(data):
    """The Internet checksum (RFC 1071) of `data`, for frames a test builds
    or checks by hand."""
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def env_int(name, default):
    v = os.environ.get(name)
    return int(v) if v else default


def run(*cmd, check=True, timeout=120, input=None):
    return subprocess.run(list(cmd), check=check, capture_output=True,
                          text=True, timeout=timeout, input=input)


def have(tool):
    return shutil.which(tool) is not None


class Topology:
    """Namespaces and one link (veth pair or TAP) with the kernel on the
    peer side. close() undoes everything, whatever happened."""

    def __init__(self, kind, prefix):
        tag = f"{os.getpid()}-{kind}"
        self.kind = kind
        self.peer_ns = f"{prefix}-{tag}-k"   # the kernel's side
        self.stack_ns = f"{prefix}-{tag}-s"  # netstackd opens its link here
        self.namespaces = []
        self.notes = []

    def add_ns(self, name):
        run("ip", "netns", "add", name)
        self.namespaces.append(name)
        run("ip", "-n", name, "link", "set", "lo", "up")

    def setup(self, net4, net6):
        """Returns netstackd's link flags."""
        self.net4, self.net6 = net4, net6
        if self.kind == "veth":
            self.add_ns(self.peer_ns)
            self.add_ns(self.stack_ns)
            run("ip", "link", "add", "nst0", "netns", self.peer_ns, "type",
                "veth", "peer", "name", "nst1", "netns", self.stack_ns)
            # The stack side belongs to netstackd: keep the kernel off it.
            run("ip", "netns", "exec", self.stack_ns, "sysctl", "-q", "-w",
                "net.ipv6.conf.nst1.disable_ipv6=1")
            run("ip", "-n", self.stack_ns, "link", "set", "nst1", "up")
            dev = "nst0"
            # The peer's offloads stay at their defaults: its TSO/GSO
            # super-frames cross the veth whole, and netstackd's AF_PACKET
            # endpoint takes them (PacketOptions::accept_oversized).
            link_flags = ["--packet", "nst1", "--netns", self.stack_ns]
        else:
            self.add_ns(self.peer_ns)
            self.stack_ns = self.peer_ns  # the TAP lives where the kernel is
            # multi_queue: netstackd reads it with --tap-queues (16).
            run("ip", "-n", self.peer_ns, "tuntap", "add", "dev", "nsttap",
                "mode", "tap", "multi_queue")
            dev = "nsttap"
            link_flags = ["--tap", "nsttap", "--netns", self.peer_ns]
        run("ip", "-n", self.peer_ns, "addr", "add", f"{net4}.1/24", "dev", dev)
        run("ip", "-n", self.peer_ns, "addr", "add", f"{net6}::1/64", "dev",
            dev, "nodad")
        run("ip", "-n", self.peer_ns, "link", "set", dev, "up")
        return link_flags + [f"--addr={net4}.2/24", f"--addr6={net6}::2/64"]

    def peer(self, *cmd):
        """A command line that runs in the peer namespace."""
        return ["ip", "netns", "exec", self.peer_ns, *cmd]

    def close(self):
        for ns in reversed(self.namespaces):
            run("ip", "netns", "del", ns, check=False)
        self.namespaces = []


def parse_counters(block):
    """{name: int} from netstackd's counter lines: "name value" lines and
    "prefix: a=1 b=2" lines (the latter as "prefix.a")."""
    out = {}
    for line in block.splitlines():
        m = re.match(r"^([\w.\-]+):\s+(\S+=.*)$", line)
        if m:
            for k, v in re.findall(r"(\w+)=(\d+)", m.group(2)):
                out[f"{m.group(1)}.{k}"] = int(v)
            continue
        m = re.match(r"^([\w.\-]+) (\d+)$", line)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


class Netstackd:
    """One netstackd process; stop() is safe to call twice."""

    def __init__(self, args, name="netstackd"):
        # NST_NETSTACKD_FLAGS adds flags to every netstackd a test starts,
        # e.g. "--swgso" to run a whole suite with software GSO.
        extra = os.environ.get("NST_NETSTACKD_FLAGS", "").split()
        self.args = [NETSTACKD, *args, *extra]
        fd, self.log_path = tempfile.mkstemp(prefix=f"{name}-", suffix=".log")
        os.close(fd)
        self.proc = None
        self.code = None

    def start(self):
        with open(self.log_path, "w") as f:
            self.proc = subprocess.Popen(self.args, stdout=f, stderr=f)
        deadline = time.time() + 10
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"netstackd exited: {self.log()}")
            if "running on" in self.log():
                return self
            time.sleep(0.05)
        raise AssertionError(f"netstackd did not start: {self.log()}")

    def log(self):
        with open(self.log_path) as f:
            return f.read()

    def _blocks(self, why):
        text = self.log()
        marker = f"counters ({why}):\n"
        parts = text.split(marker)
        return parts[1:]

    def counters(self, timeout=5):
        """Asks for the counters (SIGUSR1) and returns them parsed."""
        before = len(self._blocks("SIGUSR1"))
        self.proc.send_signal(signal.SIGUSR1)
        deadline = time.time() + timeout
        while time.time() < deadline:
            blocks = self._blocks("SIGUSR1")
            if len(blocks) > before:
                time.sleep(0.05)  # let the one write finish
                block = self._blocks("SIGUSR1")[before]
                return parse_counters(block.split("\nnetstackd:")[0])
            time.sleep(0.02)
        raise AssertionError("netstackd did not print its counters")

    def connections_dump(self):
        """The per-connection lines of the latest SIGUSR1 block."""
        blocks = self._blocks("SIGUSR1")
        if not blocks:
            return ""
        return "\n".join(l for l in blocks[-1].splitlines()
                         if ".connection " in l)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None:
            self.code = self.proc.returncode
        return self.code

    def exit_counters(self):
        blocks = self._blocks("exit")
        return parse_counters(blocks[-1]) if blocks else {}

    def close(self):
        self.stop()
        if os.path.exists(self.log_path):
            os.unlink(self.log_path)


def wait_for(predicate, timeout, interval=0.1):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def url_host(addr):
    return f"[{addr}]" if ":" in addr else addr


def socat_tcp(addr, port):
    return (f"TCP6:[{addr}]:{port}" if ":" in addr else f"TCP4:{addr}:{port}")


def socat_udp(addr, port):
    return (f"UDP6:[{addr}]:{port}" if ":" in addr else f"UDP4:{addr}:{port}")


class TransferResult:
    def __init__(self):
        self.sent = 0
        self.received = 0
        self.sent_sha = hashlib.sha256()
        self.received_sha = hashlib.sha256()
        self.seconds = 0.0
        self.returncode = None
        self.stderr = ""
        self.timed_out = False
        self.stall_info = ""  # on_stall's report, if progress stopped
        self.last_progress = time.time()

    def progress(self, n, sent):
        if sent:
            self.sent += n
        else:
            self.received += n
        self.last_progress = time.time()


def _supervise(p, r, threads, timeout, on_stall, stall_after):
    """Waits for `p`; calls on_stall() once when no byte moved for
    `stall_after` seconds (to capture the stack's state while the
    connection is still stuck), kills `p` after `timeout` seconds."""
    start = time.time()
    for t in threads:
        t.start()
    while True:
        try:
            p.wait(timeout=0.25)
            break
        except subprocess.TimeoutExpired:
            pass
        now = time.time()
        if (on_stall is not None and not r.stall_info
                and now - r.last_progress > stall_after):
            r.stall_info = (f"no progress for {stall_after:.0f} s after "
                            f"{r.sent} bytes sent, {r.received} received\n"
                            + on_stall())
        if now - start > timeout:
            r.timed_out = True
            p.kill()
            p.wait()
            break
    for t in threads:
        t.join(timeout=10)
    r.seconds = time.time() - start
    r.returncode = p.returncode
    r.stderr = p.stderr.read().decode(errors="replace")
    for f in (p.stdin, p.stdout, p.stderr):
        if f is not None:
            try:
                f.close()
            except OSError:
                pass


def socat_stream(prefix, target, nbytes, timeout, echo, seed=1,
                 on_stall=None, stall_after=5.0):
    """Feeds `nbytes` of seeded random bytes to `socat STDIO target` (run
    with the command prefix `prefix`, e.g. the peer namespace); with
    `echo`, reads everything socat prints back. Hashes both sides on the
    fly, so 1 GiB needs no file. Kills socat after `timeout` seconds."""
    r = TransferResult()
    cmd = [*prefix, "socat", "-b", "131072", "-t", str(timeout), "-T",
           str(timeout)]
    cmd += ["STDIO", target] if echo else ["-u", "STDIO", target]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE if echo else subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    rng = random.Random(seed)

    def writer():
        left = nbytes
        try:
            while left > 0:
                chunk = rng.randbytes(min(1 << 20, left))
                r.sent_sha.update(chunk)
                p.stdin.write(chunk)
                p.stdin.flush()
                r.progress(len(chunk), sent=True)
                left -= len(chunk)
        except (BrokenPipeError, ValueError, OSError):
            pass
        finally:
            try:
                p.stdin.close()
            except OSError:
                pass

    def reader():
        while True:
            b = p.stdout.read1(1 << 20)
            if not b:
                break
            r.received_sha.update(b)
            r.progress(len(b), sent=False)

    threads = [threading.Thread(target=writer, daemon=True)]
    if echo:
        threads.append(threading.Thread(target=reader, daemon=True))
    _supervise(p, r, threads, timeout, on_stall, stall_after)
    return r


def curl_download(prefix, url, timeout, on_stall=None, stall_after=5.0):
    """Downloads `url` with curl, hashing the body as it arrives
    (r.received, r.received_sha)."""
    r = TransferResult()
    p = subprocess.Popen([*prefix, "curl", "-sS", "-g", "-m", str(timeout),
                          url], stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def reader():
        while True:
            b = p.stdout.read1(1 << 20)
            if not b:
                break
            r.received_sha.update(b)
            r.progress(len(b), sent=False)

    _supervise(p, r, [threading.Thread(target=reader, daemon=True)],
               timeout + 5, on_stall, stall_after)
    return r


def write_random_file(path, nbytes, seed):
    """A file of seeded random bytes; returns its sha256."""
    rng = random.Random(seed)
    h = hashlib.sha256()
    with open(path, "wb") as f:
        left = nbytes
        while left > 0:
            chunk = rng.randbytes(min(1 << 20, left))
            h.update(chunk)
            f.write(chunk)
            left -= len(chunk)
    return h.hexdigest()


# Dissectors the checks read, by port: never turned off.
_KEEP_PROTOCOLS = {"http", "dns"}
_NO_HEURISTICS = None


def tshark_no_heuristics():
    """tshark flags that turn off the protocols tshark would guess at from
    a TCP or UDP payload (its heuristic dissectors). The tests send random
    payloads; now and then one looks enough like, say, Thrift to be
    "decoded" and reported malformed, which says nothing about our headers.
    tshark 4.0 names heuristics only by protocol here, so the whole
    protocol goes, except those in _KEEP_PROTOCOLS."""
    global _NO_HEURISTICS
    if _NO_HEURISTICS is None:
        out = run("tshark", "-G", "heuristic-decodes", check=False).stdout
        names = sorted({cols[1] for cols in (l.split("\t") for l in
                                             out.splitlines())
                        if len(cols) >= 3 and cols[0] in ("tcp", "udp")
                        and cols[2] == "T"} - _KEEP_PROTOCOLS)
        _NO_HEURISTICS = [a for n in names for a in ("--disable-protocol", n)]
    return list(_NO_HEURISTICS)


def tshark_lines(pcap, display_filter, fields, *options, timeout=600):
    cmd = ["tshark", "-n", "-r", pcap, "-o", "tcp.desegment_tcp_streams:FALSE",
           *tshark_no_heuristics(), *options, "-Y", display_filter, "-T",
           "fields"]
    for f in fields:
        cmd += ["-e", f]
    out = run(*cmd, timeout=timeout, check=False).stdout
    return [l.split("\t") for l in out.splitlines() if l.strip()]


def tshark_tail(pcap, display_filter, count=20):
    """The last frames matching the filter, one line each: for a report."""
    rows = tshark_lines(pcap, display_filter,
                        ["frame.number", "frame.time_relative", "ip.src",
                         "ipv6.src", "tcp.srcport", "tcp.flags.str", "tcp.seq",
                         "tcp.ack", "tcp.len", "tcp.window_size",
                         "tcp.options.sack_le", "tcp.options.sack_re"],
                        "-o", "tcp.relative_sequence_numbers:TRUE")
    return "\n".join("\t".join(r) for r in rows[-count:])


def keep_artifact(path, name):
    """Copies a file where Bazel keeps test outputs (or leaves it in /tmp
    when run by hand); returns where it is."""
    out_dir = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR")
    if not out_dir:
        dst = os.path.join(tempfile.gettempdir(), name)
    else:
        os.makedirs(out_dir, exist_ok=True)
        dst = os.path.join(out_dir, name)
    shutil.copyfile(path, dst)
    return dst


def diagnose(nd, pcap, label, port):
    """What to attach to a failed transfer: netstackd's per-connection TCP
    state (SIGUSR1), the last frames of the port in the pcap (kept as a
    test output), and the TCP counters."""
    parts = [f"--- diagnostics for {label}"]
    try:
        c = nd.counters()
        parts.append("tcp: " + " ".join(f"{k[4:]}={v}" for k, v in c.items()
                                        if k.startswith("tcp.")))
        parts.append("connections:\n" + nd.connections_dump())
    except AssertionError as e:
        parts.append(f"(no counters: {e})")
    if pcap and os.path.exists(pcap):
        kept = keep_artifact(pcap, f"{label}.pcap".replace(" ", "_")
                             .replace("/", "_"))
        parts.append(f"pcap kept at {kept}; last frames of port {port}:")
        parts.append(tshark_tail(pcap, f"tcp.port == {port}"))
    return "\n".join(parts)
