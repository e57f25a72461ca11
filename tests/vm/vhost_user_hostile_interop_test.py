#!/usr/bin/env python3
"""A hostile guest on netstackd --backend --vhost-user (issue #35).

This file plays QEMU and a broken or hostile guest driver in Python: guest
memory is a memfd, sent to netstackd with SET_MEM_TABLE over the vhost-user
socket (docs/interop/vhost-user.rst in QEMU's tree; the same layout as the
C++ fake front-end in link/vhost_user_endpoint_test.cc). On the TX queue the
guest posts chains netstackd must refuse: a head index past the queue, a
descriptor outside guest memory, a descriptor loop, a length that runs past
the region's end, a length past any frame, and virtio-net headers that lie
(GSO without NEEDS_CSUM, csum_start past the frame). Each is kicked on its
own. Then a good ARP request for the gateway 10.0.2.2 must be answered in
the RX queue. The counters must name each refusal
(link.vhost_user.from_guest_chain_refused.REASON,
.from_guest_vnet_refused.REASON). netstackd must still be alive, and a
second front-end must be served after the first one disconnects.

netstackd runs in namespace H of backend_topology.py, which has no default
route (assert_isolated). The front-end connects to its socket in /tmp.
Namespaces, netstackd and the socket directory are removed whatever
happens. Needs root.

The front-end writes the ring indices netstackd reads concurrently (the
avail index) as one 16-bit store, as a driver does. struct.pack_into does
not: it zeroes its target before it writes the value, and netstackd reading
0 there sees an index that ran more than the queue size ahead
(queue_broken), and reads that ring no more. That made one CI run of the
refusal test see 4 of its 6 chains come back;
test_republished_avail_index_is_read_whole checks it.
"""
import mmap
import os
import select
import shutil
import signal
import socket
import struct
import sys
import tempfile
import time
import unittest

from tests.backend.backend_topology import BackendTopology
from tests.interop import interop_util as iu

# vhost-user requests (vhost-user.rst, "Front-end message types").
GET_FEATURES, SET_FEATURES, SET_OWNER = 1, 2, 3
SET_MEM_TABLE = 5
SET_VRING_NUM, SET_VRING_ADDR, SET_VRING_BASE = 8, 9, 10
SET_VRING_KICK, SET_VRING_CALL = 12, 13
GET_PROTOCOL_FEATURES, SET_PROTOCOL_FEATURES = 15, 16
SET_VRING_ENABLE = 18
VERSION, FLAG_REPLY, FLAG_NEED_REPLY = 0x1, 1 << 2, 1 << 3
PROTOCOL_F_REPLY_ACK = 3

# virtio-net feature bits (virtio 1.x 5.1.3).
F_CSUM, F_HOST_TSO4, F_MRG_RXBUF = 0, 11, 15
F_PROTOCOL_FEATURES, F_VERSION_1 = 30, 32
FEATURES = sum(1 << b for b in (F_CSUM, F_HOST_TSO4, F_MRG_RXBUF,
                                F_PROTOCOL_FEATURES, F_VERSION_1))

# Split virtqueue descriptor flags (virtio 1.x 2.7.5).
DESC_NEXT, DESC_WRITE = 1, 2

# Guest memory: at guest-physical GPA, "QEMU's" address UVA; the rings of
# queue q at q * RING_AREA (descriptors, avail, used), then buffers.
GPA, UVA = 0x100000, 0x7F0012340000
MEM_SIZE = 4 << 20
QSIZE = 256
RING_AREA = 16384
DESC_OFF, AVAIL_OFF, USED_OFF = 0, 4096, 8192
BUF_AREA = 2 * RING_AREA
RX, TX = 0, 1
VNET_HDR = 12  # virtio_net_hdr_mrg_rxbuf: VERSION_1 and MRG_RXBUF

GUEST_MAC = bytes.fromhex("525400123456")
GUEST_IP, GATEWAY = bytes([10, 0, 2, 100]), bytes([10, 0, 2, 2])


def arp_request():
    """Who has 10.0.2.2, from the guest: Ethernet + ARP (RFC 826), padded
    to the 60-byte minimum."""
    eth = b"\xff" * 6 + GUEST_MAC + b"\x08\x06"
    arp = struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, 1, GUEST_MAC,
                      GUEST_IP, b"\0" * 6, GATEWAY)
    return (eth + arp).ljust(60, b"\0")


def vnet_hdr(flags=0, gso_type=0, hdr_len=0, gso_size=0, csum_start=0,
             csum_offset=0):
    return struct.pack("<BBHHHHH", flags, gso_type, hdr_len, gso_size,
                       csum_start, csum_offset, 0)


class FrontEnd:
    """QEMU and the guest's virtio-net driver in one."""

    def __init__(self, path):
        self.mem_fd = os.memfd_create("guest")
        os.ftruncate(self.mem_fd, MEM_SIZE)
        self.mem = mmap.mmap(self.mem_fd, MEM_SIZE, mmap.MAP_SHARED,
                             mmap.PROT_READ | mmap.PROT_WRITE)
        # Guest memory as 16-bit words: an item assignment is one store.
        self.words = memoryview(self.mem).cast("H")
        self.kick = [os.eventfd(0, os.EFD_NONBLOCK) for _ in range(2)]
        self.call = [os.eventfd(0, os.EFD_NONBLOCK) for _ in range(2)]
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(5)
        self.sock.connect(path)
        self.next_desc = [0, 0]
        self.avail = [0, 0]
        self.used_seen = [0, 0]
        self.buf_off = 0
        self.rx_buf = {}

    def close(self):
        self.sock.close()
        self.words.release()
        self.mem.close()
        for fd in (self.mem_fd, *self.kick, *self.call):
            os.close(fd)

    # --- Messages: u32 request, u32 flags, u32 size, then the payload.
    def send(self, request, payload=b"", fds=(), ack=False):
        flags = VERSION | (FLAG_NEED_REPLY if ack else 0)
        msg = struct.pack("<III", request, flags, len(payload)) + payload
        socket.send_fds(self.sock, [msg], list(fds))
        if ack:
            r = self.reply(request)
            assert struct.unpack("<Q", r)[0] == 0, f"request {request} refused"

    def reply(self, request):
        hdr = self._recv(12)
        req, flags, size = struct.unpack("<III", hdr)
        assert req == request and flags == VERSION | FLAG_REPLY, (req, flags)
        return self._recv(size)

    def _recv(self, n):
        out = b""
        while len(out) < n:
            part = self.sock.recv(n - len(out))
            assert part, "netstackd closed the vhost-user socket"
            out += part
        return out

    def negotiate(self):
        """QEMU's start-up, in its order."""
        self.send(GET_FEATURES)
        offered = struct.unpack("<Q", self.reply(GET_FEATURES))[0]
        assert offered & FEATURES == FEATURES, hex(offered)
        self.send(GET_PROTOCOL_FEATURES)
        self.reply(GET_PROTOCOL_FEATURES)
        self.send(SET_PROTOCOL_FEATURES,
                  struct.pack("<Q", 1 << PROTOCOL_F_REPLY_ACK))
        self.send(SET_OWNER, ack=True)
        self.send(SET_FEATURES, struct.pack("<Q", FEATURES), ack=True)
        # One region: count, padding, then gpa, size, uva, mmap offset.
        table = struct.pack("<II", 1, 0) + struct.pack("<QQQQ", GPA,
                                                       MEM_SIZE, UVA, 0)
        self.send(SET_MEM_TABLE, table, [self.mem_fd], ack=True)
        for q in (RX, TX):
            base = UVA + q * RING_AREA
            self.send(SET_VRING_NUM, struct.pack("<II", q, QSIZE), ack=True)
            self.send(SET_VRING_BASE, struct.pack("<II", q, 0), ack=True)
            # index, flags, desc, used, avail, log (all "QEMU" addresses).
            self.send(SET_VRING_ADDR, struct.pack(
                "<IIQQQQ", q, 0, base + DESC_OFF, base + USED_OFF,
                base + AVAIL_OFF, 0), ack=True)
            self.send(SET_VRING_KICK, struct.pack("<Q", q), [self.kick[q]],
                      ack=True)
            self.send(SET_VRING_CALL, struct.pack("<Q", q), [self.call[q]],
                      ack=True)
            self.send(SET_VRING_ENABLE, struct.pack("<II", q, 1), ack=True)

    # --- The driver.
    def ring(self, q, off):
        return q * RING_AREA + off

    def store16(self, off, value):
        """One 16-bit store at `off` (even), never a torn or zeroed value
        (struct.pack_into zeroes its target first)."""
        self.words[off // 2] = value

    def load16(self, off):
        return self.words[off // 2]

    def write_desc(self, q, i, gpa, length, flags, nxt):
        struct.pack_into("<QIHH", self.mem, self.ring(q, DESC_OFF) + 16 * i,
                         gpa, length, flags, nxt)

    def new_desc(self, q):
        i = self.next_desc[q] % QSIZE
        self.next_desc[q] += 1
        return i

    def publish(self, q, head, kick=True):
        a = self.ring(q, AVAIL_OFF)
        self.store16(a + 4 + 2 * (self.avail[q] % QSIZE), head)
        self.avail[q] = (self.avail[q] + 1) & 0xFFFF
        # The entry before the index: the same order on x86 (TSO).
        self.store16(a + 2, self.avail[q])
        if kick:
            os.eventfd_write(self.kick[q], 1)

    def buf(self, data_or_size):
        """Room in the buffer area; returns (offset, guest-physical)."""
        n = data_or_size if isinstance(data_or_size, int) else len(data_or_size)
        off = BUF_AREA + self.buf_off
        self.buf_off += (n + 63) & ~63
        if not isinstance(data_or_size, int):
            self.mem[off:off + n] = data_or_size
        return off, GPA + off

    def post_tx(self, data):
        _, gpa = self.buf(data)
        i = self.new_desc(TX)
        self.write_desc(TX, i, gpa, len(data), 0, 0)
        self.publish(TX, i)
        return i

    def post_rx(self, n, size=2048):
        for k in range(n):
            off, gpa = self.buf(size)
            i = self.new_desc(RX)
            self.rx_buf[i] = off
            self.write_desc(RX, i, gpa, size, DESC_WRITE, 0)
            self.publish(RX, i, kick=k == n - 1)

    def used_idx(self, q):
        return self.load16(self.ring(q, USED_OFF) + 2)

    def take_used(self, q):
        out = []
        idx = self.used_idx(q)
        while self.used_seen[q] != idx:
            e = self.ring(q, USED_OFF) + 4 + 8 * (self.used_seen[q] % QSIZE)
            out.append(struct.unpack_from("<II", self.mem, e))
            self.used_seen[q] = (self.used_seen[q] + 1) & 0xFFFF
        return out

    def wait_used(self, q, want=1, timeout=10):
        """Used entries of queue q, at least `want` of them: woken by its
        call eventfd, which netstackd writes after it publishes the used
        index (no EVENT_IDX, NO_INTERRUPT clear). `timeout` only bounds a
        hang; fewer than `want` come back then."""
        got = self.take_used(q)
        deadline = time.monotonic() + timeout
        while len(got) < want:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.call[q]], [], [], left)[0]:
                break
            os.eventfd_read(self.call[q])
            got += self.take_used(q)
        return got

    def rx_frames(self):
        """Frames in used RX buffers (without the vnet header)."""
        frames = []
        for i, n in self.wait_used(RX):
            off = self.rx_buf[i]
            frames.append(bytes(self.mem[off + VNET_HDR:off + n]))
        return frames


class VhostUserHostileTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root")
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    def setUp(self):
        # UNIX socket paths hold at most 107 bytes: TEST_TMPDIR's are longer.
        self.sockdir = tempfile.mkdtemp(prefix="nst-vuh-", dir="/tmp")
        self.addCleanup(shutil.rmtree, self.sockdir, ignore_errors=True)
        self.topo = BackendTopology()
        self.addCleanup(self.topo.close)
        self.topo.setup_host()
        self.topo.assert_isolated()  # no default route in H: nothing leaves
        self.path = os.path.join(self.sockdir, "vu.sock")
        nd = iu.Netstackd(["--backend", "--vhost-user", self.path,
                           "--dns-upstream", "127.0.0.1"])
        nd.args = self.topo.in_ns(self.topo.h, *nd.args)
        self.addCleanup(nd.close)
        nd.start()
        self.nd = nd

    def front_end(self):
        fe = FrontEnd(self.path)
        self.addCleanup(fe.close)
        fe.negotiate()
        return fe

    def assert_arp_answered(self, fe):
        """The guest's ARP request for the gateway gets a reply in its RX
        queue: netstackd serves this front-end."""
        fe.post_rx(8)
        fe.post_tx(vnet_hdr() + arp_request())
        frames = fe.rx_frames()
        replies = [f for f in frames if len(f) >= 42 and f[12:14] == b"\x08\x06"
                   and f[20:22] == b"\x00\x02" and f[28:32] == GATEWAY
                   and f[38:42] == GUEST_IP and f[0:6] == GUEST_MAC]
        self.assertTrue(replies, f"no ARP reply for 10.0.2.2 in {frames!r}\n"
                        + self.nd.log())

    def test_refused_chains_are_counted_and_service_goes_on(self):
        fe = self.front_end()
        good = vnet_hdr() + arp_request()
        _, good_gpa = fe.buf(good)
        end = GPA + MEM_SIZE
        # (bad_head) an avail entry naming a descriptor past the queue.
        fe.publish(TX, QSIZE + 7)
        # (outside_memory) a descriptor pointing past guest memory.
        i = fe.new_desc(TX)
        fe.write_desc(TX, i, end + 0x100000, len(good), 0, 0)
        fe.publish(TX, i)
        # (loop) a descriptor whose next is itself.
        i = fe.new_desc(TX)
        fe.write_desc(TX, i, good_gpa, len(good), DESC_NEXT, i)
        fe.publish(TX, i)
        # (outside_memory) starts inside the region, runs past its end.
        i = fe.new_desc(TX)
        fe.write_desc(TX, i, end - 20, 200, 0, 0)
        fe.publish(TX, i)
        # (too_long) more bytes than any frame, inside memory.
        i = fe.new_desc(TX)
        fe.write_desc(TX, i, GPA + BUF_AREA, 2 << 20, 0, 0)
        fe.publish(TX, i)
        # (gso_without_csum) a TCPv4 GSO header on an ARP frame, no
        # NEEDS_CSUM.
        fe.post_tx(vnet_hdr(gso_type=1, hdr_len=54, gso_size=1448)
                   + arp_request())
        # (bad_csum) NEEDS_CSUM with csum_start past the frame.
        fe.post_tx(vnet_hdr(flags=1, csum_start=200, csum_offset=16)
                   + arp_request())
        # Every chain but the bad head (no descriptor to give back) comes
        # back to the guest, empty. The last chain's entry is the sixth:
        # once it is back, netstackd has read all seven, so the counters
        # are final and nothing more comes.
        used = fe.wait_used(TX, want=6)
        alive = self.nd.proc.poll() is None
        c = self.nd.counters() if alive else {}
        vu = {k: v for k, v in c.items() if k.startswith("link.vhost_user.")}
        used += fe.take_used(TX)
        self.assertEqual(used, [(i, 0) for i in range(6)],
                         f"netstackd's exit status {self.nd.proc.poll()} "
                         f"(None: running); vhost-user counters: {vu}; its "
                         f"log:\n{self.nd.log()}")

        want = {
            "link.vhost_user.from_guest_chain_refused.bad_head": 1,
            "link.vhost_user.from_guest_chain_refused.outside_memory": 2,
            "link.vhost_user.from_guest_chain_refused.loop": 1,
            "link.vhost_user.from_guest_chain_refused.too_long": 1,
            "link.vhost_user.from_guest_vnet_refused.gso_without_csum": 1,
            "link.vhost_user.from_guest_vnet_refused.bad_csum": 1,
            "link.vhost_user.queue_broken": 0,
            "link.vhost_user.bad_streams": 0,
        }
        self.assertEqual({k: vu.get(k) for k in want}, want,
                         f"vhost-user counters: {vu}")
        print("refusals: " + " ".join(f"{k.split('.', 2)[2]}={vu[k]}"
                                      for k in want if want[k]), flush=True)

        # netstackd is alive and still serves this guest.
        self.assertIsNone(self.nd.proc.poll(), self.nd.log())
        self.assert_arp_answered(fe)

        # The front-end goes; a new one is served.
        fe.sock.close()
        self.assertTrue(iu.wait_for(
            lambda: self.nd.counters().get("link.vhost_user.disconnects") == 1,
            5), self.nd.log())
        fe2 = self.front_end()
        self.assert_arp_answered(fe2)
        c = self.nd.counters()
        self.assertEqual(c.get("link.vhost_user.connections"), 2)
        self.assertEqual(c.get("link.vhost_user.rejected_peers"), 0)
        self.assertIsNone(self.nd.proc.poll(), self.nd.log())
        # A clean exit on SIGTERM (under --config=asan: no report, no leak).
        self.assertEqual(self.nd.stop(), 0, self.nd.log())

    def test_republished_avail_index_is_read_whole(self):
        """A driver may store its avail index again with the same value;
        netstackd, reading it meanwhile (kicked each time), must never see
        anything else. Fails with the front-end's index stores made by
        struct.pack_into (queue_broken 1 in 8 of 10 runs under ASan), which
        zeroes the index for a moment."""
        fe = self.front_end()
        self.assert_arp_answered(fe)  # TX's last_avail is 1 now: 0 is wrong
        a = fe.ring(TX, AVAIL_OFF) + 2
        for _ in range(200000):
            fe.store16(a, fe.avail[TX])
            os.eventfd_write(fe.kick[TX], 1)
        c = self.nd.counters()
        self.assertGreater(c.get("link.vhost_user.kicks"), 100)
        self.assertEqual(c.get("link.vhost_user.queue_broken"), 0,
                         f"after {c.get('link.vhost_user.kicks')} kicks")
        self.assert_arp_answered(fe)


if __name__ == "__main__":
    unittest.main()
