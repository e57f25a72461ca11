"""interop_util's tshark checks: a random payload that tshark would take for
another protocol (and call malformed) is not reported, while a frame whose
own headers are wrong still is. CI once failed on a UDP echo datagram that
tshark's Thrift heuristic "decoded"."""
import os
import struct
import tempfile
import unittest

import interop_util as iu

ERRORS = "_ws.malformed || _ws.expert.severity == 8388608"


def udp_frame(payload, ip_total_length=None):
    src, dst = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
    udp = struct.pack("!HHHH", 40000, 40001, 8 + len(payload), 0) + payload
    pseudo = src + dst + struct.pack("!BBH", 0, 17, len(udp))
    udp = udp[:6] + struct.pack("!H", iu.checksum(pseudo + udp)) + udp[8:]
    total = ip_total_length if ip_total_length else 20 + len(udp)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, total, 1, 0, 64, 17, 0, src,
                     dst)
    ip = ip[:10] + struct.pack("!H", iu.checksum(ip)) + ip[12:]
    return b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00" + ip + udp


def write_pcap(path, frames):
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for n, frame in enumerate(frames):
            f.write(struct.pack("<IIII", n, 0, len(frame), len(frame)) + frame)


class TsharkChecks(unittest.TestCase):
    def setUp(self):
        self.assertTrue(iu.have("tshark"), "tshark is not installed "
                        "(tools/dev/install-deps installs it)")
        fd, self.pcap = tempfile.mkstemp(suffix=".pcap")
        os.close(fd)
        # 1: a payload shaped like a Thrift ONEWAY call, cut short.
        thrift = (b"\x80\x01\x00\x04" + struct.pack("!I", 4) + b"ping" +
                  struct.pack("!I", 1) + b"\x0b\x00\x01\xff\xff\xff\xff")
        # 2: an IPv4 header claiming more bytes than the frame holds.
        write_pcap(self.pcap, [udp_frame(thrift),
                               udp_frame(b"x" * 10, ip_total_length=500)])

    def tearDown(self):
        os.unlink(self.pcap)

    def test_plain_tshark_flags_the_lookalike(self):
        # Without the flags the trap is real: frame 1 is an "error".
        out = iu.run("tshark", "-n", "-r", self.pcap, "-Y", ERRORS, "-T",
                     "fields", "-e", "frame.number", check=False).stdout
        self.assertEqual(out.split(), ["1", "2"])

    def test_checks_report_only_our_headers(self):
        rows = iu.tshark_lines(self.pcap, ERRORS, ["frame.number"])
        self.assertEqual(rows, [["2"]])

    def test_http_and_dns_stay_dissected(self):
        flags = iu.tshark_no_heuristics()
        self.assertIn("thrift", flags)
        self.assertNotIn("http", flags)
        self.assertNotIn("dns", flags)


if __name__ == "__main__":
    unittest.main()
