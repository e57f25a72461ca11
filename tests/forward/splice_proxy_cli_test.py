#!/usr/bin/env python3
"""splice_proxy's command line and failure behaviour: --help, usage errors,
forwards that cannot start (bad address, port in use, socket files) while
the others run, unreachable and slow targets, a UNIX target with a full
backlog, running out of fds (EMFILE), signals and a clean stop that
removes the proxy's socket files. Loopback and a temporary directory
only; no root needed.
"""
import os
import signal
import socket
import sys
import time
import unittest

import proxy_harness as h


def free_port():
    """A port nobody listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Echo:
    """A server thread: each connection gets back what it sent (until EOF),
    then is closed."""

    def __init__(self, kind, tmpdir, name="echo"):
        self.listener = h.Listener(kind, tmpdir, name=name)
        self.address = self.listener.address
        self.stop = False
        self.thread = h.Worker(self.serve)
        self.thread.start()

    def serve(self):
        self.listener.sock.settimeout(0.1)
        while not self.stop:
            try:
                conn, _ = self.listener.sock.accept()
            except (socket.timeout, OSError):
                continue
            h.Worker(self.echo, conn).start()

    @staticmethod
    def echo(conn):
        conn.settimeout(30)
        with conn:
            try:
                while True:
                    data = conn.recv(65536)
                    if not data:
                        break
                    conn.sendall(data)
                conn.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def close(self):
        self.stop = True
        self.thread.join(timeout=10)
        self.listener.close()


def echo_round_trip(address, size=200000, timeout=10):
    """Sends `size` bytes and checks they come back, through `address`."""
    with h.connect(address, timeout=timeout) as s:
        reader = h.Worker(h.recv_stream, s)
        reader.start()
        sent = h.send_stream(s, size)
        return reader.join(timeout) == (sent, size)


class Cli(unittest.TestCase):
    def setUp(self):
        self.tmp = h.make_tmpdir("cli")
        self.addCleanup(self.cleanup_tmp)
        self.proxies = []

    def cleanup_tmp(self):
        for p in self.proxies:
            p.kill()
        for name in os.listdir(self.tmp):
            os.unlink(os.path.join(self.tmp, name))
        os.rmdir(self.tmp)

    def start(self, args, **kwargs):
        proxy = h.Proxy(args, self.tmp, name=f"proxy{len(self.proxies)}",
                        **kwargs)
        self.proxies.append(proxy)
        return proxy

    def expect_failure(self, args, code, *messages):
        p = h.run_proxy(args)
        self.assertEqual(p.returncode, code, p.stderr)
        for message in messages:
            self.assertIn(message, p.stderr)
        return p

    def test_help_lists_every_flag(self):
        p = h.run_proxy(["--help"])
        # The tools' one rule: 0 for --help (tests/cli/exit_codes_test).
        self.assertEqual(p.returncode, 0, p.stderr)
        text = p.stdout + p.stderr
        for flag in ("listen", "connect", "mode", "pipe_size", "max_pipes",
                     "auto_threshold", "auto_min_segment", "copy_buffer",
                     "connect_timeout",
                     "shutdown_grace", "pipe_idle_timeout", "backlog",
                     "verbose", "require_all"):
            # An entry of the grouped --help (tools/common/cli.h).
            self.assertRegex(text, rf"(?m)^  --{flag}( |$)")
        for phrase in ("IPV4:PORT", "[IPV6]:PORT", "unix:PATH", "SIGUSR1",
                       "Exit status", "for --help"):
            self.assertIn(phrase, text)

    def test_usage_errors(self):
        ok = ["--listen", "127.0.0.1:0", "--connect", "127.0.0.1:1"]
        self.expect_failure([], 2, "at least one --listen/--connect pair")
        self.expect_failure(["--listen", "127.0.0.1:0"], 2,
                            "1 --listen but 0 --connect")
        self.expect_failure(ok + ["--listen", "127.0.0.1:0"], 2,
                            "2 --listen but 1 --connect")
        self.expect_failure(["--listen"], 2, "--listen needs a value")
        self.expect_failure(ok + ["--mode=fast"], 2,
                            "--mode: 'fast' is not splice, copy or auto")
        self.expect_failure(ok + ["--pipe_size=100"], 2,
                            "--pipe_size 100 out of range")
        self.expect_failure(ok + ["--copy_buffer=1"], 2, "--copy_buffer 1")
        self.expect_failure(ok + ["--connect_timeout=0s"], 2,
                            "--connect_timeout must be positive")
        self.expect_failure(ok + ["extra"], 2, "unexpected argument 'extra'")
        # Flags Abseil rejects are usage errors too.
        self.expect_failure(ok + ["--no_such_flag"], 2,
                            "unknown flag --no_such_flag")
        self.expect_failure(ok + ["--max_pipes=lots"], 2, "--max_pipes=lots")

    def test_only_forward_cannot_start(self):
        self.expect_failure(["--listen", "1.2.3:80", "--connect",
                             "127.0.0.1:1"], 1,
                            "bad address '1.2.3:80'",
                            "'1.2.3' is not an IPv4 address",
                            "no forward could start")
        self.expect_failure(["--listen", "localhost:80", "--connect",
                             "127.0.0.1:1"], 1, "host names are not resolved")
        self.expect_failure(["--listen", "127.0.0.1:0", "--connect",
                             "127.0.0.1:0"], 1, "port 0 is not a target")
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen(1)
            port = busy.getsockname()[1]
            self.expect_failure(["--listen", f"127.0.0.1:{port}", "--connect",
                                 "127.0.0.1:1"], 1,
                                f"listen on 127.0.0.1:{port}: bind: Address "
                                "already in use (another socket listens on "
                                "this port)")
        port = free_port()
        self.expect_failure(["--listen", f"127.0.0.1:{port}", "--connect",
                             f"127.0.0.1:{port}"], 1, "connect to itself")
        self.expect_failure(["--listen", f"0.0.0.0:{port}", "--connect",
                             f"127.0.0.1:{port}"], 1, "connect to itself")
        self.expect_failure(["--listen", "192.0.2.1:0", "--connect",
                             "127.0.0.1:1"], 1,
                            "Cannot assign requested address (no local "
                            "interface has this address)")
        self.assertEqual(os.listdir(self.tmp), [])

    def test_failed_forwards_leave_the_others_running(self):
        echo = Echo("tcp", self.tmp)
        self.addCleanup(echo.close)
        busy = socket.socket()
        self.addCleanup(busy.close)
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        regular = os.path.join(self.tmp, "regular-file")
        with open(regular, "w") as f:
            f.write("keep me")
        args = []
        for listen in ("1.2.3:80",                                    # 0
                       f"127.0.0.1:{busy.getsockname()[1]}",          # 1
                       f"unix:{self.tmp}/no-such-dir/x.sock",         # 2
                       f"unix:{regular}",                             # 3
                       "127.0.0.1:0",                                 # 4
                       f"unix:{self.tmp}/good.sock"):                 # 5
            args += ["--listen", listen, "--connect", echo.address]
        proxy = self.start(args)
        log = proxy.log()
        self.assertIn("forward 0 (--listen 1.2.3:80 ", log)
        self.assertIn("'1.2.3' is not an IPv4 address", log)
        self.assertIn("Address already in use", log)
        self.assertIn("No such file or directory (the directory does not "
                      "exist)", log)
        self.assertIn("the path exists and is not a socket (left alone)", log)
        self.assertIn("running, pid", log)
        self.assertIn("2 of 6 forwards listening", log)
        self.assertEqual(sorted(proxy.addresses), [4, 5])
        self.assertTrue(echo_round_trip(proxy.addresses[4]))
        self.assertTrue(echo_round_trip(proxy.addresses[5]))
        stats = proxy.stats()
        for i in range(4):
            self.assertEqual(stats[f"forward {i}"]["info"]["state"], "failed")
        self.assertEqual(stats["forward 4"]["connections"]["completed"], 1)
        self.assertEqual(proxy.stop(), 0, proxy.log())
        with open(regular) as f:
            self.assertEqual(f.read(), "keep me")
        self.assertFalse(os.path.exists(f"{self.tmp}/good.sock"),
                         "the proxy's socket file was not removed")
        os.unlink(regular)

    def test_require_all(self):
        args = ["--require_all", "--listen", "1.2.3:80", "--connect",
                "127.0.0.1:1", "--listen", f"unix:{self.tmp}/a.sock",
                "--connect", "127.0.0.1:1"]
        self.expect_failure(args, 1, "1 of 2 forwards could not start "
                            "(--require_all)")
        self.assertEqual(os.listdir(self.tmp), [], "left a socket file")

    def test_unreachable_target(self):
        echo = Echo("tcp", self.tmp)
        self.addCleanup(echo.close)
        port = free_port()
        missing = f"{self.tmp}/missing.sock"
        proxy = self.start(["--listen", "127.0.0.1:0", "--connect",
                            f"127.0.0.1:{port}",
                            "--listen", "127.0.0.1:0", "--connect",
                            f"unix:{missing}",
                            "--listen", "127.0.0.1:0", "--connect",
                            echo.address])
        for index in (0, 1):
            # The proxy resets the client: it must not look like a server
            # that accepted and said nothing. (The reset can beat the
            # return from connect().)
            with self.assertRaises(ConnectionResetError):
                with h.connect(proxy.addresses[index]) as s:
                    s.recv(100)
        proxy.wait_for_log(f"connect to 127.0.0.1:{port}: Connection "
                           "refused; client connection closed")
        proxy.wait_for_log(f"connect to unix:{missing}: No such file or "
                           "directory; client connection closed")
        self.assertTrue(echo_round_trip(proxy.addresses[2]))
        stats = proxy.stats()
        for index in (0, 1):
            self.assertEqual(
                stats[f"forward {index}"]["connections"]["connect_failed"], 1)
        # The target comes up: the same forward now works.
        late = socket.socket()
        self.addCleanup(late.close)
        late.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        late.bind(("127.0.0.1", port))
        late.listen(1)
        with h.connect(proxy.addresses[0]) as s:
            conn, _ = late.accept()
            with conn:
                s.sendall(b"ping")
                self.assertEqual(conn.recv(4), b"ping")
        self.assertEqual(proxy.stop(), 0, proxy.log())

    def test_slow_target_does_not_block_the_others(self):
        echo = Echo("tcp", self.tmp)
        self.addCleanup(echo.close)
        # A target whose accept queue is full: the kernel drops the
        # proxy's SYN, so its connect stays in progress.
        stuck = socket.socket()
        self.addCleanup(stuck.close)
        stuck.bind(("127.0.0.1", 0))
        stuck.listen(0)
        filler = socket.create_connection(stuck.getsockname())
        self.addCleanup(filler.close)
        time.sleep(0.1)
        proxy = self.start(["--connect_timeout=1500ms",
                            "--listen", "127.0.0.1:0", "--connect",
                            "127.0.0.1:%d" % stuck.getsockname()[1],
                            "--listen", "127.0.0.1:0", "--connect",
                            echo.address])
        waiting = h.connect(proxy.addresses[0])
        self.addCleanup(waiting.close)
        time.sleep(0.1)
        self.assertEqual(proxy.stats()["forward 0"]["connections"]
                         ["connecting"], 1)
        start = time.monotonic()
        for _ in range(5):
            self.assertTrue(echo_round_trip(proxy.addresses[1]))
        served = time.monotonic() - start
        self.assertLess(served, 1.0, "the other forward waited")
        with self.assertRaises(ConnectionResetError):
            waiting.recv(100)
        proxy.wait_for_log("connect to 127.0.0.1:%d: no answer within 1.5s "
                           "(--connect_timeout)" % stuck.getsockname()[1])
        self.assertEqual(proxy.stop(), 0, proxy.log())

    def test_unix_target_with_full_backlog(self):
        """A non-blocking connect to a UNIX socket whose backlog is full
        answers EAGAIN: the proxy retries until the target accepts."""
        target = h.Listener("unix", self.tmp, name="slow", backlog=1)
        self.addCleanup(target.close)
        proxy = self.start(["--listen", "127.0.0.1:0", "--connect",
                            target.address])
        clients = [h.connect(proxy.addresses[0]) for _ in range(6)]
        time.sleep(0.3)  # the target accepts nothing for a while
        conns = [target.accept() for _ in clients]
        for i, (client, conn) in enumerate(zip(clients, conns)):
            client.sendall(b"%d" % i)
        received = sorted(int(conn.recv(10)) for conn in conns)
        self.assertEqual(received, list(range(6)))
        stats = proxy.stats()["forward 0"]["connections"]
        self.assertGreater(stats["connect_retries"], 0, stats)
        self.assertEqual(stats["connect_failed"], 0, stats)
        for s in clients + conns:
            s.close()
        self.assertEqual(proxy.stop(), 0, proxy.log())

    def test_unix_socket_files(self):
        echo = Echo("tcp", self.tmp)
        self.addCleanup(echo.close)
        # A stale socket file (its owner died without removing it).
        stale = f"{self.tmp}/stale.sock"
        dead = socket.socket(socket.AF_UNIX)
        dead.bind(stale)
        dead.close()
        # A live one.
        live = h.Listener("unix", self.tmp, name="live")
        self.addCleanup(live.close)
        proxy = self.start(["--listen", f"unix:{stale}", "--connect",
                            echo.address, "--listen", live.address,
                            "--connect", echo.address])
        log = proxy.log()
        self.assertIn(f"removed the stale socket file {stale}", log)
        self.assertIn(f"listen on {live.address}: another process is "
                      "listening on this socket", log)
        self.assertTrue(echo_round_trip(proxy.addresses[0]))
        # Someone replaces the proxy's file: at exit it is left alone.
        os.unlink(stale)
        with open(stale, "w") as f:
            f.write("not yours")
        self.assertEqual(proxy.stop(), 0, proxy.log())
        self.assertTrue(os.path.exists(stale), "removed a file it did not "
                        "create")
        self.assertTrue(os.path.exists(live.address[len("unix:"):]))

    def test_signals_and_clean_stop(self):
        echo = Echo("tcp", self.tmp)
        self.addCleanup(echo.close)
        sock_path = f"{self.tmp}/in.sock"
        proxy = self.start(["--shutdown_grace=500ms", "--listen",
                            f"unix:{sock_path}", "--connect", echo.address])
        self.assertTrue(os.path.exists(sock_path))
        stats = proxy.stats()
        self.assertEqual(stats["forward 0"]["info"]["state"], "listening")
        self.assertIn("pipes", stats)
        idle = h.connect(proxy.addresses[0])
        self.addCleanup(idle.close)
        time.sleep(0.1)
        start = time.monotonic()
        proxy.proc.send_signal(signal.SIGTERM)
        self.assertEqual(proxy.proc.wait(10), 0, proxy.log())
        waited = time.monotonic() - start
        self.assertGreaterEqual(waited, 0.45)
        self.assertLess(waited, 5)
        self.assertFalse(os.path.exists(sock_path))
        log = proxy.log()
        self.assertIn("SIGTERM: stopped listening; waiting up to 500ms for 1 "
                      "open connections", log)
        self.assertIn("shutdown grace over: closing 1 open connections", log)
        self.assertEqual(proxy.exit_stats()["forward 0"]["connections"]
                         ["aborted"], 1)
        self.assertEqual(idle.recv(10), b"")  # closed by the proxy

        # A second signal does not wait for the grace period.
        proxy = self.start(["--shutdown_grace=60s", "--listen", "127.0.0.1:0",
                            "--connect", echo.address])
        idle2 = h.connect(proxy.addresses[0])
        self.addCleanup(idle2.close)
        time.sleep(0.1)
        proxy.proc.send_signal(signal.SIGINT)
        proxy.wait_for_log("SIGINT: stopped listening")
        proxy.proc.send_signal(signal.SIGINT)
        self.assertEqual(proxy.proc.wait(10), 0, proxy.log())
        self.assertIn("SIGINT again: closing 1 open connections now",
                      proxy.log())

    def test_out_of_fds(self):
        """With RLIMIT_NOFILE 32 the proxy runs out of fds: it logs, pauses
        accepting instead of spinning, and serves again once connections
        close."""
        if "UBSAN_OPTIONS" in os.environ:
            # UBSan's vptr check reads a vtable only after probing the
            # memory with a pipe(2) (sanitizer_common's
            # IsAccessibleMemoryRange); with no fd left the probe fails and
            # every virtual call is reported as "invalid vptr". ASan alone
            # runs this test clean.
            self.skipTest("UBSan's vptr check needs free fds")
        echo = Echo("tcp", self.tmp)
        self.addCleanup(echo.close)
        proxy = self.start(["--mode=copy", "--listen", "127.0.0.1:0",
                            "--connect", echo.address], nofile=32)
        clients = [h.connect(proxy.addresses[0]) for _ in range(40)]
        proxy.wait_for_log("Too many open files")
        time.sleep(0.5)
        # Not spinning: a paused listener costs no CPU.
        ticks = os.sysconf("SC_CLK_TCK")
        with open(f"/proc/{proxy.pid}/stat") as f:
            before = sum(int(x) for x in f.read().split()[13:15])
        time.sleep(1)
        with open(f"/proc/{proxy.pid}/stat") as f:
            after = sum(int(x) for x in f.read().split()[13:15])
        self.assertLess((after - before) / ticks, 0.3, "busy while out of fds")
        for c in clients:
            c.close()
        deadline = time.time() + 20
        while True:
            try:
                if echo_round_trip(proxy.addresses[0], timeout=5):
                    break
            except OSError:
                pass
            self.assertLess(time.time(), deadline, proxy.log())
            time.sleep(0.2)
        stats = proxy.stats()["forward 0"]["connections"]
        self.assertGreater(stats["accept_errors"] + stats["connect_failed"], 0,
                           stats)
        self.assertEqual(proxy.stop(), 0, proxy.log())

    def test_ipv6_and_ipv4_on_one_port(self):
        """[::]:P is IPv6 only (IPV6_V6ONLY), so 0.0.0.0:P can be a forward
        too."""
        try:
            socket.socket(socket.AF_INET6).close()
        except OSError:
            self.skipTest("no IPv6")
        echo = Echo("tcp", self.tmp)
        self.addCleanup(echo.close)
        port = free_port()
        proxy = self.start(["--listen", f"[::]:{port}", "--connect",
                            echo.address, "--listen", f"0.0.0.0:{port}",
                            "--connect", echo.address])
        self.assertEqual(sorted(proxy.addresses), [0, 1], proxy.log())
        self.assertTrue(echo_round_trip(f"[::1]:{port}"))
        self.assertTrue(echo_round_trip(f"127.0.0.1:{port}"))
        self.assertEqual(proxy.stop(), 0, proxy.log())


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
