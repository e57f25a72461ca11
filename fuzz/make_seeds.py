#!/usr/bin/env python3
"""Writes the seed corpora under fuzz/corpus/ from tests/testdata/*.pcap.

Each Ethernet frame of the captures is cut at its headers: the frame goes
to ethernet_fuzzer, its IP packet to ipv4_fuzzer / ipv6_fuzzer, its TCP,
UDP, ICMP or ARP part to that parser's target (icmpv6_fuzzer gets the two
addresses of the pseudo-header first, as it expects). Identical seeds are
written once (the file name is a hash of the bytes), and each target keeps
at most MAX_PER_TARGET of them, so the committed corpora stay small. A few
hand-made inputs cover what the captures lack (VLAN tags, IPv4 options,
IPv6 extension headers and fragments, NDP, reassembly scripts).

  python3 fuzz/make_seeds.py     # from the repository root
"""
import glob
import hashlib
import os
import re
import struct

MAX_PER_TARGET = 40
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)))
seeds = {}


def add(target, data):
    seeds.setdefault(target, {})[hashlib.sha1(data).hexdigest()[:16]] = data


def frames(path):
    with open(path, "rb") as f:
        raw = f.read()
    magic = struct.unpack("<I", raw[:4])[0]
    endian = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    pos = 24
    while pos + 16 <= len(raw):
        _, _, incl, _ = struct.unpack(endian + "IIII", raw[pos:pos + 16])
        yield raw[pos + 16:pos + 16 + incl]
        pos += 16 + incl


def upper(target_proto, data, src, dst):
    if target_proto == 6:
        add("tcp_fuzzer", data)
    elif target_proto == 17:
        add("udp_fuzzer", data)
    elif target_proto == 1:
        add("icmpv4_fuzzer", data)
    elif target_proto == 58:
        add("icmpv6_fuzzer", src + dst + data)


def split(frame):
    add("ethernet_fuzzer", frame)
    if len(frame) < 14:
        return
    etype = struct.unpack("!H", frame[12:14])[0]
    ip = frame[14:]
    if etype == 0x0806:
        add("arp_fuzzer", ip)
    elif etype == 0x0800 and len(ip) >= 20:
        add("ipv4_fuzzer", ip)
        ihl = (ip[0] & 15) * 4
        total = struct.unpack("!H", ip[2:4])[0]
        upper(ip[9], ip[ihl:total], ip[12:16], ip[16:20])
    elif etype == 0x86DD and len(ip) >= 40:
        add("ipv6_fuzzer", ip)
        plen = struct.unpack("!H", ip[4:6])[0]
        upper(ip[6], ip[40:40 + plen], ip[8:24], ip[24:40])


def handmade():
    mac = bytes.fromhex("020000000002") + bytes.fromhex("020000000001")
    add("ethernet_fuzzer", mac + b"\x81\x00\x00\x05\x08\x00" + b"\x45" * 20)
    add("ethernet_fuzzer", mac + b"\x88\xa8\x00\x07\x86\xdd" + b"\x60" * 40)
    # IPv4 with options (record route, NOP, EOL) and a fragment.
    add("ipv4_fuzzer", bytes.fromhex(
        "4700002c00014000" "40110000" "0a090001" "0a090002"
        "0707040000000000" "01000000") + b"\x00" * 4)
    add("ipv4_fuzzer", bytes.fromhex(
        "4500001c12342001" "40010000" "0a090001" "0a090002") + b"\x08" * 8)
    # IPv6: Hop-by-Hop (router alert), Destination Options, Fragment, UDP.
    src = bytes.fromhex("fd000009000000000000000000000001")
    dst = bytes.fromhex("fd000009000000000000000000000002")
    ext = (bytes.fromhex("3c00050200000100") + bytes.fromhex("2c0001040000de00")
           + bytes.fromhex("1100000100000007") + bytes.fromhex("0035003500080000"))
    add("ipv6_fuzzer", bytes.fromhex("60000000") + struct.pack("!H", len(ext))
        + b"\x00\x40" + src + dst + ext)
    nonfirst = bytes.fromhex("3a0005a900000009") + b"\xbb" * 16
    add("ipv6_fuzzer", bytes.fromhex("60000000") + struct.pack("!H", len(nonfirst))
        + b"\x2c\x40" + src + dst + nonfirst)
    # NDP: RS with SLLA, NS with SLLA, RA with prefix and MTU, NA.
    slla = bytes.fromhex("01010200000000 01".replace(" ", ""))
    add("icmpv6_fuzzer", src + dst + bytes.fromhex("85000000 00000000".replace(" ", "")) + slla)
    add("icmpv6_fuzzer", src + dst + bytes.fromhex("87000000 00000000".replace(" ", "")) + dst + slla)
    prefix = bytes.fromhex("030440c0ffffffffffffffff00000000") + bytes.fromhex(
        "fd000009000000000000000000000000")
    add("icmpv6_fuzzer", src + dst + bytes.fromhex("8600000040c00708000000000000000000")[:16]
        + slla + prefix + bytes.fromhex("0501000000000578"))
    add("icmpv6_fuzzer", src + dst + bytes.fromhex("88000000e0000000") + dst
        + bytes.fromhex("0201020000000002"))
    # TCP SYN with every option, and an ACK with four SACK blocks.
    add("tcp_fuzzer", bytes.fromhex(
        "c0000050000000010000000000a002fa" "f0000000"
        "020405b40402080a0000000100000000010303070000"[:40]))
    add("tcp_fuzzer", bytes.fromhex(
        "c000005000000001000000028010fa00" "00000000"
        "0101050a0000100000002000" "0101080a0000000200000001"))
    # UDP: DNS-sized, zero checksum, header only.
    add("udp_fuzzer", bytes.fromhex("c35000350014abcd") + b"\x11" * 12)
    add("udp_fuzzer", bytes.fromhex("0044004300080000"))
    # Reassembly scripts: two fragments completing a datagram; an overlap;
    # a timeout; a flood of new datagrams.
    add("reassembly_fuzzer", bytes([1, 0x10, 0, 0, 0, 64, 0x00, 0, 8, 0, 16]))
    add("reassembly_fuzzer", bytes([0, 0x11, 0, 0, 0, 64, 0x31, 0, 4, 0, 64,
                                    0x01, 0, 12, 0, 8]))
    add("reassembly_fuzzer", bytes([0, 0x12, 0, 0, 0, 64, 0xff, 0, 0x02, 0, 8, 0, 8]))
    add("reassembly_fuzzer", bytes([1] + sum(([0x10 | i, 0, 0, 0, 64] for i in range(16)), [])))


def stack_scripts():
    """Scripts for stack_fuzzer (its file comment has the format)."""
    rec = lambda b: struct.pack("!H", len(b)) + b
    syn = bytes.fromhex("c0000050000000010000000060020000ffff0000" "020405b4")
    def reply(flags, payload=b"", window=0xFFFF):
        return bytes([3, flags, 0, 0]) + struct.pack("!H", window) + bytes(
            [len(payload) // 4]) + payload
    for op in (1, 2):  # IPv4, IPv6
        script = (bytes([op, 6]) + rec(syn) + reply(0x10) +
                  reply(0x18, b"GET / HTTP/1.0\r\n\r\n") + bytes([4, 0, 50]) +
                  reply(0x10) + reply(0x11) + bytes([4, 0, 200]) + reply(0x10))
        add("stack_fuzzer", script)
        # A SYN and then silence past every retransmission.
        add("stack_fuzzer", bytes([op, 6]) + rec(syn) + bytes([0x84, 0, 0, 60]) * 4)
    # UDP echo, and a UDP datagram to a closed port (ICMP unreachable).
    add("stack_fuzzer", bytes([1, 17]) + rec(bytes.fromhex("c35000070010 0000".replace(" ", "")) + b"ping1234"))
    add("stack_fuzzer", bytes([1, 17]) + rec(bytes.fromhex("c35000090010 0000".replace(" ", "")) + b"ping1234"))
    # Whole captures, frame by frame, with time steps between.
    for path in sorted(glob.glob(os.path.join(ROOT, "..", "tests", "testdata", "*.pcap"))):
        script = b""
        for frame in list(frames(path))[:24]:
            script += bytes([0]) + rec(frame) + bytes([4, 0, 10])
        add("stack_fuzzer", script)


def splitmix(state):
    """The generator tcp_fuzz_test draws its forgeries from (Mix)."""
    mask = (1 << 64) - 1
    while True:
        state = (state + 0x9E3779B97F4A7C15) & mask
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        yield z ^ (z >> 31)


def tcp_conn_scripts():
    """tcp_conn_fuzzer: a size byte, then per frame a byte (odd: forge)
    and the forgery's 32-bit choices. Drawn
    from tcp_fuzz_test's generator and seeds, so the seeds forge as that
    test does (a quarter of the frames, on time)."""
    for seed in range(1, 7):
        rng = splitmix(seed * 7919)
        script = bytes([seed * 10 % 64])
        while len(script) < 2000:
            forge = next(rng) % 4 == 0
            script += bytes([1 if forge else 0])
            if forge:
                script += b"".join(struct.pack("!I", next(rng) & 0xFFFFFFFF)
                                   for _ in range(3))
        add("tcp_conn_fuzzer", script)
    # No forgery at all; every frame forged.
    add("tcp_conn_fuzzer", bytes([63]))
    rng = splitmix(42)
    add("tcp_conn_fuzzer", bytes([8]) + b"".join(
        bytes([1]) + struct.pack("!III", *(next(rng) & 0xFFFFFFFF for _ in range(3)))
        for _ in range(150)))


def unix_stream_scripts():
    """unix_stream_fuzzer: MTU (2), batch (1), then steps: 0 = write (a
    16-bit length and the bytes), 1 = read, 0x82 = keep, 2 = free,
    3 = 1 ms on. The frames of the captures, length-prefixed, written in
    one piece and cut mid-prefix and mid-frame; and the bad lengths."""
    write = lambda b: bytes([0]) + struct.pack("!H", len(b)) + b
    framed = lambda f: struct.pack("!I", len(f)) + f
    for path in sorted(glob.glob(os.path.join(ROOT, "..", "tests", "testdata", "*.pcap"))):
        stream = b"".join(framed(f) for f in list(frames(path))[:12])[:4096]
        add("unix_stream_fuzzer", struct.pack("!HB", 1500 - 68, 4) + write(stream) + b"\x01")
        cut = bytes([0x82]) + b"".join(write(stream[i:i + 50]) + b"\x01"
                                     for i in range(0, min(len(stream), 1000), 50))
        add("unix_stream_fuzzer", struct.pack("!HB", 1500 - 68, 1) + cut + b"\x02\x03\x01")
    eth = bytes.fromhex("020000000002020000000001" "0800") + b"\x45" * 20
    for tail in (struct.pack("!I", 0), struct.pack("!I", 65536),
                 struct.pack("!I", 5) + b"runt!", framed(eth * 100)):
        add("unix_stream_fuzzer", struct.pack("!HB", 0, 2) + write(framed(eth) + tail + framed(eth)) + b"\x01")


def guest_config_scripts():
    """guest_config_fuzzer: steps 0 = DHCPv4 (0x20: from the guest
    address, 0x40: to the gateway), 1 = DHCPv6, 2 = RS (0x40: from ::,
    0x80: a hop-limit byte first), 3 = raw frame, 4 = time (16-bit ms; 0x80:
    and seconds); each body length-prefixed. The messages the backend's
    unit tests send: DISCOVER, REQUEST, INFORM, RELEASE, DECLINE, an
    INFORMATION-REQUEST, solicitations with and without SLLA."""
    rec = lambda b: struct.pack("!H", len(b)) + b
    mac = bytes.fromhex("02aa00000001")
    def dhcp4(mtype, xid=0x1234, ciaddr=b"\0" * 4, opts=b""):
        m = (bytes([1, 1, 6, 0]) + struct.pack("!IHH", xid, 0, 0) + ciaddr
             + b"\0" * 12 + mac + b"\0" * 10 + b"\0" * 192
             + bytes.fromhex("63825363") + bytes([53, 1, mtype]) + opts + b"\xff")
        return m
    req = dhcp4(3, opts=bytes([50, 4, 10, 0, 2, 100, 54, 4, 10, 0, 2, 2]))
    add("guest_config_fuzzer", b"\x00" + rec(dhcp4(1)) + b"\x04\x00\x10" + b"\x00" + rec(req))
    add("guest_config_fuzzer", b"\x20" + rec(dhcp4(8, ciaddr=bytes([10, 0, 2, 100]))))
    add("guest_config_fuzzer", b"\x00" + rec(req) + b"\x60" + rec(dhcp4(7, ciaddr=bytes([10, 0, 2, 100]))))
    add("guest_config_fuzzer", b"\x00" + rec(dhcp4(4, opts=bytes([50, 4, 10, 0, 2, 100]))))
    duid = struct.pack("!HHH", 1, 10, 3) + mac
    info = bytes([11, 0xab, 0xcd, 0xef]) + struct.pack("!HH", 1, len(duid)) + duid + struct.pack("!HHH", 6, 2, 23)
    add("guest_config_fuzzer", b"\x01" + rec(info))
    slla = bytes([1, 1]) + mac
    add("guest_config_fuzzer", b"\x02" + rec(b"\0" * 4 + slla) + b"\x84\x00\x00\x05" + b"\x02" + rec(b"\0" * 4))
    add("guest_config_fuzzer", b"\x42" + rec(b"\0" * 4) + b"\x82\x40" + rec(b"\0" * 4 + slla))


def dns_forwarder_scripts():
    """dns_forwarder_fuzzer: four option bytes (upstreams: 1 = two, 2 =
    ::1 first; max_pending - 1; max_tcp_clients - 1; timeout in 500 ms
    steps past 1 s), then steps (see the target): 0 = UDP query (0x08:
    v6, 0x30: guest port), 1 = connect (0x08: v6), 2 = TCP bytes, 3 = TCP
    message (a connection byte, then the record), 4 = upstream datagram
    (0x08: upstream, 0x30: id from the input / a pending query / one
    retired / a pending query from its upstream, 0x80: QR set), 5 = the
    answer to a pending query (0x80: the newest) plus extra bytes, 6 =
    time (16-bit ms; 0x80: and seconds), 7 = close (0x30: close, abort,
    half-close). Real queries: A and AAAA for a name, with an EDNS OPT
    record, two TCP messages in one write and one split across three,
    and the malformed ones (a short header, QR=1 as a query)."""
    rec = lambda b: struct.pack("!H", len(b)) + b
    def name(n):
        return b"".join(bytes([len(p)]) + p for p in n.split(b".")) + b"\0"
    def query(qid, qtype, n=b"example.com", edns=True):
        q = struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 1 if edns else 0)
        q += name(n) + struct.pack("!HH", qtype, 1)
        if edns:  # OPT (RFC 6891): root name, type 41, 1232-byte payload
            q += b"\0" + struct.pack("!HHIH", 41, 1232, 0, 0)
        return q
    a, aaaa = query(0x1234, 1), query(0xbeef, 28, b"www.example.org")
    opts = lambda ups=0, pending=15, clients=3, timeout=2: bytes([ups, pending, clients, timeout])
    good = lambda newest=True: bytes([0x85 if newest else 0x05, 0]) + rec(struct.pack("!HI", 0xc00c, 0))
    t = lambda ms, s=None: (bytes([0x86]) + struct.pack("!HB", ms, s) if s is not None
                            else bytes([0x06]) + struct.pack("!H", ms))
    tcp = lambda *msgs: b"".join(struct.pack("!H", len(m)) + m for m in msgs)
    add("dns_forwarder_fuzzer", opts() + b"\x00" + rec(a) + good() + t(10))
    add("dns_forwarder_fuzzer", opts() + b"\x18" + rec(aaaa) + good() + b"\x28" + rec(a) + good(False) + good(False))
    # Two messages in one write, both answered, then a close.
    add("dns_forwarder_fuzzer", opts() + b"\x01" + b"\x02\x00" + rec(tcp(a, aaaa)) + good(False) + good(False) + b"\x07\x00")
    # One message split across three writes, answered, then a half-close.
    m = tcp(aaaa)
    add("dns_forwarder_fuzzer", opts() + b"\x09" + b"".join(b"\x02\x00" + rec(m[i:j]) for i, j in ((0, 1), (1, 9), (9, len(m)))) + good() + b"\x27\x00")
    # Malformed: a short header, QR=1 as a query, over UDP; over TCP a
    # response and then a message shorter than a header.
    resp = bytearray(a)
    resp[2] |= 0x80
    add("dns_forwarder_fuzzer", opts() + b"\x00" + rec(a[:5]) + b"\x00" + rec(bytes(resp)) + b"\x01\x03\x00" + rec(bytes(resp)))
    add("dns_forwarder_fuzzer", opts() + b"\x01\x03\x00" + rec(a) + b"\x03\x00" + rec(a[:7]) + good())
    # A timeout, then the late answer (a retired id) and an unknown one.
    add("dns_forwarder_fuzzer", opts() + b"\x00" + rec(a) + t(0, 10) + b"\xa4\x00" + rec(a[2:]) + b"\x84\x00\x12\x34" + rec(a[2:]))
    # Two upstreams: a timeout fails over to the second.
    add("dns_forwarder_fuzzer", opts(ups=1) + b"\x00" + rec(a) + t(0, 10) + b"\x10" + rec(aaaa) + good() + b"\xf4\x00" + rec(a[2:]))
    add("dns_forwarder_fuzzer", opts(ups=3) + b"\x08" + rec(aaaa) + good())
    # A full table (max_pending 1), and full TCP clients (1).
    add("dns_forwarder_fuzzer", opts(pending=0, clients=0) + b"\x00" + rec(a) + b"\x10" + rec(aaaa) + b"\x01\x09" + b"\x03\x00" + rec(a) + good())
    # Answered here, never forwarded (review 2026-12-06, finding 10): an
    # UPDATE (opcode 5) over UDP and TCP, no question, two questions.
    update = bytearray(a)
    update[2:4] = b"\x28\x00"
    noq = a[:4] + b"\0\0" + a[6:12]
    two = a[:5] + b"\x02" + a[6:] + name(b"b.test") + struct.pack("!HH", 1, 1)
    add("dns_forwarder_fuzzer", opts() + b"\x00" + rec(bytes(update)) + b"\x00" + rec(noq) + b"\x10" + rec(two)
        + b"\x01\x03\x00" + rec(bytes(update)) + b"\x03\x00" + rec(noq))
    # An answer to another question (dropped, then the real one), one in
    # other letters (the same question); over TCP another question ends the
    # query with SERVFAIL.
    other = query(0, 1, b"example.net")
    upper = query(0, 1, b"EXAMPLE.com")
    # 0x94: the pending query's id, QR set, then the record's bytes.
    add("dns_forwarder_fuzzer", opts() + b"\x00" + rec(a) + b"\x94\x00" + rec(other[2:]) + b"\x94\x00" + rec(upper[2:]))
    add("dns_forwarder_fuzzer", opts() + b"\x01\x03\x00" + rec(a) + b"\x94\x00" + rec(other[2:]) + b"\x03\x00" + rec(aaaa) + good())


def udp_flows_scripts():
    """udp_flows_fuzzer: two option bytes (max_flows - 1, idle timeout
    - 1 s), then steps (see the target): op 0 = guest datagram (0x04: v6;
    a byte: guest port 6000 + (b & 3), port 0 if b & 7 == 7, destination
    (b >> 3) % 5: peer 0, peer 1, the closed port 9, the gateway, port
    0), 2 = peer datagram (0x04: v6; a byte: 0x02 from the other peer,
    b >> 2 picks the flow), 3 = time (16-bit ms; 0x80: and seconds);
    payloads length-prefixed."""
    rec = lambda b: struct.pack("!H", len(b)) + b
    g = lambda v6, port, dst, p: bytes([0x04 if v6 else 0, port | (dst << 3)]) + rec(p)
    peer = lambda v6, other, flow, p: bytes([0x06 if v6 else 0x02, (flow << 2) | (2 if other else 0)]) + rec(p)
    t = lambda ms, sec=None: (bytes([0x83]) + struct.pack("!HB", ms, sec) if sec is not None
                              else bytes([0x03]) + struct.pack("!H", ms))
    q = struct.pack("!HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0) + b"\x07example\x03com\x00" + struct.pack("!HH", 1, 1)
    for v6 in (False, True):
        add("udp_flows_fuzzer", bytes([7, 2]) + g(v6, 0, 0, q) + peer(v6, False, 0, b"answer") + t(0, 2) + g(v6, 0, 0, b"again"))
        add("udp_flows_fuzzer", bytes([7, 2]) + g(v6, 0, 2, b"closed") + t(1) + g(v6, 0, 2, b"closed again") + t(1) + g(v6, 0, 2, b"x"))
        add("udp_flows_fuzzer", bytes([7, 2]) + g(v6, 1, 3, b"to the gateway") + g(v6, 1, 4, b"to port 0") + g(v6, 7, 0, b"from port 0"))
        add("udp_flows_fuzzer", bytes([0, 0]) + g(v6, 0, 0, b"one") + g(v6, 1, 1, b"two: over the limit") + t(0, 2) + g(v6, 1, 1, b"two again"))
        # The peer's answer keeps the flow alive: idle 3 s, answered at 2 s,
        # still open at 4 s.
        add("udp_flows_fuzzer", bytes([7, 2]) + g(v6, 0, 1, q) + t(0, 2) + peer(v6, False, 0, b"late answer") + t(0, 2) + peer(v6, False, 0, b"and another"))
        add("udp_flows_fuzzer", bytes([7, 4]) + g(v6, 0, 0, b"a") + g(v6, 2, 1, b"b") + peer(v6, True, 0, b"from the other peer") + peer(v6, False, 1, b"b's answer"))


def tcp_flows_scripts():
    """tcp_flows_fuzzer: two option bytes (o1: flow limit 1 + o1 % 8,
    guest timeout (o1 >> 3) % 8 s; o2 & 1: small per-flow buffers), then
    steps of an op byte (op % 9) and an argument byte (arg % flows picks
    the flow): 0 connect (arg & 1: IPv6; arg & 6 == 6: the refusing
    port), 1 guest write (16-bit length), 2 guest end ((arg >> 4) % 3:
    shutdown, Close, Abort), 3 host write (16-bit length), 4 host end
    ((arg >> 4) % 4: shutdown, close, close with RST, reading on/off),
    5 forged segment (see the target), 7 loss, 8 time (16-bit ms; arg
    0x80: and arg & 0x3f seconds)."""
    op = lambda o, arg=0, tail=b"": bytes([o, arg]) + tail
    n16 = lambda n: struct.pack("!H", n)
    rec = lambda b: struct.pack("!H", len(b)) + b
    def forged(flow, v6, kind, seq, ack, flags, window=0xFFFF, opts=b"", payload=b""):
        return op(5, flow, bytes([int(v6) | (kind << 1)])
                  + struct.pack("!IIBH", seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, flags, window) + rec(opts) + rec(payload))
    for v6 in (0, 1):
        # Bytes both ways, then each side's FIN.
        add("tcp_flows_fuzzer", bytes([7, 0]) + op(0, v6) + op(1, 0, n16(3000)) + op(3, 0, n16(5000))
            + op(2, 0x00) + op(4, 0x00) + op(8, 0x81, n16(0)))
        # A host that does not read, small buffers, a big write: the window closes.
        add("tcp_flows_fuzzer", bytes([7, 1]) + op(0, v6) + op(4, 0x30) + op(1, 0, n16(60000))
            + op(8, 0x82, n16(0)) + op(4, 0x30) + op(8, 0x81, n16(0)) + op(2, 0x00))
        # Refused port; a flow over the limit of 1; a guest abort; a host RST.
        add("tcp_flows_fuzzer", bytes([0, 0]) + op(0, v6 | 6) + op(0, v6) + op(8, 0x81, n16(0)))
        add("tcp_flows_fuzzer", bytes([7, 0]) + op(0, v6) + op(1, 0, n16(100)) + op(2, 0x20)
            + op(0, v6) + op(3, 1, n16(100)) + op(4, 0x21) + op(8, 0x83, n16(0)))
        # A guest that goes silent with a guest timeout of 2 s.
        add("tcp_flows_fuzzer", bytes([2 << 3 | 7, 0]) + op(0, v6) + op(3, 0, n16(2000)) + op(7, 0x3F)
            + op(3, 0, n16(2000)) + op(7, 0x3F) + op(8, 0x85, n16(0)))
        # Forged: an RST and data on a live flow, a SYN to the other
        # listener, a SYN to the refusing port.
        add("tcp_flows_fuzzer", bytes([7, 0]) + op(0, v6) + op(1, 0, n16(10))
            + forged(0, v6, 0, 0, 0, 0x04) + forged(0, v6, 0, 1, 0, 0x18, payload=b"injected")
            + forged(0, v6, 1, 1000, 0, 0x02, opts=bytes([2, 4, 5, 0xB4, 1, 1, 4, 2]))
            + forged(0, v6, 2, 1000, 0, 0x02) + op(8, 0x81, n16(0)))


def pcap_inspect_inputs():
    """pcap_inspect_fuzzer: a record header (number, seconds,
    microseconds, wire length) and the frame, for every captured frame."""
    for path in sorted(glob.glob(os.path.join(ROOT, "..", "tests", "testdata", "*.pcap"))):
        for i, frame in enumerate(frames(path)):
            add("pcap_inspect_fuzzer",
                struct.pack("!IIII", i + 1, 1700000000 + i, i * 1000, len(frame)) + frame)


def json_inputs():
    """tcp_benchmark_json_fuzzer: every JSON literal of the tcp_benchmark
    unit tests as a document (first byte 0), and as messages of a control
    stream (first byte 1: steps of a chunk and a Take, see the target)."""
    tests = ["json_test.cc", "iperf3_protocol_test.cc"]
    docs = []
    for name in tests:
        with open(os.path.join(ROOT, "..", "tools", "tcp_benchmark", name)) as f:
            text = f.read()
        # Adjacent raw strings are one literal, as in C++.
        for m in re.finditer(r'R"\((.*?)\)"(?:\s*R"\((.*?)\)")*', text, re.S):
            parts = re.findall(r'R"\((.*?)\)"', m.group(0), re.S)
            docs.append("".join(parts).encode())
    for doc in docs:
        add("tcp_benchmark_json_fuzzer", b"\x00" + doc)
    # A control stream: cookie, PARAM_EXCHANGE, a JSON message, a state,
    # SERVER_ERROR's two int32s, each in one chunk with its Take.
    step = lambda take, chunk: bytes([(len(chunk) << 2) | take]) + chunk
    cookie = b"abcdefghijklmnopqrstuvwxyz0123456789\0"
    for doc in docs[:8]:
        msg = struct.pack("!I", len(doc)) + doc
        stream = (step(2, cookie) + step(0, b"\x09")
                  + b"".join(step(3, msg[i:i + 60]) for i in range(0, len(msg), 60))
                  + step(0, b"\xfe") + step(1, struct.pack("!i", 131)) + step(1, struct.pack("!i", 0)))
        add("tcp_benchmark_json_fuzzer", b"\x01" + stream)


def main():
    for path in sorted(glob.glob(os.path.join(ROOT, "..", "tests", "testdata", "*.pcap"))):
        for frame in frames(path):
            split(frame)
    stack_scripts()
    handmade()
    tcp_conn_scripts()
    unix_stream_scripts()
    guest_config_scripts()
    dns_forwarder_scripts()
    udp_flows_scripts()
    tcp_flows_scripts()
    pcap_inspect_inputs()
    json_inputs()
    for target, items in sorted(seeds.items()):
        d = os.path.join(ROOT, "corpus", target)
        os.makedirs(d, exist_ok=True)
        # Prefer variety: smallest and largest first, then the rest.
        chosen = sorted(items.items(), key=lambda kv: (len(kv[1]), kv[0]))
        if len(chosen) > MAX_PER_TARGET:
            step = len(chosen) / MAX_PER_TARGET
            chosen = [chosen[int(i * step)] for i in range(MAX_PER_TARGET)]
        for name, data in chosen:
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
        print(f"{target}: {len(chosen)} seeds")


if __name__ == "__main__":
    main()
