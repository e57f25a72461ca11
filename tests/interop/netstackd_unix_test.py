#!/usr/bin/env python3
"""netstackd --unix: a VM-style peer on a UNIX stream socket (4-byte
big-endian length prefix per frame, as QEMU's -netdev stream) resolves
netstackd with ARP and pings it 200 times; every reply is checked byte by
byte (type, identifier, sequence, data, IP and ICMP checksums)."""
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest

from tests.interop import interop_util as iu

RUNFILES = os.environ.get("TEST_SRCDIR", "")
WORKSPACE = os.environ.get("TEST_WORKSPACE", "netstack")
NETSTACKD = os.path.join(RUNFILES, WORKSPACE, "tools/netstackd/netstackd")

PEER_MAC = bytes.fromhex("020000000001")
PEER_IP = socket.inet_aton("10.9.0.1")
STACK_IP = socket.inet_aton("10.9.0.2")


def eth(dst, src, ethertype, payload):
    return dst + src + struct.pack("!H", ethertype) + payload


def arp_request():
    body = struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + PEER_MAC + PEER_IP + \
        b"\0" * 6 + STACK_IP
    return eth(b"\xff" * 6, PEER_MAC, 0x0806, body)


def ipv4(proto, payload, ident):
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), ident, 0,
                      64, proto, 0, PEER_IP, STACK_IP)
    hdr = hdr[:10] + struct.pack("!H", iu.checksum(hdr)) + hdr[12:]
    return hdr + payload


def echo_request(ident, seq, data):
    msg = struct.pack("!BBHHH", 8, 0, 0, ident, seq) + data
    return msg[:2] + struct.pack("!H", iu.checksum(msg)) + msg[4:]


class UnixPeer:
    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(5)
        self.sock.connect(path)
        self.buf = b""

    def send(self, frame):
        self.sock.sendall(struct.pack("!I", len(frame)) + frame)

    def recv(self):
        while True:
            if len(self.buf) >= 4:
                n = struct.unpack("!I", self.buf[:4])[0]
                if len(self.buf) >= 4 + n:
                    frame, self.buf = self.buf[4:4 + n], self.buf[4 + n:]
                    return frame
            chunk = self.sock.recv(65536)
            if not chunk:
                raise AssertionError("netstackd closed the stream")
            self.buf += chunk


class NetstackdUnix(unittest.TestCase):
    def test_arp_and_ping_over_unix_stream(self):
        tmp = tempfile.mkdtemp(prefix="nst-unix-")
        path = os.path.join(tmp, "vm.sock")
        log_path = os.path.join(tmp, "log")
        log = open(log_path, "w")
        proc = subprocess.Popen([NETSTACKD, "--unix", path,
                                 "--addr", "10.9.0.2/24"],
                                stdout=log, stderr=log)
        try:
            deadline = time.time() + 10
            while not os.path.exists(path):
                self.assertIsNone(proc.poll(), "netstackd exited early")
                self.assertLess(time.time(), deadline, "no socket")
                time.sleep(0.05)
            peer = UnixPeer(path)
            peer.send(arp_request())
            reply = peer.recv()
            self.assertEqual(reply[12:14], b"\x08\x06")
            self.assertEqual(reply[0:6], PEER_MAC)
            stack_mac = reply[6:12]
            self.assertEqual(struct.unpack("!H", reply[20:22])[0], 2)  # reply
            self.assertEqual(reply[28:32], STACK_IP)
            for seq in range(200):
                data = bytes((seq + i) & 0xFF for i in range(56 + seq))
                peer.send(eth(stack_mac, PEER_MAC, 0x0800,
                              ipv4(1, echo_request(0x77, seq, data), seq)))
                f = peer.recv()
                self.assertEqual(f[0:6], PEER_MAC)
                self.assertEqual(f[12:14], b"\x08\x00")
                ip = f[14:]
                self.assertEqual(iu.checksum(ip[:20]), 0, "IP checksum")
                self.assertEqual(ip[12:16], STACK_IP)
                self.assertEqual(ip[16:20], PEER_IP)
                icmp = ip[20:struct.unpack("!H", ip[2:4])[0]]
                self.assertEqual(iu.checksum(icmp), 0, "ICMP checksum")
                t, code, _, ident, s = struct.unpack("!BBHHH", icmp[:8])
                self.assertEqual((t, code, ident, s), (0, 0, 0x77, seq))
                self.assertEqual(icmp[8:], data)
            proc.send_signal(signal.SIGTERM)
            self.assertEqual(proc.wait(timeout=10), 0)
            with open(log_path) as f:
                out = f.read()
            self.assertIn("icmpv4_echo_replies_sent 200", out)
            self.assertFalse(os.path.exists(path), "socket file left behind")
            peer.sock.close()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()
            for name in os.listdir(tmp):
                os.unlink(os.path.join(tmp, name))
            os.rmdir(tmp)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
