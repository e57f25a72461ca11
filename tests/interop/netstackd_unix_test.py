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

    def test_another_user_is_refused_and_counted(self):
        """An abstract socket has no permissions: any local user may
        connect. netstackd takes only its own uid (or root) as the guest
        (review 2026-12-06, finding 11) and says so in its counters."""
        if os.geteuid() != 0:
            self.skipTest("needs root, to connect as uid 65534")
        name = f"@nst-unix-test-{os.getpid()}"
        tmp = tempfile.mkdtemp(prefix="nst-unix-")
        log_path = os.path.join(tmp, "log")
        log = open(log_path, "w")
        proc = subprocess.Popen([NETSTACKD, "--unix", name,
                                 "--addr", "10.9.0.2/24"],
                                stdout=log, stderr=log)
        try:
            abstract = "\0" + name[1:]

            def connect_as_nobody():
                # In a child, so that this process keeps its uid.
                r, w = os.pipe()
                pid = os.fork()
                if pid == 0:
                    try:
                        os.setgid(65534)
                        os.setuid(65534)
                        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                        s.settimeout(5)
                        s.connect(abstract)
                        s.sendall(struct.pack("!I", len(arp_request())) +
                                  arp_request())
                        got = s.recv(65536)
                        os.write(w, b"closed" if not got else b"guest")
                    except (ConnectionResetError, BrokenPipeError):
                        # Closed before or after our frame went.
                        os.write(w, b"closed")
                    except OSError as e:
                        os.write(w, f"error {e}".encode())
                    os._exit(0)
                os.close(w)
                os.waitpid(pid, 0)
                out = os.read(r, 100).decode()
                os.close(r)
                return out

            self.assertTrue(iu.wait_for(
                lambda: proc.poll() is not None or
                os.system(f"ss -xl | grep -q '{name}'") == 0, timeout=10))
            self.assertEqual(connect_as_nobody(), "closed",
                             "another user became the guest")
            peer = UnixPeer(abstract)
            peer.send(arp_request())
            self.assertEqual(peer.recv()[12:14], b"\x08\x06")
            proc.send_signal(signal.SIGTERM)
            self.assertEqual(proc.wait(timeout=10), 0)
            with open(log_path) as f:
                out = f.read()
            self.assertIn("link.stream.refused_peers 1\n", out)
            self.assertIn("link.stream.connections 1\n", out)
            peer.sock.close()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()
            for f in os.listdir(tmp):
                os.unlink(os.path.join(tmp, f))
            os.rmdir(tmp)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
