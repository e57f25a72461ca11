#!/usr/bin/env python3
"""The Linux kernel as the conformance suite's device under test: serves
the control protocol of netstackd --control (tools/netstackd/control_api.h)
on a UNIX socket, making the same calls on real kernel sockets. Run inside
the DUT's network namespace:

    ip netns exec NS python3 linux_dut.py /tmp/ctl.sock

Every socket is non-blocking; the client polls on EAGAIN, as it does with
netstackd. One JSON object per line each way.
"""
import errno
import json
import os
import select
import socket
import struct
import sys

TCP_USER_TIMEOUT = getattr(socket, "TCP_USER_TIMEOUT", 18)
TCP_WINDOW_CLAMP = getattr(socket, "TCP_WINDOW_CLAMP", 10)
TCP_INFO = getattr(socket, "TCP_INFO", 11)

# include/net/tcp_states.h
STATES = {1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV", 4: "FIN_WAIT1",
          5: "FIN_WAIT2", 6: "TIME_WAIT", 7: "CLOSE", 8: "CLOSE_WAIT",
          9: "LAST_ACK", 10: "LISTEN", 11: "CLOSING"}


class Error(Exception):
    def __init__(self, err, why=""):
        super().__init__(why)
        self.errno = err
        self.why = why or os.strerror(err)


class Dut:
    def __init__(self):
        self.socks = {}
        self.next_fd = 3
        self.linger_zero = set()

    def add(self, s):
        s.setblocking(False)
        fd = self.next_fd
        self.next_fd += 1
        self.socks[fd] = s
        return fd

    def sock(self, req):
        s = self.socks.get(req.get("fd"))
        if s is None:
            raise Error(errno.EBADF, "no such fd")
        return s

    @staticmethod
    def addr(s, req):
        if s.family == socket.AF_INET6:
            return (req["addr"], req["port"], 0, 0)
        return (req["addr"], req["port"])

    @staticmethod
    def payload(req):
        if "data" in req:
            return bytes.fromhex(req["data"])
        n = req["size"]
        return bytes(ord("a") + i % 26 for i in range(n))

    def handle(self, req):
        op = req.get("op")
        if op == "socket":
            fam = {4: socket.AF_INET, 6: socket.AF_INET6}.get(req.get("family"))
            typ = {"tcp": socket.SOCK_STREAM, "udp": socket.SOCK_DGRAM}.get(
                req.get("proto"))
            if fam is None or typ is None:
                raise Error(errno.EINVAL, "family/proto")
            s = socket.socket(fam, typ)
            if fam == socket.AF_INET6:
                # netstack's IPv6 sockets are always v6-only.
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            return {"fd": self.add(s)}
        if op == "reset":
            for fd, s in list(self.socks.items()):
                if s.type == socket.SOCK_STREAM:
                    try:
                        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                     struct.pack("ii", 1, 0))
                    except OSError:
                        pass
                s.close()
            self.socks.clear()
            return {}
        if op == "counters":
            return {"counters": netstat()}
        s = self.sock(req)
        fd = req["fd"]
        tcp = s.type == socket.SOCK_STREAM
        if op == "close":
            if fd in self.linger_zero:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                             struct.pack("ii", 1, 0))
            s.close()
            del self.socks[fd]
            self.linger_zero.discard(fd)
            return {}
        if op == "bind":
            s.bind(self.addr(s, req))
            return {}
        if op == "connect":
            try:
                s.connect(self.addr(s, req))
            except BlockingIOError:
                pass  # EINPROGRESS: netstack's Connect returns at once too
            return {}
        if op == "listen":
            s.listen(req.get("backlog", 16))
            return {}
        if op == "accept":
            c, a = s.accept()
            return {"fd": self.add(c), "addr": a[0], "port": a[1]}
        if op in ("send", "sendto"):
            data = self.payload(req)
            if op == "sendto":
                n = s.sendto(data, self.addr(s, req))
            else:
                n = s.send(data)
            return {"n": n}
        if op == "recv":
            n = req.get("len", 65536)
            if tcp:
                b = s.recv(n)
                return {"n": len(b), "data": b.hex()}
            b, a = s.recvfrom(n)
            return {"n": len(b), "data": b.hex(), "addr": a[0], "port": a[1]}
        if op == "shutdown":
            how = {"rd": socket.SHUT_RD, "wr": socket.SHUT_WR,
                   "rdwr": socket.SHUT_RDWR}.get(req.get("how"))
            if how is None:
                raise Error(errno.EINVAL, "how")
            s.shutdown(how)
            return {}
        if op == "poll":
            p = select.poll()
            p.register(s, select.POLLIN | select.POLLOUT | select.POLLERR |
                       select.POLLHUP)
            ev = dict(p.poll(0)).get(s.fileno(), 0)
            return {"readable": bool(ev & select.POLLIN),
                    "writable": bool(ev & select.POLLOUT),
                    "error": bool(ev & select.POLLERR),
                    "hup": bool(ev & select.POLLHUP)}
        if op == "info":
            if not tcp:
                raise Error(errno.EOPNOTSUPP, "info on UDP")
            b = s.getsockopt(socket.IPPROTO_TCP, TCP_INFO, 232)
            # struct tcp_info (include/uapi/linux/tcp.h)
            (state, ca_state, retransmits, probes, backoff, options,
             wscale, _) = struct.unpack_from("8B", b, 0)
            rto, ato, snd_mss, rcv_mss = struct.unpack_from("4I", b, 8)
            total_retrans, = struct.unpack_from("I", b, 100)
            snd_wnd = struct.unpack_from("I", b, 228)[0] if len(b) >= 232 else 0
            rcv_space, = struct.unpack_from("I", b, 96)
            return {"state": STATES.get(state, str(state)),
                    "rto_ms": rto // 1000, "snd_mss": snd_mss,
                    "rcv_wnd": rcv_space, "snd_wnd": snd_wnd,
                    "retransmits": total_retrans, "timeouts": backoff,
                    "sack": bool(options & 2), "timestamps": bool(options & 1),
                    "snd_wscale": wscale & 15, "rcv_wscale": wscale >> 4}
        if op == "getsockopt":
            if req.get("opt") != "error":
                raise Error(errno.ENOPROTOOPT, "error only")
            return {"value": s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)}
        if op == "setsockopt":
            opt, v = req.get("opt"), req.get("value", 0)
            if opt == "nodelay":
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, v)
            elif opt == "cork":
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, v)
            elif opt == "user_timeout":
                s.setsockopt(socket.IPPROTO_TCP, TCP_USER_TIMEOUT, v)
            elif opt == "keepalive":
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE,
                             req.get("idle", 7200))
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL,
                             req.get("interval", 75))
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT,
                             req.get("count", 9))
                s.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, v)
            elif opt == "linger":
                if v and req.get("seconds", 0):
                    raise Error(errno.ENOPROTOOPT, "linger: 0 seconds only")
                if v:
                    self.linger_zero.add(fd)
                else:
                    self.linger_zero.discard(fd)
            elif opt == "rcvbuf":
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, v)
            elif opt == "window_clamp":
                s.setsockopt(socket.IPPROTO_TCP, TCP_WINDOW_CLAMP, v)
            else:
                raise Error(errno.ENOPROTOOPT, f"unknown {opt}")
            return {}
        raise Error(errno.EINVAL, f"unknown op {op}")


def netstat():
    """TcpExt and Tcp counters of this namespace, "TcpExt.PAWSEstab"..."""
    out = {}
    for path in ("/proc/net/netstat", "/proc/net/snmp"):
        with open(path) as f:
            lines = f.read().splitlines()
        for names, values in zip(lines[::2], lines[1::2]):
            prefix, names = names.split(":", 1)
            _, values = values.split(":", 1)
            for n, v in zip(names.split(), values.split()):
                try:
                    out[f"{prefix}.{n}"] = int(v)
                except ValueError:
                    pass
    return out


def reply(dut, line):
    try:
        req = json.loads(line)
        r = dut.handle(req)
        r["ok"] = True
    except Error as e:
        r = {"ok": False, "errno": e.errno, "error": e.why}
    except OSError as e:
        r = {"ok": False, "errno": e.errno or errno.EIO, "error": str(e)}
    except (ValueError, KeyError, TypeError) as e:
        r = {"ok": False, "errno": errno.EINVAL, "error": repr(e)}
    return json.dumps(r) + "\n"


def main():
    path = sys.argv[1]
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    os.chmod(path, 0o600)
    srv.listen(4)
    print("linux_dut: ready", flush=True)
    dut = Dut()
    while True:
        c, _ = srv.accept()
        buf = b""
        with c:
            while True:
                b = c.recv(1 << 16)
                if not b:
                    break
                buf += b
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        c.sendall(reply(dut, line).encode())


if __name__ == "__main__":
    main()
