#!/usr/bin/env python3
"""A hostile guest's frames, as fast as one core sends them: SYN floods and
fragment floods, written with an AF_PACKET socket straight onto the
guest's link (backend_flood_interop_test.py, bench/flood_benchmark.py).

Every frame is built before the clock starts (one send(2) per frame then,
nothing else in the loop), so the rate is the socket's, not Python's
packing. Prints one JSON line: what was sent, what the socket refused
(ENOBUFS: the device's queue was full), the seconds and the rate.

  flood_peer.py syn DEV DST_MAC SRC DST DPORT COUNT [--sport-base N]
                    [--dsts A,B,...] [--seconds S]
      COUNT SYNs from SRC to DST:DPORT (IPv4 or IPv6 by the address), each
      from its own source port: the 4-tuple of SYN i is
      (SRC, sport-base + i mod ports, DSTS[i // ports], DPORT), with ports
      = 65536 - sport-base, so up to ports * len(DSTS) SYNs are distinct.
      MSS, SACK-permitted, timestamps and window scale, as Linux sends.
      --seconds S: send the COUNT frames over and over until S seconds
      passed (the bench's flood under a transfer); "sent" counts them all.
      --rate R: at most R frames a second (default: as fast as it goes).
      --srcs A,B,...: source addresses taken in turn with the
      destinations (pairs (SRCS[j % len], DSTS[j // len]) for j = i //
      ports), for a listener with one address.
  flood_peer.py frag DEV DST_MAC SRC DST KIND COUNT [--seconds S]
      UDP fragments to DST:9 (port 9, nobody is expected to listen):
        first     COUNT first fragments (offset 0, MF) of COUNT datagrams,
                  1,480 bytes of a 65,000-byte datagram each, never
                  completed: every one waits for its timeout, or is
                  evicted at the reassembler's memory limit;
        overlap   COUNT datagrams of two fragments that overlap (offset 0
                  length 1480 MF, then offset 1000 with more data, last);
        tiny      COUNT datagrams cut in 8-byte fragments, 128 + 1 each
                  (more than max_fragments), none completed.
      IPv4 ids (16 bits) and IPv6 identifications (32 bits) are distinct
      for each datagram up to 65,536 (IPv4).
  flood_peer.py udpecho PORT ADDR...
      A UDP echo server on every ADDR (one socket each, epoll).
  flood_peer.py udpflows ADDR PORT COUNT TIMEOUT [--size N]
      COUNT UDP flows: COUNT connected sockets, each sends one datagram of
      N bytes (unique to it) and waits up to TIMEOUT s in all for its echo.
      Reports how many were echoed exactly, and the errors the others got
      (EHOSTUNREACH: the ICMP administratively prohibited of a full flow
      table).
"""
import argparse
import errno
import json
import socket
import struct
import sys
import time

ETH_P_ALL = 0x0003


def csum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def mac(s):
    return bytes(int(x, 16) for x in s.split(":"))


def v6(addr):
    return ":" in addr


def ip_bytes(addr):
    return socket.inet_pton(socket.AF_INET6 if v6(addr) else socket.AF_INET,
                            addr)


def eth(dst_mac, src_mac, is_v6):
    return dst_mac + src_mac + struct.pack("!H", 0x86DD if is_v6 else 0x0800)


def ipv4_header(src, dst, proto, payload_len, ident=0, frag=0):
    """frag: the 16-bit flags+offset field (MF 0x2000, offset in 8-byte
    units)."""
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + payload_len, ident, frag,
                    64, proto, 0, src, dst)
    return h[:10] + struct.pack("!H", csum(h)) + h[12:]


def ipv6_header(src, dst, next_header, payload_len):
    return struct.pack("!IHBB16s16s", 6 << 28, payload_len, next_header, 64,
                       src, dst)


def pseudo(src, dst, proto, length):
    if len(src) == 4:
        return src + dst + struct.pack("!BBH", 0, proto, length)
    return src + dst + struct.pack("!IxxxB", length, proto)


def syn_segment(src, dst, sport, dport, seq):
    # MSS 1460, SACK-permitted, timestamps, NOP, window scale 7: Linux's.
    opts = (struct.pack("!BBH", 2, 4, 1460) + b"\x04\x02" +
            struct.pack("!BBII", 8, 10, seq & 0xFFFFFFFF, 0) +
            b"\x01" + struct.pack("!BBB", 3, 3, 7))
    hl = 20 + len(opts)
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq, 0, (hl // 4) << 4,
                      0x02, 64240, 0, 0) + opts
    c = csum(pseudo(src, dst, 6, len(tcp)) + tcp)
    return tcp[:16] + struct.pack("!H", c) + tcp[18:]


def syn_frames(a):
    dst_mac, src_mac = mac(a.dst_mac), open(
        f"/sys/class/net/{a.dev}/address").read().strip()
    src_mac = mac(src_mac)
    srcs = [ip_bytes(x) for x in (a.srcs.split(",") if a.srcs else [a.src])]
    dsts = [ip_bytes(d) for d in (a.dsts.split(",") if a.dsts else [a.dst])]
    is_v6 = v6(a.src)
    head = eth(dst_mac, src_mac, is_v6)
    ports = 65536 - a.sport_base
    if a.count > ports * len(dsts) * len(srcs):
        sys.exit(f"{a.count} SYNs need more than {ports} ports x "
                 f"{len(srcs)} sources x {len(dsts)} destinations")
    frames = []
    for i in range(a.count):
        j = i // ports
        src, dst = srcs[j % len(srcs)], dsts[j // len(srcs)]
        sport = a.sport_base + i % ports
        seq = (i * 2654435761) & 0xFFFFFFFF
        tcp = syn_segment(src, dst, sport, a.dport, seq)
        if is_v6:
            ip = ipv6_header(src, dst, 6, len(tcp))
        else:
            ip = ipv4_header(src, dst, 6, len(tcp), ident=i & 0xFFFF)
        frames.append(head + ip + tcp)
    return frames


def udp_datagram(src, dst, sport, dport, total):
    """A UDP header + payload of `total` bytes in all, checksum right."""
    payload = bytes((i * 7) & 0xFF for i in range(total - 8))
    u = struct.pack("!HHHH", sport, dport, total & 0xFFFF, 0) + payload
    c = csum(pseudo(src, dst, 17, total) + u) or 0xFFFF
    return u[:6] + struct.pack("!H", c) + u[8:]


def fragment(head, src, dst, is_v6, ident, offset, data, more):
    if is_v6:
        fh = struct.pack("!BBHI", 17, 0, (offset & ~7) | (1 if more else 0),
                         ident)
        return head + ipv6_header(src, dst, 44, len(fh) + len(data)) + fh + data
    frag = (0x2000 if more else 0) | (offset // 8)
    return head + ipv4_header(src, dst, 17, len(data), ident & 0xFFFF,
                              frag) + data


def frag_frames(a):
    dst_mac = mac(a.dst_mac)
    src_mac = mac(open(f"/sys/class/net/{a.dev}/address").read().strip())
    src, dst = ip_bytes(a.src), ip_bytes(a.dst)
    is_v6 = v6(a.src)
    head = eth(dst_mac, src_mac, is_v6)
    body = udp_datagram(src, dst, 40000, 9, 65000 if not is_v6 else 64000)
    frames = []
    for i in range(a.count):
        ident = i + 1
        if a.kind == "first":
            frames.append(fragment(head, src, dst, is_v6, ident, 0,
                                   body[:1480], True))
        elif a.kind == "overlap":
            frames.append(fragment(head, src, dst, is_v6, ident, 0,
                                   body[:1480], True))
            frames.append(fragment(head, src, dst, is_v6, ident, 1000,
                                   body[1000:2000], False))
        elif a.kind == "tiny":
            for k in range(129):
                frames.append(fragment(head, src, dst, is_v6, ident, 8 * k,
                                       body[8 * k:8 * k + 8], True))
        else:
            sys.exit(f"unknown fragment kind {a.kind}")
    return frames


def blast(dev, frames, seconds, rate=0):
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.bind((dev, 0))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    send = s.send
    sent = refused = 0
    t0 = time.monotonic()
    deadline = t0 + (seconds or 0)
    while True:
        for f in frames:
            try:
                send(f)
                sent += 1
            except OSError as e:
                if e.errno not in (errno.ENOBUFS, errno.EAGAIN):
                    raise
                refused += 1
            if rate and (sent + refused) % 64 == 0:
                ahead = t0 + (sent + refused) / rate - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
        if not seconds or time.monotonic() >= deadline:
            break
    dt = time.monotonic() - t0
    s.close()
    return {"sent": sent, "refused": refused, "seconds": dt,
            "rate": sent / dt if dt > 0 else 0.0}


def udp_echo(port, addrs):
    import selectors
    sel = selectors.DefaultSelector()
    for a in addrs:
        u = socket.socket(socket.AF_INET6 if v6(a) else socket.AF_INET,
                          socket.SOCK_DGRAM)
        u.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        u.bind((a, port))
        u.setblocking(False)
        sel.register(u, selectors.EVENT_READ)
    while True:
        for key, _ in sel.select():
            for _ in range(256):
                try:
                    data, peer = key.fileobj.recvfrom(65536)
                except (BlockingIOError, InterruptedError):
                    break
                try:
                    key.fileobj.sendto(data, peer)
                except OSError:
                    pass


def udp_flows(addr, port, count, timeout, size):
    import resource
    import selectors
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(hard, count + 64),
                                                max(hard, count + 64)))
    fam = socket.AF_INET6 if v6(addr) else socket.AF_INET
    sel = selectors.DefaultSelector()
    want, errors, echoed = {}, {}, 0
    t0 = time.monotonic()
    for i in range(count):
        u = socket.socket(fam, socket.SOCK_DGRAM)
        u.setblocking(False)
        u.connect((addr, port))
        msg = (f"<{i}>".encode() * (size // 3 + 1))[:size]
        try:
            u.send(msg)
        except OSError as e:
            errors[errno.errorcode.get(e.errno, str(e.errno))] = errors.get(
                errno.errorcode.get(e.errno, str(e.errno)), 0) + 1
            u.close()
            continue
        want[u] = msg
        sel.register(u, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    while want and time.monotonic() < deadline:
        for key, _ in sel.select(max(0.0, deadline - time.monotonic())):
            u = key.fileobj
            try:
                data = u.recv(65536)
                if data == want[u]:
                    echoed += 1
                else:
                    errors["wrong"] = errors.get("wrong", 0) + 1
            except OSError as e:
                name = errno.errorcode.get(e.errno, str(e.errno))
                errors[name] = errors.get(name, 0) + 1
            sel.unregister(u)
            del want[u]
            u.close()
    errors["timeout"] = len(want)
    for u in want:
        u.close()
    print(json.dumps({"flows": count, "echoed": echoed, "errors": errors,
                      "seconds": time.monotonic() - t0}), flush=True)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "udpecho":
        return udp_echo(int(sys.argv[2]), sys.argv[3:])
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="mode", required=True)
    syn = sub.add_parser("syn")
    for n in ("dev", "dst_mac", "src", "dst"):
        syn.add_argument(n)
    syn.add_argument("dport", type=int)
    syn.add_argument("count", type=int)
    syn.add_argument("--sport-base", type=int, default=1024)
    syn.add_argument("--dsts", default="")
    syn.add_argument("--srcs", default="")
    syn.add_argument("--seconds", type=float, default=0)
    syn.add_argument("--rate", type=float, default=0)
    fr = sub.add_parser("frag")
    for n in ("dev", "dst_mac", "src", "dst", "kind"):
        fr.add_argument(n)
    fr.add_argument("count", type=int)
    fr.add_argument("--seconds", type=float, default=0)
    fr.add_argument("--rate", type=float, default=0)
    uf = sub.add_parser("udpflows")
    uf.add_argument("addr")
    uf.add_argument("port", type=int)
    uf.add_argument("count", type=int)
    uf.add_argument("timeout", type=float)
    uf.add_argument("--size", type=int, default=100)
    a = p.parse_args()
    if a.mode == "udpflows":
        return udp_flows(a.addr, a.port, a.count, a.timeout, a.size)
    frames = syn_frames(a) if a.mode == "syn" else frag_frames(a)
    r = blast(a.dev, frames, a.seconds, a.rate)
    r["frames"] = len(frames)
    print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
