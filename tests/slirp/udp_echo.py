#!/usr/bin/env python3
"""UDP echo for the libslirp interop tests, both ends:

  udp_echo.py serve PORT           echoes every datagram on [::]:PORT (and
                                   so 0.0.0.0:PORT: V6ONLY off) to its
                                   sender, until killed
  udp_echo.py ask ADDR PORT SIZE...  sends one datagram of each SIZE (seeded
                                   bytes) and checks each echo, 3 tries of
                                   1 s each; prints "ok N" and exits 0, or
                                   names what went wrong and exits 1

The client runs inside the guest as uid 65534 too: it needs only the
system's python3 and no file of the test's.
"""
import random
import socket
import sys


def serve(port):
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.bind(("::", port))
    while True:
        data, peer = s.recvfrom(65535)
        s.sendto(data, peer)


def ask(addr, port, sizes):
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    s = socket.socket(family, socket.SOCK_DGRAM)
    s.settimeout(1.0)
    s.connect((addr, port))
    rng = random.Random(31)
    for size in sizes:
        payload = rng.randbytes(size)
        for attempt in range(3):
            s.send(payload)
            try:
                got = s.recv(65535)
            except socket.timeout:
                continue
            if got == payload:
                break
            print(f"echo of {size} bytes differs: {len(got)} bytes back")
            return 1
        else:
            print(f"no echo of {size} bytes from {addr}:{port}")
            return 1
    print(f"ok {len(sizes)}")
    return 0


def main(argv):
    if len(argv) >= 3 and argv[1] == "serve":
        serve(int(argv[2]))
        return 0
    if len(argv) >= 5 and argv[1] == "ask":
        return ask(argv[2], int(argv[3]), [int(x) for x in argv[4:]])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
