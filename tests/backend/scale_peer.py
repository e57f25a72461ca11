#!/usr/bin/env python3
"""The two ends of backend_scale_interop_test's flows, one process each,
non-blocking on epoll, so that one process holds 10,000+ connections.

  scale_peer.py server PORT ADDR...
      An echo server on every ADDR: each byte a connection sends comes back.
  scale_peer.py client ADDR PORT [ADDR PORT ...]
      Flow i goes to the (i mod k)-th address. Reads commands on stdin and
      answers each with one JSON line on stdout (progress goes to stderr):
        open N WAVE TIMEOUT  opens N more flows, WAVE connects at a time,
                             each wave given TIMEOUT seconds; no retries
        round R TIMEOUT      every open flow sends payload(i, R) and must
                             read exactly that back
        probe ADDR PORT TIMEOUT   one more connect: what it got, how fast
        close                closes every flow
Both raise RLIMIT_NOFILE as far as they may.
"""
import errno
import json
import resource
import selectors
import socket
import sys
import time

WANT_FDS = 65536


def raise_fd_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:  # root may raise the hard limit too
        resource.setrlimit(resource.RLIMIT_NOFILE,
                           (WANT_FDS, max(hard, WANT_FDS)))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def family_of(addr):
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def errname(e):
    return errno.errorcode.get(e, str(e))


# ---------------------------------------------------------------- server


def serve(port, addrs):
    sel = selectors.DefaultSelector()
    for a in addrs:
        ls = socket.socket(family_of(a), socket.SOCK_STREAM)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if ":" in a:
            ls.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        ls.bind((a, port))
        ls.listen(16384)
        ls.setblocking(False)
        sel.register(ls, selectors.EVENT_READ, None)
    pending = {}  # socket -> bytes not yet echoed
    while True:
        for key, events in sel.select():
            s = key.fileobj
            if key.data is None:  # a listener
                while True:
                    try:
                        c, _ = s.accept()
                    except (BlockingIOError, InterruptedError):
                        break
                    except OSError:  # EMFILE and the like: try later
                        break
                    c.setblocking(False)
                    pending[c] = b""
                    sel.register(c, selectors.EVENT_READ, "conn")
                continue
            try:
                if events & selectors.EVENT_READ:
                    data = s.recv(65536)
                    if not data:
                        raise ConnectionResetError
                    pending[s] += data
                if pending[s]:
                    n = s.send(pending[s])
                    pending[s] = pending[s][n:]
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                sel.unregister(s)
                del pending[s]
                s.close()
                continue
            # While an echo is unsent, read no more (the peer's window
            # closes): the server never holds more than one recv.
            want = selectors.EVENT_WRITE if pending[s] else selectors.EVENT_READ
            if key.events != want:
                sel.modify(s, want, "conn")


# ---------------------------------------------------------------- client


def payload(i, r):
    """Flow i's bytes in round r: 64 to 600 bytes, unique to (i, r)."""
    n = 64 + (i * 7919 + r * 131) % 537
    tag = f"<{r}:{i}>".encode()
    return (tag * (n // len(tag) + 1))[:n]


class Client:
    def __init__(self, targets):
        self.targets = targets
        self.sel = selectors.DefaultSelector()
        self.flows = {}  # index -> socket
        self.next_index = 0

    def report(self, **fields):
        print(json.dumps(fields), flush=True)

    def open(self, n, wave, timeout):
        t0 = time.monotonic()
        failed = {}
        failed_index = []
        target_n = self.next_index + n
        while self.next_index < target_n:
            connecting = {}
            for _ in range(min(wave, target_n - self.next_index)):
                i = self.next_index
                self.next_index += 1
                addr, port = self.targets[i % len(self.targets)]
                s = socket.socket(family_of(addr), socket.SOCK_STREAM)
                s.setblocking(False)
                e = s.connect_ex((addr, port))
                if e not in (0, errno.EINPROGRESS):
                    failed[errname(e)] = failed.get(errname(e), 0) + 1
                    failed_index.append(i)
                    s.close()
                    continue
                connecting[s] = i
                self.sel.register(s, selectors.EVENT_WRITE, i)
            deadline = time.monotonic() + timeout
            while connecting and time.monotonic() < deadline:
                for key, _ in self.sel.select(deadline - time.monotonic()):
                    s, i = key.fileobj, key.data
                    self.sel.unregister(s)
                    del connecting[s]
                    e = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    if e == 0:
                        self.flows[i] = s
                    else:
                        failed[errname(e)] = failed.get(errname(e), 0) + 1
                        failed_index.append(i)
                        s.close()
            for s, i in connecting.items():
                self.sel.unregister(s)
                failed["timeout"] = failed.get("timeout", 0) + 1
                failed_index.append(i)
                s.close()
            print(f"scale client: {len(self.flows)} flows open "
                  f"({self.next_index} tried)", file=sys.stderr, flush=True)
        self.report(cmd="open", open=len(self.flows), failed=failed,
                    failed_index=failed_index[:50],
                    seconds=time.monotonic() - t0)

    def round(self, r, timeout):
        t0 = time.monotonic()
        want = {i: payload(i, r) for i in self.flows}
        unsent = dict(want)
        got = {i: b"" for i in self.flows}
        verified, wrong, eof, errors = [], [], [], {}
        sock_of = self.flows

        def fail(i, why):
            errors[why] = errors.get(why, 0) + 1
            self.sel.unregister(sock_of[i])
            open_left.discard(i)

        open_left = set(self.flows)
        for i, s in self.flows.items():
            try:
                n = s.send(unsent[i])
                unsent[i] = unsent[i][n:]
            except (BlockingIOError, InterruptedError):
                pass
            except OSError as e:
                errors[errname(e.errno)] = errors.get(errname(e.errno), 0) + 1
                open_left.discard(i)
                continue
            ev = selectors.EVENT_READ
            if unsent[i]:
                ev |= selectors.EVENT_WRITE
            self.sel.register(s, ev, i)
        deadline = time.monotonic() + timeout
        while open_left and time.monotonic() < deadline:
            for key, events in self.sel.select(deadline - time.monotonic()):
                i, s = key.data, key.fileobj
                try:
                    if events & selectors.EVENT_WRITE and unsent[i]:
                        n = s.send(unsent[i])
                        unsent[i] = unsent[i][n:]
                        if not unsent[i]:
                            self.sel.modify(s, selectors.EVENT_READ, i)
                    if events & selectors.EVENT_READ:
                        data = s.recv(65536)
                        if not data:
                            eof.append(i)
                            fail(i, "eof")
                            continue
                        got[i] += data
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError as e:
                    fail(i, errname(e.errno))
                    continue
                if len(got[i]) >= len(want[i]):
                    if got[i] == want[i]:
                        verified.append(i)
                    else:
                        wrong.append(i)
                    self.sel.unregister(s)
                    open_left.discard(i)
        for i in open_left:
            self.sel.unregister(sock_of[i])
        silent = sorted(i for i in open_left if not got[i])
        partial = sorted(i for i in open_left if got[i])
        self.report(cmd="round", round=r, flows=len(want),
                    verified=len(verified), wrong=sorted(wrong)[:50],
                    wrong_count=len(wrong), eof_count=len(eof), errors=errors,
                    unanswered=len(open_left), silent_count=len(silent),
                    silent=silent[:50], partial_count=len(partial),
                    partial=partial[:50],
                    unsent_count=sum(1 for i in open_left if unsent[i]),
                    seconds=time.monotonic() - t0)

    def probe(self, addr, port, timeout):
        s = socket.socket(family_of(addr), socket.SOCK_STREAM)
        s.settimeout(timeout)
        t0 = time.monotonic()
        try:
            s.connect((addr, port))
            what = "connected"
        except socket.timeout:
            what = "timeout"
        except OSError as e:
            what = errname(e.errno)
        dt = time.monotonic() - t0
        s.close()
        self.report(cmd="probe", result=what, seconds=dt)

    def close(self):
        n = len(self.flows)
        for s in self.flows.values():
            s.close()
        self.flows.clear()
        self.report(cmd="close", closed=n)


def client(argv):
    targets = [(argv[k], int(argv[k + 1])) for k in range(0, len(argv), 2)]
    c = Client(targets)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "open":
            c.open(int(cmd[1]), int(cmd[2]), float(cmd[3]))
        elif cmd[0] == "round":
            c.round(int(cmd[1]), float(cmd[2]))
        elif cmd[0] == "probe":
            c.probe(cmd[1], int(cmd[2]), float(cmd[3]))
        elif cmd[0] == "close":
            c.close()
        else:
            c.report(cmd=cmd[0], error="unknown command")


def main():
    limit = raise_fd_limit()
    print(f"scale peer {sys.argv[1]}: fd limit {limit}", file=sys.stderr,
          flush=True)
    if sys.argv[1] == "server":
        serve(int(sys.argv[2]), sys.argv[3:])
    else:
        client(sys.argv[2:])


if __name__ == "__main__":
    main()
