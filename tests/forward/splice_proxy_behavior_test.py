#!/usr/bin/env python3
"""splice_proxy's behaviour under one --mode (--mode=splice|copy|auto; Bazel
has a target per mode), through one proxy with a forward per case:
tcp_to_tcp, unix_to_tcp, tcp_to_unix and tcp6_to_tcp6 (::1).

  - half-close both ways: one side shuts its write side, the other goes
    on sending (half of it after the FIN arrived); every byte arrives
    (sha256) and the proxy forwards both FINs;
  - a peer reset in the middle of a transfer, from the server and from
    the client: the proxy logs it, closes the other side (the blocked
    sender gets an error, not a hang) and serves new connections;
  - a slow reader: the destination stops reading, then reads slowly; the
    relay's deliveries stall (SIGUSR1 stats), its writes hit EAGAIN
    (would_block > 0; see slow_reader for the copy path into TCP) and
    resume on EPOLLOUT; no byte is lost or duplicated (sha256);
  - 1,000 concurrent connections through one forward, all open at once
    (the proxy's stats say active=1000), each verified both ways;
  - a pool of 2 pipes for 4 spliced transfers: the rest copy, all intact;
  - after every test the proxy's sockets are back to their baseline at
    once, and its whole fd count (/proc/PID/fd) once the idle pipes are
    closed (--pipe_idle_timeout=200ms).
"""
import asyncio
import hashlib
import os
import random
import socket
import sys
import time
import unittest

import proxy_harness as h

MODE = "auto"
CONCURRENT = int(os.environ.get("SPLICE_PROXY_TEST_CONCURRENT", "1000"))
CASES = {  # name: (forward index, proxy listens on, server kind)
    "tcp_to_tcp": (0, "tcp", "tcp"),
    "unix_to_tcp": (1, "unix", "tcp"),
    "tcp_to_unix": (2, "tcp", "unix"),
    "tcp6_to_tcp6": (3, "tcp6", "tcp6"),
}
FIGURES = []
# SO_RCVBUF of the slow readers (the kernel doubles it).
RCVBUF = 256 * 1024


def ipv6_loopback():
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def payload(i):
    return random.Random(i).randbytes(1024 + (i * 7919) % 7168)


def answer(i):
    return random.Random(-1 - i).randbytes(512 + (i * 104729) % 4096)


class Behavior(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        h.raise_nofile(16384)
        cls.tmp = h.make_tmpdir(f"beh-{MODE}")
        cls.cases = {k: v for k, v in CASES.items()
                     if k != "tcp6_to_tcp6" or ipv6_loopback()}
        cls.servers = {}
        args = [f"--mode={MODE}", "--pipe_idle_timeout=200ms",
                "--shutdown_grace=1s"]
        for name, (_, listen_kind, server_kind) in cls.cases.items():
            # A fixed receive buffer for the servers (no autotuning), so
            # that a slow reader makes the proxy's writes block soon.
            server = h.Listener(server_kind, cls.tmp, name=f"srv-{name}",
                                rcvbuf=RCVBUF)
            cls.servers[name] = server
            listen = {"unix": f"unix:{cls.tmp}/in-{name}.sock",
                      "tcp": "127.0.0.1:0", "tcp6": "[::1]:0"}[listen_kind]
            args += ["--listen", listen, "--connect", server.address]
        cls.proxy = h.Proxy(args, cls.tmp)
        cls.baseline = cls.proxy.fds()
        cls.started = time.monotonic()

    @classmethod
    def tearDownClass(cls):
        final = cls.proxy.fds()
        rc = cls.proxy.stop()
        log = cls.proxy.log()
        for server in cls.servers.values():
            server.close()
        print(f"\n=== splice_proxy behaviour, mode {MODE} ===")
        for line in FIGURES:
            print(line)
        print(f"proxy fds: baseline {cls.baseline}, after all tests {final}")
        print(f"total wall time {time.monotonic() - cls.started:.1f} s")
        for name in os.listdir(cls.tmp):
            os.unlink(os.path.join(cls.tmp, name))
        os.rmdir(cls.tmp)
        assert rc == 0, f"splice_proxy exit status {rc}:\n{log}"
        assert final == cls.baseline, (final, cls.baseline)

    def tearDown(self):
        # Sockets at once (once the relays are done), every fd once the
        # idle pool has been closed.
        fds = self.proxy.wait_for_fds(
            lambda f: f["socket"] == self.baseline["socket"])
        self.assertEqual(fds["socket"], self.baseline["socket"],
                         f"sockets leaked: {fds} vs {self.baseline}")
        fds = self.proxy.wait_for_fds(lambda f: f == self.baseline)
        self.assertEqual(fds, self.baseline, "fds did not return to baseline")
        pipes = self.proxy.stats()["pipes"]["info"]
        self.assertEqual((pipes["in_use"], pipes["pooled"]), (0, 0), pipes)

    def forward(self, name):
        return f"forward {self.cases[name][0]}"

    def address(self, name):
        return self.proxy.addresses[self.cases[name][0]]

    def counters(self, name, wait_idle=True):
        """The forward's stats once its relays are done."""
        deadline = time.time() + 15
        while True:
            stats = self.proxy.stats()[self.forward(name)]
            if not wait_idle or (stats["connections"]["active"] == 0 and
                                 stats["connections"]["connecting"] == 0):
                return stats
            if time.time() > deadline:
                self.fail(f"connections still open: {stats}")
            time.sleep(0.05)

    def round_trip(self, name):
        """A small exchange: the forward still serves."""
        listener = self.servers[name]

        def serve():
            conn = listener.accept()
            with conn:
                digest, count = h.recv_stream(conn)
                conn.sendall(f"{digest} {count}".encode())

        server = h.Worker(serve)
        server.start()
        with h.connect(self.address(name), timeout=20) as client:
            sent = h.send_stream(client, 100000)
            got = h.recv_stream(client, chunk=4096)[1]
        server.join()
        self.assertEqual(got, len(f"{sent} 100000"))

    # --- half-close -------------------------------------------------------

    def half_close(self, name, client_first):
        """The first closer sends A and shuts its write side; the other
        side sends half of B, waits until that FIN arrived, sends the rest,
        then shuts too."""
        size_a, size_b = 8 * h.MiB, 8 * h.MiB
        listener = self.servers[name]
        before = self.counters(name)
        client = h.connect(self.address(name), timeout=30)
        server = listener.accept()
        first, second = (client, server) if client_first else (server, client)
        reader_of_a = h.Worker(h.recv_stream, second)
        reader_of_a.start()
        reader_of_b = h.Worker(h.recv_stream, first)
        reader_of_b.start()
        sent_a = h.send_stream(first, size_a)  # then SHUT_WR

        def wait_for_fin():
            # Half of B is out; only after the FIN of A arrived does the
            # second half go.
            reader_of_a.join(timeout=60)

        sent_b = h.send_stream(second, size_b, on_half=wait_for_fin)
        got_a = reader_of_a.join()
        got_b = reader_of_b.join()
        client.close()
        server.close()
        self.assertEqual(got_a, (sent_a, size_a), "the first closer's bytes")
        self.assertEqual(got_b, (sent_b, size_b),
                         "bytes sent after the half-close")
        after = self.counters(name)
        for direction in ("client_to_server", "server_to_client"):
            self.assertEqual(after[direction]["eof_forwarded"] -
                             before[direction]["eof_forwarded"], 1,
                             (direction, after))
        self.assertEqual(after["connections"]["completed"] -
                         before["connections"]["completed"], 1, after)

    def test_half_close_client_first(self):
        for name in self.cases:
            with self.subTest(case=name):
                self.half_close(name, client_first=True)

    def test_half_close_server_first(self):
        for name in self.cases:
            with self.subTest(case=name):
                self.half_close(name, client_first=False)

    # --- reset ------------------------------------------------------------

    def reset(self, name, by_server):
        """The receiver reads 2 MiB of an endless stream, then resets."""
        listener = self.servers[name]
        before = self.counters(name)
        client = h.connect(self.address(name), timeout=30)
        server = listener.accept()
        sender, receiver = (client, server) if by_server else (server, client)
        log_errors = self.proxy.log().count("closed on error")

        def send_until_error():
            try:
                h.send_stream(sender, 64 * h.GiB)
            except (ConnectionResetError, BrokenPipeError) as e:
                return type(e).__name__
            return "sent everything"

        writer = h.Worker(send_until_error)
        writer.start()
        _, count = h.recv_stream(receiver, chunk=256 * h.KiB,
                                 limit=2 * h.MiB)
        self.assertEqual(count, 2 * h.MiB)
        h.reset_close(receiver)
        # The sender must get an error (the proxy closed its side), not
        # hang (the socket timeout would raise TimeoutError here).
        self.assertIn(writer.join(timeout=60),
                      ("ConnectionResetError", "BrokenPipeError"))
        sender.close()
        self.proxy.wait_for_log("closed on error", count=log_errors + 1)
        after = self.counters(name)
        self.assertEqual(after["connections"]["relay_errors"] -
                         before["connections"]["relay_errors"], 1, after)
        self.round_trip(name)

    def test_reset_by_server(self):
        for name in self.cases:
            with self.subTest(case=name):
                self.reset(name, by_server=True)

    def test_reset_by_client(self):
        for name in self.cases:
            with self.subTest(case=name):
                self.reset(name, by_server=False)

    # --- slow reader --------------------------------------------------------

    def slow_reader(self, name, reader_is_server):
        size = 32 * h.MiB
        listener = self.servers[name]
        direction = "client_to_server" if reader_is_server \
            else "server_to_client"
        before = self.counters(name)[direction]
        client = h.connect(self.address(name), timeout=60, rcvbuf=RCVBUF)
        server = listener.accept(timeout=60)
        sender, receiver = (client, server) if reader_is_server \
            else (server, client)
        writer = h.Worker(h.send_stream, sender, size)
        writer.start()
        # Not reading: every buffer on the way fills up, and the relay
        # stops writing: what it delivered stands still, short of `size`.
        stalled = None
        deadline = time.monotonic() + 10
        while True:
            time.sleep(0.15)
            now = self.counters(name, wait_idle=False)[direction]["bytes"]
            if now == stalled:
                break
            self.assertLess(time.monotonic(), deadline,
                            "the relay kept delivering to a reader that "
                            "does not read")
            stalled = now
        self.assertLess(stalled - before["bytes"], size)
        start = time.monotonic()
        got = h.recv_stream(receiver, chunk=64 * h.KiB, pause=0.0005)
        seconds = time.monotonic() - start
        sent = writer.join()
        client.close()
        server.close()
        self.assertEqual(got, (sent, size), "lost or duplicated bytes")
        after = self.counters(name)[direction]
        would_block = after["would_block"] - before["would_block"]
        # Only EPOLLOUT wakes a relay that waits for its destination: the
        # stall above and every byte arriving after it show that path
        # ran. would_block counts the writes that met EAGAIN on the way
        # there. The copy path into TCP can wait without one: it waits for
        # EPOLLOUT when a send comes back short, and TCP reports EPOLLOUT
        # only once a third of the send buffer is free again. (A splice
        # mode relay copies too when the kernel grants no pipe.)
        spliced = after["splice_bytes"] - before["splice_bytes"]
        if spliced > 0 or "unix" in name:
            self.assertGreater(would_block, 0,
                               "the relay never found the destination full")
        self.assertEqual(after["bytes"] - before["bytes"], size)
        FIGURES.append(
            f"slow reader {name:12s} {direction}: stalled at "
            f"{(stalled - before['bytes']) / h.MiB:.1f} MiB while paused; "
            f"{size // h.MiB} MiB in {seconds:.2f} s, "
            f"would_block={would_block}, "
            f"splice_bytes={after['splice_bytes'] - before['splice_bytes']} "
            f"copy_bytes={after['copy_bytes'] - before['copy_bytes']}")

    def test_slow_reader(self):
        for name in self.cases:
            for reader_is_server in (True, False):
                with self.subTest(case=name,
                                  reader_is_server=reader_is_server):
                    self.slow_reader(name, reader_is_server)

    # --- 1,000 concurrent connections ---------------------------------------

    def test_many_concurrent_connections(self):
        for name in ("tcp_to_tcp", "tcp_to_unix", "unix_to_tcp"):
            with self.subTest(case=name):
                before = self.counters(name)
                start = time.monotonic()
                active, fds_at_peak = asyncio.run(self.many(name, CONCURRENT))
                seconds = time.monotonic() - start
                self.assertEqual(active, CONCURRENT,
                                 "not all connections were open at once")
                after = self.counters(name)
                done = (after["connections"]["completed"] -
                        before["connections"]["completed"])
                self.assertEqual(done, CONCURRENT, after)
                self.assertEqual(after["connections"]["relay_errors"],
                                 before["connections"]["relay_errors"], after)
                FIGURES.append(
                    f"{CONCURRENT} concurrent {name:12s}: all verified in "
                    f"{seconds:.2f} s; proxy fds at the peak {fds_at_peak}")

    async def many(self, name, n):
        """n clients connect at once, send a payload and shut; the server
        answers none before all n payloads arrived (so all n relays are
        open together), then answers each. Returns the proxy's active
        count and fds at that moment."""
        listener = self.servers[name]
        all_in = asyncio.Event()
        arrived = 0
        peak = {}
        bad = []

        async def check_then_release():
            loop = asyncio.get_running_loop()
            stats = await loop.run_in_executor(None, self.proxy.stats)
            peak["active"] = stats[self.forward(name)]["connections"]["active"]
            peak["fds"] = self.proxy.fds()
            all_in.set()

        async def handle(reader, writer):
            nonlocal arrived
            data = await reader.read()
            i = int.from_bytes(data[:4], "little")
            if data[4:] != payload(i):
                bad.append(i)
            arrived += 1
            if arrived == n:
                asyncio.create_task(check_then_release())
            await all_in.wait()
            writer.write(hashlib.sha256(data).digest() + answer(i))
            await writer.drain()
            writer.close()

        # A dup: closing the asyncio server closes its socket, and the
        # listener belongs to the test class. asyncio calls listen() again:
        # keep the backlog (its default of 100 overflows, and the kernel
        # then answers with SYN cookies and resets).
        sock = listener.sock.dup()
        if listener.kind == "unix":
            server = await asyncio.start_unix_server(handle, sock=sock,
                                                     backlog=4096)
        else:
            server = await asyncio.start_server(handle, sock=sock,
                                                backlog=4096)
        family, address = h.parse_address(self.address(name))

        async def client(i):
            if family == socket.AF_UNIX:
                reader, writer = await asyncio.open_unix_connection(address)
            else:
                reader, writer = await asyncio.open_connection(*address)
            message = i.to_bytes(4, "little") + payload(i)
            writer.write(message)
            await writer.drain()
            writer.write_eof()
            got = await reader.read()
            writer.close()
            return got == hashlib.sha256(message).digest() + answer(i)

        try:
            results = await asyncio.wait_for(
                asyncio.gather(*(client(i) for i in range(n))), 300)
        finally:
            server.close()
        self.assertEqual(bad, [], "payloads that arrived damaged")
        self.assertEqual(results.count(True), n,
                         "answers that arrived damaged")
        return peak["active"], peak["fds"]

    # --- pipe pool exhaustion -----------------------------------------------

    def test_pipe_pool_exhausted(self):
        """4 concurrent 16 MiB transfers with --max_pipes=2, the readers
        held back until the pipes are full: two directions get a pipe and
        keep it (a full pipe is never given back), the other two find
        none and copy; every byte intact."""
        if MODE == "copy":
            self.skipTest("the copy mode uses no pipes")
        server = h.Listener("tcp", self.tmp, name="srv-pool")
        proxy = h.Proxy([f"--mode={MODE}", "--max_pipes=2", "--listen",
                         "127.0.0.1:0", "--connect", server.address],
                        self.tmp, name="proxy-pool")
        try:
            size = 16 * h.MiB
            clients = [h.connect(proxy.addresses[0]) for _ in range(4)]
            conns = [server.accept() for _ in range(4)]
            readers = [h.Worker(h.recv_stream, c) for c in conns]
            writers = [h.Worker(h.send_stream, c, size) for c in clients]
            for w in writers:
                w.start()
            deadline = time.time() + 10
            while proxy.stats()["pipes"]["info"]["in_use"] < 2:
                self.assertLess(time.time(), deadline, proxy.stats())
                time.sleep(0.05)
            time.sleep(0.3)  # the pipes fill while nobody reads
            for r in readers:
                r.start()
            for w, r in zip(writers, readers):
                self.assertEqual(r.join(), (w.join(), size))
            for s in clients + conns:
                s.close()
            deadline = time.time() + 10
            while proxy.stats()["total"]["connections"]["completed"] < 4:
                self.assertLess(time.time(), deadline)
                time.sleep(0.05)
            stats = proxy.stats()
            up = stats["total"]["client_to_server"]
            pipes = stats["pipes"]["info"]
            FIGURES.append(f"max_pipes=2, 4 transfers: {up}; pipes {pipes}")
            self.assertEqual(up["bytes"], 4 * size)
            # Usually the two without a pipe never had one
            # (fallback_no_pipe); one that had a pipe early and gave it
            # back while its writer paused counts a shortage instead.
            self.assertGreater(up["fallback_no_pipe"] + up["pipe_shortages"],
                               0, stats)
            self.assertGreater(up["copy_bytes"], 0, stats)
            self.assertGreater(pipes["acquire_failed"], 0, stats)
            self.assertLessEqual(pipes["created"], 2, stats)
            self.assertEqual(stats["total"]["connections"]["relay_errors"], 0)
        finally:
            self.assertEqual(proxy.stop(), 0, proxy.log())
            server.close()


if __name__ == "__main__":
    for arg in list(sys.argv[1:]):
        if arg.startswith("--mode="):
            MODE = arg.split("=", 1)[1]
            sys.argv.remove(arg)
    unittest.main(argv=sys.argv[:1])
