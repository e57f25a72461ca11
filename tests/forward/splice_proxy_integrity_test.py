#!/usr/bin/env python3
"""1 GiB through splice_proxy, checked by sha256 at both ends, for one
--mode (given as --mode=splice|copy|auto; Bazel has a target per mode) and
each case: tcp_to_tcp, unix_to_tcp, tcp_to_unix.

One proxy runs the three forwards. For each case the client sends 1 GiB
and shuts its write side; the server hashes what arrives until EOF and
sends back "<sha256> <count>"; the client compares it with the hash of
what it sent. The test also checks the proxy's counters (bytes, and the
path that carried them for the mode) and that the proxy's sockets return
to their baseline after each transfer, and all its fds once its idle pipes
are closed (--pipe_idle_timeout=200ms). It prints the time per case.

SPLICE_PROXY_TEST_BYTES overrides the size (for quick runs by hand).
"""
import os
import sys
import time
import unittest

import proxy_harness as h

MODE = "auto"
SIZE = int(os.environ.get("SPLICE_PROXY_TEST_BYTES", h.GiB))
CASES = {  # name: (forward index, proxy listens on, server kind)
    "tcp_to_tcp": (0, "tcp", "tcp"),
    "unix_to_tcp": (1, "unix", "tcp"),
    "tcp_to_unix": (2, "tcp", "unix"),
}
FIGURES = []


class Integrity(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = h.make_tmpdir(f"int-{MODE}")
        cls.servers = {}
        args = [f"--mode={MODE}", "--pipe_idle_timeout=200ms"]
        for name, (_, listen_kind, server_kind) in CASES.items():
            server = h.Listener(server_kind, cls.tmp, name=f"srv-{name}")
            cls.servers[name] = server
            listen = (f"unix:{cls.tmp}/in-{name}.sock" if listen_kind == "unix"
                      else "127.0.0.1:0")
            args += ["--listen", listen, "--connect", server.address]
        cls.proxy = h.Proxy(args, cls.tmp)
        cls.baseline = cls.proxy.fds()
        cls.started = time.monotonic()

    @classmethod
    def tearDownClass(cls):
        rc = cls.proxy.stop()
        log = cls.proxy.log()
        for server in cls.servers.values():
            server.close()
        print(f"\n=== splice_proxy integrity, mode {MODE}, "
              f"{SIZE / h.MiB:.0f} MiB per case ===")
        for line in FIGURES:
            print(line)
        print(f"proxy fds: baseline {cls.baseline}, final "
              f"{cls.final_fds if hasattr(cls, 'final_fds') else '?'}")
        print(f"total wall time {time.monotonic() - cls.started:.1f} s")
        assert rc == 0, f"splice_proxy exit status {rc}:\n{log}"
        for name in os.listdir(cls.tmp):
            os.unlink(os.path.join(cls.tmp, name))
        os.rmdir(cls.tmp)

    def transfer(self, name):
        index, _, _ = CASES[name]
        listener = self.servers[name]

        def serve():
            conn = listener.accept()
            with conn:
                digest, count = h.recv_stream(conn)
                conn.sendall(f"{digest} {count}\n".encode())
            return digest, count

        server = h.Worker(serve)
        server.start()
        start = time.monotonic()
        client = h.connect(self.proxy.addresses[index])
        with client:
            sent = h.send_stream(client, SIZE)
            reply = b""
            while True:
                piece = client.recv(4096)
                if not piece:
                    break
                reply += piece
        seconds = time.monotonic() - start
        got, count = server.join(timeout=600)
        self.assertEqual(count, SIZE, "bytes lost or duplicated")
        self.assertEqual(got, sent, "sha256 differs at the server")
        self.assertEqual(reply.decode(), f"{sent} {SIZE}\n",
                         "the server's answer differs at the client")
        return seconds

    def check_counters(self, name, seconds):
        index = CASES[name][0]
        # The relay finishes (and its counters move to the forward's
        # totals) as soon as both EOFs are through; wait for it.
        deadline = time.time() + 10
        while True:
            stats = self.proxy.stats()[f"forward {index}"]
            if stats["connections"]["active"] == 0 or time.time() > deadline:
                break
            time.sleep(0.05)
        conns = stats["connections"]
        up = stats["client_to_server"]
        self.assertEqual(conns["completed"], 1, stats)
        self.assertEqual(conns["relay_errors"], 0, stats)
        self.assertEqual(up["bytes"], SIZE, stats)
        self.assertEqual(up["splice_bytes"] + up["copy_bytes"], SIZE, stats)
        self.assertEqual(up["eof_forwarded"], 1, stats)
        note = ""
        if MODE == "copy":
            self.assertEqual(up["copy_bytes"], SIZE, stats)
            self.assertEqual(up["splice_syscalls"], 0, stats)
        elif up["fallback_no_pipe"] > 0:
            # The kernel refused a pipe of useful size: root here shares
            # one fs.pipe-user-pages-soft budget (64 MiB) with every other
            # root process, and parallel benchmarks can exhaust it. The
            # relay must then have copied, which the byte counts show.
            pipes = self.proxy.stats()["pipes"]["info"]
            self.assertGreater(pipes["acquire_failed"], 0, pipes)
            note = " (no pipe from the kernel: copied)"
        elif MODE == "splice":
            self.assertEqual(up["splice_bytes"], SIZE, stats)
        else:
            # Large reads: auto must have moved to splice at once.
            self.assertGreaterEqual(up["splice_bytes"], SIZE // 2, stats)
        FIGURES.append(
            f"{MODE:6s} {name:11s}: {SIZE / h.MiB:.0f} MiB in "
            f"{seconds:6.2f} s = {SIZE / seconds / 1e6:7.0f} MB/s; "
            f"client_to_server splice_bytes={up['splice_bytes']} "
            f"copy_bytes={up['copy_bytes']} syscalls={up['syscalls']} "
            f"would_block={up['would_block']}{note}")

    def check_fds(self):
        fds = self.proxy.wait_for_fds(
            lambda f: f["socket"] == self.baseline["socket"])
        self.assertEqual(fds["socket"], self.baseline["socket"],
                         f"sockets leaked: {fds} vs baseline {self.baseline}")
        pipes = self.proxy.stats()["pipes"]["info"]
        self.assertEqual(pipes["in_use"], 0, pipes)
        # Every pipe fd left is a pooled pipe (two fds each), and those go
        # once the proxy has been idle for --pipe_idle_timeout.
        self.assertEqual(fds["pipe"] - self.baseline["pipe"],
                         2 * pipes["pooled"], (fds, pipes))
        fds = self.proxy.wait_for_fds(lambda f: f == self.baseline)
        self.assertEqual(fds, self.baseline, "fds did not return to baseline")
        type(self).final_fds = fds

    def run_case(self, name):
        seconds = self.transfer(name)
        self.check_counters(name, seconds)
        self.check_fds()

    def test_tcp_to_tcp(self):
        self.run_case("tcp_to_tcp")

    def test_unix_to_tcp(self):
        self.run_case("unix_to_tcp")

    def test_tcp_to_unix(self):
        self.run_case("tcp_to_unix")


if __name__ == "__main__":
    for arg in list(sys.argv[1:]):
        if arg.startswith("--mode="):
            MODE = arg.split("=", 1)[1]
            sys.argv.remove(arg)
    h.raise_nofile(4096)
    unittest.main(argv=sys.argv[:1])
