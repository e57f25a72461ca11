#!/usr/bin/env python3
"""pcap_inspect --json agrees with tshark on every packet.

For each shipped capture tests/testdata/X.pcap, X.tshark.tsv holds tshark's
field output, taken when the fixture was made (tests/testdata/README.md).
This test runs pcap_inspect --json on the capture and checks, packet by
packet, that every field tshark decoded (addresses, ports, seq/ack, flags,
window, payload length, checksum status, ICMP types) is present in our
output with the same value, and that we decoded no transport layer that
tshark did not see.
"""
import ipaddress
import json
import os
import subprocess
import sys
import unittest

RUNFILES = os.environ.get("TEST_SRCDIR", "")
WORKSPACE = os.environ.get("TEST_WORKSPACE", "netstack")


def runfile(path):
    return os.path.join(RUNFILES, WORKSPACE, path)


def read_tsv(path):
    with open(path, encoding="utf-8") as f:
        lines = [l.rstrip("\n") for l in f if l.strip()]
    header = lines[0].split("\t")
    rows = []
    for line in lines[1:]:
        cells = line.split("\t")
        cells += [""] * (len(header) - len(cells))
        rows.append(dict(zip(header, cells)))
    return rows


def v6(text):
    return ipaddress.IPv6Address(text)


# tshark field -> (extractor of our value from the JSON object, converter
# of tshark's text to the same type).
def get(obj, *path):
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


def ip_field(version, key):
    def extract(p):
        if get(p, "ip", "version") != version:
            return None
        return get(p, "ip", key)
    return extract


def checksum_status(p):
    return get(p, "tcp", "checksum_valid")


FIELDS = {
    "frame.number": (lambda p: p["frame"], int),
    "eth.src": (lambda p: get(p, "eth", "src"), str.lower),
    "eth.dst": (lambda p: get(p, "eth", "dst"), str.lower),
    "eth.type": (lambda p: get(p, "eth", "type"), lambda s: int(s, 16)),
    "arp.opcode": (lambda p: get(p, "arp", "op"), int),
    "arp.src.proto_ipv4": (lambda p: get(p, "arp", "sender_ip"), str),
    "arp.dst.proto_ipv4": (lambda p: get(p, "arp", "target_ip"), str),
    "ip.src": (ip_field(4, "src"), str),
    "ip.dst": (ip_field(4, "dst"), str),
    "ip.proto": (ip_field(4, "proto"), int),
    "ipv6.src": (lambda p: v6(ip_field(6, "src")(p)) if ip_field(6, "src")(p) else None, v6),
    "ipv6.dst": (lambda p: v6(ip_field(6, "dst")(p)) if ip_field(6, "dst")(p) else None, v6),
    "ipv6.nxt": (ip_field(6, "next_header"), int),
    "tcp.srcport": (lambda p: get(p, "tcp", "src_port"), int),
    "tcp.dstport": (lambda p: get(p, "tcp", "dst_port"), int),
    "tcp.seq_raw": (lambda p: get(p, "tcp", "seq"), int),
    "tcp.ack_raw": (lambda p: get(p, "tcp", "ack"), int),
    "tcp.flags": (lambda p: get(p, "tcp", "flags_raw"), lambda s: int(s, 16)),
    "tcp.window_size_value": (lambda p: get(p, "tcp", "window"), int),
    "tcp.len": (lambda p: get(p, "tcp", "payload_len"), int),
    # tshark: 0 = bad, 1 = good, 2 = unverified.
    "tcp.checksum.status": (checksum_status,
                            lambda s: {"0": False, "1": True, "Bad": False,
                                       "Good": True}.get(s)),
    "udp.srcport": (lambda p: get(p, "udp", "src_port"), int),
    "udp.dstport": (lambda p: get(p, "udp", "dst_port"), int),
    "icmp.type": (lambda p: get(p, "icmp", "type"), int),
    "icmpv6.type": (lambda p: get(p, "icmpv6", "type"), int),
}

# Layers we decode, keyed by a tshark field that is present iff tshark
# decoded that layer.
LAYER_KEYS = {"tcp": "tcp.srcport", "udp": "udp.srcport", "arp": "arp.opcode",
              "icmp": "icmp.type", "icmpv6": "icmpv6.type"}


class PcapInspectAgreesWithTshark(unittest.TestCase):
    def compare(self, name):
        pcap = runfile(f"tests/testdata/{name}.pcap")
        rows = read_tsv(runfile(f"tests/testdata/{name}.tshark.tsv"))
        out = subprocess.run(
            [runfile("tools/pcap_inspect/pcap_inspect"), "--json", pcap],
            check=True, capture_output=True, text=True).stdout
        packets = json.loads(out)
        self.assertEqual(len(packets), len(rows), "frame count differs")
        self.assertGreater(len(rows), 5, "fixture unexpectedly small")
        compared = 0
        for row, pkt in zip(rows, packets):
            where = f"{name} frame {row.get('frame.number')}"
            self.assertNotIn("error", pkt, f"{where}: we failed to decode")
            for field, value in row.items():
                if field not in FIELDS:
                    self.fail(f"unknown tshark column {field}")
                if value == "":
                    continue
                extract, convert = FIELDS[field]
                want = convert(value)
                if want is None:  # e.g. checksum "unverified"
                    continue
                got = extract(pkt)
                self.assertEqual(got, want, f"{where}: {field}")
                compared += 1
            for layer, key in LAYER_KEYS.items():
                if key in row and row[key] == "":
                    self.assertNotIn(layer, pkt,
                                     f"{where}: we decoded {layer}, tshark did not")
        return compared, len(rows)

    def test_captures(self):
        names = [n for n in sys.argv[1:] if not n.startswith("-")] or \
            os.environ.get("PCAPS", "").split()
        self.assertTrue(names, "no captures named")
        total = 0
        for name in names:
            with self.subTest(capture=name):
                compared, frames = self.compare(name)
                print(f"{name}: {frames} frames, {compared} fields agree")
                total += compared
        self.assertGreater(total, 100)


    def test_summary_counts_layers_as_tshark_does(self):
        """--summary's per-layer counts match tshark's decode of the same
        capture: frames with a TCP/UDP layer, and none failed."""
        names = [n for n in sys.argv[1:] if not n.startswith("-")] or \
            os.environ.get("PCAPS", "").split()
        for name in names:
            with self.subTest(capture=name):
                rows = read_tsv(runfile(f"tests/testdata/{name}.tshark.tsv"))
                p = subprocess.run(
                    [runfile("tools/pcap_inspect/pcap_inspect"), "--summary",
                     runfile(f"tests/testdata/{name}.pcap")],
                    check=True, capture_output=True, text=True)
                counts = {}
                for line in p.stderr.splitlines():
                    parts = line.split()
                    if len(parts) == 3 and parts[0] == "layer":
                        counts[parts[1]] = int(parts[2])
                self.assertIn(f"{len(rows)} frames, 0 failed to decode",
                              p.stderr)
                self.assertEqual(sum(counts.values()), len(rows), p.stderr)
                for layer in ("tcp", "udp"):
                    key = LAYER_KEYS[layer]
                    want = sum(1 for r in rows if r.get(key, "") != "")
                    self.assertEqual(counts.get(layer, 0), want,
                                     f"{layer}: {p.stderr}")
                self.assertIn("bad transport checksums", p.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
