"""Helpers for splice_proxy's integration tests: start and stop the proxy,
read its log and its SIGUSR1 stats, count its fds, make servers and
clients on loopback and UNIX sockets, and move verified byte streams.

Nothing here needs root; every socket is on 127.0.0.1, ::1 or in a
temporary directory.
"""
import hashlib
import os
import re
import resource
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time

RUNFILES = os.environ.get("TEST_SRCDIR", "")
WORKSPACE = os.environ.get("TEST_WORKSPACE", "netstack")
# SPLICE_PROXY_BIN: run the tests by hand against another build.
SPLICE_PROXY = os.environ.get("SPLICE_PROXY_BIN") or os.path.join(
    RUNFILES, WORKSPACE, "tools/splice_proxy/splice_proxy")

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30

# Data: one random MiB, sent again and again with a block counter in its
# first 8 bytes, so that a lost, duplicated or reordered block changes the
# sha256. Generating it costs nothing next to hashing it.
_BASE = os.urandom(MiB)


def raise_nofile(wanted):
    """Raises this process's RLIMIT_NOFILE soft limit to at least `wanted`
    (capped by the hard limit); returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted:
        new = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def make_tmpdir(tag):
    # Short paths: sun_path holds 107 bytes, and TEST_TMPDIR can be deep.
    return tempfile.mkdtemp(prefix=f"sp-{tag}-", dir="/tmp")


# --- addresses ----------------------------------------------------------

def parse_address(text):
    """splice_proxy's address syntax -> (family, sockaddr)."""
    if text.startswith("unix:"):
        return socket.AF_UNIX, text[len("unix:"):]
    if text.startswith("["):
        host, _, port = text[1:].partition("]:")
        return socket.AF_INET6, (host, int(port))
    host, _, port = text.rpartition(":")
    return socket.AF_INET, (host, int(port))


def connect(text, timeout=30, rcvbuf=None):
    """A client socket connected to `text`. `rcvbuf` fixes SO_RCVBUF
    before the connect (no autotuning: loopback TCP would otherwise buffer
    up to tcp_rmem's maximum, 32 MiB here)."""
    family, address = parse_address(text)
    s = socket.socket(family, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(timeout)
    s.connect(address)
    return s


class Listener:
    """A server socket: kind 'tcp' (127.0.0.1), 'tcp6' (::1) or 'unix'
    (in `tmpdir`). `rcvbuf` shrinks SO_RCVBUF of accepted sockets."""

    def __init__(self, kind, tmpdir=None, name="server", backlog=4096,
                 rcvbuf=None):
        if kind == "unix":
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            path = os.path.join(tmpdir, f"{name}.sock")
            self.sock.bind(path)
            self.address = f"unix:{path}"
        else:
            family = socket.AF_INET6 if kind == "tcp6" else socket.AF_INET
            host = "::1" if kind == "tcp6" else "127.0.0.1"
            self.sock = socket.socket(family, socket.SOCK_STREAM)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if rcvbuf:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF,
                                     rcvbuf)
            self.sock.bind((host, 0))
            port = self.sock.getsockname()[1]
            self.address = f"[::1]:{port}" if kind == "tcp6" else \
                f"127.0.0.1:{port}"
        if rcvbuf and kind == "unix":
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.kind = kind
        self.sock.listen(backlog)

    def accept(self, timeout=30):
        self.sock.settimeout(timeout)
        conn, _ = self.sock.accept()
        conn.settimeout(timeout)
        return conn

    def close(self):
        self.sock.close()
        if self.kind == "unix":
            try:
                os.unlink(self.address[len("unix:"):])
            except FileNotFoundError:
                pass


# --- byte streams ---------------------------------------------------------

class StreamWriter:
    """Writes the pattern: one random MiB again and again, its first 8
    bytes replaced by the block's counter. Keeps the sha256 of what went
    out."""

    def __init__(self):
        self.digest = hashlib.sha256()
        self.block = bytearray(_BASE)
        self.view = memoryview(self.block)
        self.index = 0
        self.sent = 0

    def send(self, sock, n):
        """Sends the next `n` bytes (sock None: only hashes them)."""
        while n > 0:
            offset = self.sent % MiB
            if offset == 0:
                struct.pack_into("<Q", self.block, 0, self.index)
                self.index += 1
            k = min(MiB - offset, n)
            piece = self.view[offset:offset + k]
            if sock is not None:
                sock.sendall(piece)
            self.digest.update(piece)
            self.sent += k
            n -= k

    def hexdigest(self):
        return self.digest.hexdigest()


def send_stream(sock, total, shut=True, on_half=None):
    """Sends `total` bytes of the pattern; returns their sha256 hex digest.
    With on_half, calls it after the first half (it may block: that is how
    a test holds the second half back)."""
    writer = StreamWriter()
    if on_half is not None:
        writer.send(sock, total // 2)
        on_half()
        writer.send(sock, total - total // 2)
    else:
        writer.send(sock, total)
    if shut:
        sock.shutdown(socket.SHUT_WR)
    return writer.hexdigest()


def recv_stream(sock, chunk=4 * MiB, pause=0.0, pause_every=1, limit=None):
    """Reads until EOF (or `limit` bytes); returns (sha256 hex, count).
    With `pause`, sleeps that long every `pause_every` reads: a slow
    reader."""
    digest = hashlib.sha256()
    buf = bytearray(chunk)
    view = memoryview(buf)
    count = 0
    reads = 0
    while limit is None or count < limit:
        want = chunk if limit is None else min(chunk, limit - count)
        n = sock.recv_into(view[:want])
        if n == 0:
            break
        digest.update(view[:n])
        count += n
        reads += 1
        if pause and reads % pause_every == 0:
            time.sleep(pause)
    return digest.hexdigest(), count


def expected_digest(total):
    """The sha256 that send_stream(total) produces, without a socket."""
    writer = StreamWriter()
    writer.send(None, total)
    return writer.hexdigest()


class Worker(threading.Thread):
    """A thread that keeps its result or its exception for join()."""

    def __init__(self, fn, *args, **kwargs):
        super().__init__(daemon=True)
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.result = None
        self.error = None

    def run(self):
        try:
            self.result = self.fn(*self.args, **self.kwargs)
        except BaseException as e:  # reported by join()
            self.error = e

    def join(self, timeout=120):
        super().join(timeout)
        if self.is_alive():
            raise AssertionError(f"{self.fn.__name__} still running after "
                                 f"{timeout}s")
        if self.error is not None:
            raise self.error
        return self.result


def reset_close(sock):
    """Closes with a reset (TCP: SO_LINGER 0 sends RST; UNIX: closing with
    unread data makes the peer's next call fail with ECONNRESET)."""
    if sock.family != socket.AF_UNIX:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                        struct.pack("ii", 1, 0))
    sock.close()


# --- the proxy ------------------------------------------------------------

_STATS_LINE = re.compile(r"^  (forward \d+|total|pipes)( [a-z_]+)?: (.*)$")


def parse_stats(block):
    """The lines of one stats block -> {"forward 0": {"connections": {...},
    "client_to_server": {...}, "info": {...}}, "total": ..., "pipes": ...}.
    Numbers become ints."""
    out = {}
    for line in block.splitlines():
        m = _STATS_LINE.match(line)
        if not m:
            continue
        section = (m.group(2) or " info").strip()
        fields = {}
        for token in m.group(3).split():
            if "=" in token:
                key, _, value = token.partition("=")
                fields[key] = int(value) if value.isdigit() else value
        out.setdefault(m.group(1), {})[section] = fields
    return out


class Proxy:
    """A running splice_proxy. Its stderr goes to a log file in `tmpdir`."""

    def __init__(self, args, tmpdir, name="proxy", nofile=None,
                 expect_running=True, timeout=15):
        self.args = list(args)
        self.log_path = os.path.join(tmpdir, f"{name}.log")
        self.logfile = open(self.log_path, "w")

        def limits():
            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        self.proc = subprocess.Popen([SPLICE_PROXY] + self.args,
                                     stdout=self.logfile,
                                     stderr=subprocess.STDOUT,
                                     preexec_fn=limits)
        self.pid = self.proc.pid
        self.addresses = {}
        if expect_running:
            self.wait_for_log("running, pid", timeout)
            for m in re.finditer(r"forward (\d+): listening on (\S+), ",
                                 self.log()):
                self.addresses[int(m.group(1))] = m.group(2)

    def log(self):
        with open(self.log_path) as f:
            return f.read()

    def wait_for_log(self, text, timeout=15, count=1):
        deadline = time.time() + timeout
        while self.log().count(text) < count:
            if self.proc.poll() is not None and self.log().count(text) < count:
                raise AssertionError(
                    f"splice_proxy exited ({self.proc.returncode}) before "
                    f"logging {text!r}:\n{self.log()}")
            if time.time() > deadline:
                raise AssertionError(f"no {text!r} in the log after "
                                     f"{timeout}s:\n{self.log()}")
            time.sleep(0.02)

    def stats(self, timeout=15):
        """SIGUSR1, then the parsed block it printed."""
        marker = "end of stats (SIGUSR1)"
        before = self.log().count(marker)
        self.proc.send_signal(signal.SIGUSR1)
        self.wait_for_log(marker, timeout, count=before + 1)
        text = self.log()
        end = -1
        for _ in range(before + 1):
            end = text.index(marker, end + 1)
        start = text.rindex("stats (SIGUSR1):", 0, end)
        return parse_stats(text[start:end])

    def exit_stats(self):
        text = self.log()
        end = text.rindex("end of stats (exit)")
        return parse_stats(text[text.rindex("stats (exit):", 0, end):end])

    def fds(self):
        """{"total": n, "socket": n, "pipe": n, "other": n} from
        /proc/PID/fd."""
        counts = {"total": 0, "socket": 0, "pipe": 0, "other": 0}
        path = f"/proc/{self.pid}/fd"
        for name in os.listdir(path):
            try:
                target = os.readlink(os.path.join(path, name))
            except FileNotFoundError:
                continue
            kind = target.split(":")[0]
            counts["total"] += 1
            counts[kind if kind in ("socket", "pipe") else "other"] += 1
        return counts

    def wait_for_fds(self, predicate, timeout=15):
        deadline = time.time() + timeout
        while True:
            fds = self.fds()
            if predicate(fds):
                return fds
            if time.time() > deadline:
                return fds
            time.sleep(0.02)

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        finally:
            self.kill()
        return rc

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if not self.logfile.closed:
            self.logfile.close()


def run_proxy(args, timeout=30):
    """Runs splice_proxy to completion (for flag errors)."""
    return subprocess.run([SPLICE_PROXY] + list(args), capture_output=True,
                          text=True, timeout=timeout)
