"""Frames for the conformance suite's peer: building and parsing Ethernet,
ARP, IPv4, IPv6 (with extension headers and fragments), TCP (with
options), UDP, ICMPv4 and ICMPv6/NDP. Written for this suite (no scapy):
the peer must be able to build anything a hostile peer would, including
wrong checksums, odd options and overlapping fragments.

Parsing is tolerant: a frame it does not understand is returned with the
layers it could read, never an exception on bad input from the DUT.
"""
import ipaddress
import struct

ETH_IPV4, ETH_ARP, ETH_IPV6 = 0x0800, 0x0806, 0x86DD
PROTO_ICMP, PROTO_TCP, PROTO_UDP, PROTO_ICMPV6 = 1, 6, 17, 58
PROTO_HOPOPTS, PROTO_ROUTING, PROTO_FRAGMENT, PROTO_DSTOPTS = 0, 43, 44, 60
PROTO_NONE = 59

FIN, SYN, RST, PSH, ACK, URG, ECE, CWR = 1, 2, 4, 8, 16, 32, 64, 128
FLAG_NAMES = [(FIN, "F"), (SYN, "S"), (RST, "R"), (PSH, "P"), (ACK, "A"),
              (URG, "U"), (ECE, "E"), (CWR, "C")]

OPT_EOL, OPT_NOP, OPT_MSS, OPT_WSCALE, OPT_SACK_OK, OPT_SACK, OPT_TS = (
    0, 1, 2, 3, 4, 5, 8)


def flag_str(flags):
    return "".join(n for b, n in FLAG_NAMES if flags & b) or "."


def mac_bytes(mac):
    return bytes(int(x, 16) for x in mac.split(":"))


def mac_str(b):
    return ":".join(f"{x:02x}" for x in b)


def checksum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def ip_bytes(addr):
    return ipaddress.ip_address(addr).packed


def pseudo_header(src, dst, proto, length):
    s, d = ip_bytes(src), ip_bytes(dst)
    if len(s) == 4:
        return s + d + struct.pack("!BBH", 0, proto, length)
    return s + d + struct.pack("!IxxxB", length, proto)


# --- building -------------------------------------------------------------

def tcp_options(opts):
    """[(kind, value)] to bytes, padded to 4 with NOPs in front of EOL.
    Values: MSS int, WSCALE int, SACK_OK None, TS (val, ecr), SACK
    [(left, right)], NOP None, or raw bytes for any kind."""
    out = b""
    for kind, v in opts:
        if kind in (OPT_NOP, OPT_EOL):
            out += bytes([kind])
        elif isinstance(v, (bytes, bytearray)):
            out += bytes([kind, len(v) + 2]) + bytes(v)
        elif kind == OPT_MSS:
            out += struct.pack("!BBH", kind, 4, v)
        elif kind == OPT_WSCALE:
            out += struct.pack("!BBB", kind, 3, v)
        elif kind == OPT_SACK_OK:
            out += struct.pack("!BB", kind, 2)
        elif kind == OPT_TS:
            out += struct.pack("!BBII", kind, 10, v[0] & 0xFFFFFFFF,
                               v[1] & 0xFFFFFFFF)
        elif kind == OPT_SACK:
            out += struct.pack("!BB", kind, 2 + 8 * len(v))
            for l, r in v:
                out += struct.pack("!II", l & 0xFFFFFFFF, r & 0xFFFFFFFF)
        else:
            raise ValueError(kind)
    while len(out) % 4:
        out += b"\0"
    return out


def tcp_segment(src, dst, sport, dport, seq, ack, flags, window=65535,
                options=(), payload=b"", urg=0, bad_checksum=False):
    opts = tcp_options(options)
    off = (20 + len(opts)) // 4
    hdr = struct.pack("!HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF,
                      ack & 0xFFFFFFFF, off << 4, flags, window, 0, urg)
    seg = hdr + opts + payload
    c = checksum(pseudo_header(src, dst, PROTO_TCP, len(seg)) + seg)
    if bad_checksum:
        c ^= 0x1234
    return seg[:16] + struct.pack("!H", c) + seg[18:]


def udp_datagram(src, dst, sport, dport, payload):
    n = 8 + len(payload)
    hdr = struct.pack("!HHHH", sport, dport, n, 0)
    c = checksum(pseudo_header(src, dst, PROTO_UDP, n) + hdr + payload)
    return struct.pack("!HHHH", sport, dport, n, c or 0xFFFF) + payload


def ipv4_packet(src, dst, proto, payload, ttl=64, ident=1, df=True,
                mf=False, frag_offset=0, total_length=None):
    flags = (0x4000 if df else 0) | (0x2000 if mf else 0) | (frag_offset >> 3)
    n = total_length if total_length is not None else 20 + len(payload)
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, n, ident, flags, ttl, proto,
                      0, ip_bytes(src), ip_bytes(dst))
    hdr = hdr[:10] + struct.pack("!H", checksum(hdr)) + hdr[12:]
    return hdr + payload


def ipv6_packet(src, dst, next_header, payload, hop_limit=64):
    hdr = struct.pack("!IHBB16s16s", 6 << 28, len(payload), next_header,
                      hop_limit, ip_bytes(src), ip_bytes(dst))
    return hdr + payload


def ipv6_ext_options(next_header, options):
    """A Hop-by-Hop or Destination Options header: `options` are raw option
    bytes (type, len, data), padded with PadN to a multiple of 8."""
    body = bytes(options)
    total = 2 + len(body)
    pad = (-total) % 8
    if pad == 1:
        body += b"\0"
    elif pad:
        body += bytes([1, pad - 2]) + b"\0" * (pad - 2)
    return bytes([next_header, (2 + len(body)) // 8 - 1]) + body


def ipv6_fragment_header(next_header, offset, more, ident):
    return struct.pack("!BBHI", next_header, 0, (offset & ~7) | (1 if more else 0),
                       ident)


def icmpv4(type_, code, rest, body):
    msg = struct.pack("!BBH", type_, code, 0) + rest + body
    return msg[:2] + struct.pack("!H", checksum(msg)) + msg[4:]


def icmpv6(src, dst, type_, code, body):
    msg = struct.pack("!BBH", type_, code, 0) + body
    c = checksum(pseudo_header(src, dst, PROTO_ICMPV6, len(msg)) + msg)
    return msg[:2] + struct.pack("!H", c) + msg[4:]


def ether(dst_mac, src_mac, ethertype, payload):
    return mac_bytes(dst_mac) + mac_bytes(src_mac) + struct.pack(
        "!H", ethertype) + payload


def arp_reply(our_mac, our_ip, their_mac, their_ip):
    body = struct.pack("!HHBBH6s4s6s4s", 1, ETH_IPV4, 6, 4, 2,
                       mac_bytes(our_mac), ip_bytes(our_ip),
                       mac_bytes(their_mac), ip_bytes(their_ip))
    return ether(their_mac, our_mac, ETH_ARP, body)


def neighbor_advert(our_mac, our_ip, their_mac, their_ip):
    body = struct.pack("!I16s", 0x60000000, ip_bytes(our_ip))  # S, O
    body += bytes([2, 1]) + mac_bytes(our_mac)  # target link-layer address
    msg = icmpv6(our_ip, their_ip, 136, 0, body)
    return ether(their_mac, our_mac, ETH_IPV6,
                 ipv6_packet(our_ip, their_ip, PROTO_ICMPV6, msg,
                             hop_limit=255))


# --- parsing --------------------------------------------------------------

class Tcp:
    def __init__(self, b):
        (self.sport, self.dport, self.seq, self.ack, off, self.flags,
         self.window, self.csum, self.urg) = struct.unpack("!HHIIBBHHH", b[:20])
        hlen = (off >> 4) * 4
        self.options = parse_tcp_options(b[20:hlen])
        self.payload = bytes(b[hlen:])

    def opt(self, kind):
        for k, v in self.options:
            if k == kind:
                return v
        return None

    def has(self, kind):
        return any(k == kind for k, _ in self.options)

    def __repr__(self):
        return (f"TCP {self.sport}>{self.dport} [{flag_str(self.flags)}] "
                f"seq={self.seq} ack={self.ack} win={self.window} "
                f"len={len(self.payload)} opts={self.options}")


def parse_tcp_options(b):
    out = []
    i = 0
    while i < len(b):
        kind = b[i]
        if kind == OPT_EOL:
            break
        if kind == OPT_NOP:
            i += 1
            continue
        if i + 1 >= len(b) or b[i + 1] < 2:
            break
        n = b[i + 1]
        data = bytes(b[i + 2:i + n])
        if kind == OPT_MSS and len(data) == 2:
            v = struct.unpack("!H", data)[0]
        elif kind == OPT_WSCALE and len(data) == 1:
            v = data[0]
        elif kind == OPT_TS and len(data) == 8:
            v = struct.unpack("!II", data)
        elif kind == OPT_SACK:
            v = [struct.unpack("!II", data[j:j + 8])
                 for j in range(0, len(data) - 7, 8)]
        elif kind == OPT_SACK_OK:
            v = None
        else:
            v = data
        out.append((kind, v))
        i += n
    return out


class Frame:
    """What the peer received: the layers it could parse. Attributes that
    do not apply are None."""

    def __init__(self, raw):
        self.raw = raw
        self.eth_dst = mac_str(raw[0:6]) if len(raw) >= 14 else None
        self.eth_src = mac_str(raw[6:12]) if len(raw) >= 14 else None
        self.ethertype = struct.unpack("!H", raw[12:14])[0] if len(raw) >= 14 else 0
        self.arp = None
        self.family = None
        self.src = self.dst = None
        self.proto = None
        self.ttl = None
        self.ip_id = None
        self.df = None
        self.frag = None  # (offset, more, ident) when a fragment
        self.ip_payload = None
        self.tcp = self.udp = self.icmp = None
        try:
            self._parse()
        except (struct.error, ValueError, IndexError):
            pass

    def _parse(self):
        b = self.raw[14:]
        if self.ethertype == ETH_ARP:
            (_, _, _, _, op, sha, spa, tha, tpa) = struct.unpack(
                "!HHBBH6s4s6s4s", b[:28])
            self.arp = (op, mac_str(sha), str(ipaddress.ip_address(spa)),
                        str(ipaddress.ip_address(tpa)))
            return
        if self.ethertype == ETH_IPV4:
            self.family = 4
            ihl = (b[0] & 15) * 4
            total, = struct.unpack("!H", b[2:4])
            self.ip_id, fl = struct.unpack("!HH", b[4:8])
            self.df = bool(fl & 0x4000)
            if fl & 0x3FFF & ~0x4000:
                self.frag = ((fl & 0x1FFF) * 8, bool(fl & 0x2000), self.ip_id)
            self.ttl, self.proto = b[8], b[9]
            self.src = str(ipaddress.ip_address(b[12:16]))
            self.dst = str(ipaddress.ip_address(b[16:20]))
            payload = b[ihl:total]
        elif self.ethertype == ETH_IPV6:
            self.family = 6
            plen, nh, self.ttl = struct.unpack("!HBB", b[4:8])
            self.src = str(ipaddress.ip_address(b[8:24]))
            self.dst = str(ipaddress.ip_address(b[24:40]))
            payload = b[40:40 + plen]
            while nh in (PROTO_HOPOPTS, PROTO_ROUTING, PROTO_DSTOPTS,
                         PROTO_FRAGMENT):
                if nh == PROTO_FRAGMENT:
                    off, ident = struct.unpack("!HI", payload[2:8])
                    self.frag = (off & ~7, bool(off & 1), ident)
                    nh = payload[0]
                    payload = payload[8:]
                    break
                n = (payload[1] + 1) * 8
                nh = payload[0]
                payload = payload[n:]
            self.proto = nh
        else:
            return
        self.ip_payload = bytes(payload)
        if self.frag and self.frag[0] != 0:
            return
        if self.proto == PROTO_TCP and len(payload) >= 20:
            self.tcp = Tcp(payload)
        elif self.proto == PROTO_UDP and len(payload) >= 8:
            sport, dport, n, _ = struct.unpack("!HHHH", payload[:8])
            self.udp = (sport, dport, bytes(payload[8:n]))
        elif self.proto in (PROTO_ICMP, PROTO_ICMPV6) and len(payload) >= 4:
            self.icmp = (payload[0], payload[1], bytes(payload[4:]))

    def __repr__(self):
        if self.tcp:
            return f"IPv{self.family} {self.src}>{self.dst} {self.tcp!r}"
        if self.udp:
            return (f"IPv{self.family} UDP {self.src}:{self.udp[0]}>"
                    f"{self.dst}:{self.udp[1]} len={len(self.udp[2])}")
        if self.icmp:
            return (f"IPv{self.family} ICMP {self.src}>{self.dst} "
                    f"type={self.icmp[0]} code={self.icmp[1]}")
        if self.arp:
            return f"ARP {self.arp}"
        return f"frame type=0x{self.ethertype:04x} len={len(self.raw)}"
