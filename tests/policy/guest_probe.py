"""What the policy tests run in the guest namespace that curl, dig and ping
do not: each command prints one JSON object and exits 0.

  udp ADDR PORT SIZE FIRST   one datagram of SIZE bytes whose first byte is
                             FIRST (0xc3: a QUIC long header) on a connected
                             socket; {"echo": bool, "errno": N, "ms": T}
  icmp ADDR                  one echo request on a raw socket; what came
                             back: {"type": N, "code": N, "ms": T}
  connect ADDR PORT          {"errno": N, "ms": T} (0: connected)
  hold ADDR PORT SECONDS     reads a stream; "progress" lines (bytes so far,
                             seconds, CLOCK_MONOTONIC) every 0.1 s, then
                             {"end": "reset"|"eof"|"time"|"stalled"|"errno N", "at":
                             CLOCK_MONOTONIC, ...}
  flood ADDR PORT N          N nonblocking connects, each socket closed at
                             once; {"sent": N, "seconds": T, "start": T0,
                             "end": T1} (CLOCK_MONOTONIC, as hold's)

The times are the client's own: from the send or connect to the answer.
"""
import errno
import json
import os
import select
import socket
import struct
import sys
import time


def family(addr):
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def out(obj):
    print(json.dumps(obj), flush=True)


def udp(addr, port, size, first):
    s = socket.socket(family(addr), socket.SOCK_DGRAM)
    s.connect((addr, port))
    s.settimeout(2)
    data = bytes([first]) + os.urandom(size - 1)
    t0 = time.monotonic()
    s.send(data)
    try:
        got = s.recv(65535)
        out({"echo": got == data, "errno": 0,
             "ms": (time.monotonic() - t0) * 1000})
    except socket.timeout:
        out({"echo": False, "errno": -1, "ms": (time.monotonic() - t0) * 1000})
    except OSError as e:
        out({"echo": False, "errno": e.errno, "errname":
             errno.errorcode.get(e.errno, "?"),
             "ms": (time.monotonic() - t0) * 1000})


def icmp(addr):
    v6 = ":" in addr
    proto = socket.IPPROTO_ICMPV6 if v6 else socket.IPPROTO_ICMP
    s = socket.socket(family(addr), socket.SOCK_RAW, proto)
    ident = os.getpid() & 0xFFFF
    echo_type = 128 if v6 else 8
    payload = b"policy-probe" * 4
    msg = struct.pack("!BBHHH", echo_type, 0, 0, ident, 1) + payload
    if not v6:  # the kernel computes ICMPv6's checksum, not ICMP's
        c = sum(struct.unpack("!%dH" % (len(msg) // 2), msg))
        while c >> 16:
            c = (c & 0xFFFF) + (c >> 16)
        msg = msg[:2] + struct.pack("!H", ~c & 0xFFFF) + msg[4:]
    t0 = time.monotonic()
    s.sendto(msg, (addr, 0))
    deadline = t0 + 2
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([s], [], [], left)[0]:
            out({"type": -1, "code": -1, "ms": (time.monotonic() - t0) * 1000})
            return
        pkt = s.recv(65535)
        if not v6:
            pkt = pkt[(pkt[0] & 0xF) * 4:]  # a raw IPv4 socket gets the header
        t, code = pkt[0], pkt[1]
        if t in (0, 129) and struct.unpack("!H", pkt[4:6])[0] == ident:
            break
        if t in (3, 1) and ident in _quoted_ids(pkt, v6):
            break
    out({"type": t, "code": code, "ms": (time.monotonic() - t0) * 1000})


def _quoted_ids(pkt, v6):
    """The echo id quoted in an ICMP error (after its 8-byte header)."""
    inner = pkt[8:]
    hl = 40 if v6 else (inner[0] & 0xF) * 4 if inner else 0
    if len(inner) < hl + 6:
        return ()
    return (struct.unpack("!H", inner[hl + 4:hl + 6])[0],)


def connect(addr, port):
    s = socket.socket(family(addr), socket.SOCK_STREAM)
    s.settimeout(3)
    t0 = time.monotonic()
    e = s.connect_ex((addr, port))
    out({"errno": e, "errname": errno.errorcode.get(e, "?") if e else "",
         "ms": (time.monotonic() - t0) * 1000})


def hold(addr, port, seconds):
    s = socket.create_connection((addr, port), timeout=5)
    t0 = time.monotonic()
    n, last = 0, t0
    end = "time"
    try:
        while time.monotonic() - t0 < seconds:
            chunk = s.recv(1 << 20)
            if not chunk:
                end = "eof"
                break
            n += len(chunk)
            now = time.monotonic()
            if now - last >= 0.1:
                print(f"progress {n} {now - t0:.3f} {now:.3f}", flush=True)
                last = now
    except ConnectionResetError:
        end = "reset"
    except socket.timeout:
        end = "stalled"  # nothing for 5 s: neither data nor an end
    except OSError as e:
        end = f"errno {e.errno}"
    t1 = time.monotonic()
    out({"end": end, "bytes": n, "seconds": t1 - t0, "at": t1})


def flood(addr, port, n):
    dest = (addr, port)
    fam = family(addr)
    t0 = time.monotonic()
    print(f"start {t0:.3f}", flush=True)
    for _ in range(n):
        s = socket.socket(fam, socket.SOCK_STREAM)
        s.setblocking(False)
        s.connect_ex(dest)  # EINPROGRESS: the SYN is out
        s.close()
    t1 = time.monotonic()
    out({"sent": n, "seconds": t1 - t0, "start": t0, "end": t1})


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "udp":
        udp(args[0], int(args[1]), int(args[2]), int(args[3], 0))
    elif cmd == "icmp":
        icmp(args[0])
    elif cmd == "connect":
        connect(args[0], int(args[1]))
    elif cmd == "hold":
        hold(args[0], int(args[1]), float(args[2]))
    elif cmd == "flood":
        flood(args[0], int(args[1]), int(args[2]))
    else:
        raise SystemExit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
