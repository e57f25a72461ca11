"""What limits_interop_test runs in the guest namespace: prints one JSON
object and exits 0.

  connects ADDR PORT N SECONDS   N nonblocking connects at once, then waits
                                 up to SECONDS for them; {"connected":
                                 [seconds from the start, one per socket
                                 that connected], "errors": {errno name:
                                 count}, "pending": N still connecting}
  udps ADDR PORT N SECONDS       N connected UDP sockets (N flows), one
                                 datagram each at once, then up to SECONDS
                                 for the echoes; {"echoed": N, "errors":
                                 {errno name: count}}
"""
import errno
import json
import select
import socket
import sys
import time


def connects(addr, port, n, seconds):
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    t0 = time.monotonic()
    pending = {}
    for _ in range(n):
        s = socket.socket(fam, socket.SOCK_STREAM)
        s.setblocking(False)
        s.connect_ex((addr, port))  # EINPROGRESS: the SYN is out
        pending[s.fileno()] = s
    done, errors = [], {}
    poll = select.poll()
    for fd in pending:
        poll.register(fd, select.POLLOUT)
    while pending and time.monotonic() - t0 < seconds:
        for fd, _ in poll.poll(100):
            s = pending.pop(fd)
            poll.unregister(fd)
            e = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if e == 0:
                done.append(time.monotonic() - t0)
            else:
                name = errno.errorcode.get(e, str(e))
                errors[name] = errors.get(name, 0) + 1
            s.close()
    for s in pending.values():
        s.close()
    print(json.dumps({"connected": sorted(done), "errors": errors,
                      "pending": len(pending)}), flush=True)


def udps(addr, port, n, seconds):
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    socks = []
    for i in range(n):
        s = socket.socket(fam, socket.SOCK_DGRAM)
        s.connect((addr, port))
        s.setblocking(False)
        s.send(b"limits %d" % i)
        socks.append(s)
    echoed, errors = 0, {}
    t0 = time.monotonic()
    left = list(socks)
    while left and time.monotonic() - t0 < seconds:
        ready, _, _ = select.select(left, [], [], 0.1)
        for s in ready:
            left.remove(s)
            try:
                s.recv(65535)
                echoed += 1
            except OSError as e:
                name = errno.errorcode.get(e.errno, str(e.errno))
                errors[name] = errors.get(name, 0) + 1
    for s in socks:
        s.close()
    print(json.dumps({"echoed": echoed, "errors": errors}), flush=True)


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "connects":
        connects(args[0], int(args[1]), int(args[2]), float(args[3]))
    elif cmd == "udps":
        udps(args[0], int(args[1]), int(args[2]), float(args[3]))
    else:
        raise SystemExit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
