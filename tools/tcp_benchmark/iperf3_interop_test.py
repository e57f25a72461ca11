#!/usr/bin/env python3
"""tcp_benchmark's iperf3 roles against stock iperf3 (3.12) on kernel
loopback, both ways, every copy-avoidance mode end to end, and against
peers that break the protocol (which must end with a clear error and a
non-zero exit, never a hang). No root or namespaces needed.
"""
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import threading
import time
import unittest

TIMEOUT = 40  # seconds any one process may take


def binary():
    srcdir = os.environ.get("TEST_SRCDIR")
    if srcdir:
        ws = os.environ.get("TEST_WORKSPACE", "netstack")
        return os.path.join(srcdir, ws, "tools/tcp_benchmark/tcp_benchmark")
    return os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "tcp_benchmark")


def free_port():
    with socket.socket(socket.AF_INET6) as s:
        s.bind(("::", 0))
        return s.getsockname()[1]


def listening(port):
    """Whether a TCP socket listens on `port` (from /proc: connecting to
    probe would start a test on a --one_off server)."""
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    local, state = fields[1], fields[3]
                    if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                        return True
        except OSError:
            pass
    return False


def wait_listening(port, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if listening(port):
            return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on {port}")


def last_json(text):
    """The last line of `text` that is a JSON object."""
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError(f"no JSON line in {text!r}")


class Proc:
    def __init__(self, args):
        self.args = args
        self.p = subprocess.Popen(args, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)

    def wait(self, timeout=TIMEOUT):
        try:
            out, err = self.p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            out, err = self.p.communicate()
            raise AssertionError(f"hung: {self.args}\n{out}\n{err}")
        return self.p.returncode, out, err


def ours(*args):
    return [binary(), "--interval=0.5"] + list(args)


@unittest.skipUnless(shutil.which("iperf3"), "needs iperf3 (tools/dev/install-deps)")
class StockClientOurServer(unittest.TestCase):
    """iperf3 -c against tcp_benchmark --role=server --one_off."""

    def run_pair(self, iperf3_args, server_args=()):
        port = free_port()
        server = Proc(ours("--role=server", "--stack=kernel", f"--port={port}",
                           "--one_off", "--json", *server_args))
        wait_listening(port)
        rc, out, err = Proc(["iperf3", "-c", "127.0.0.1", "-p", str(port),
                             "-t", "2", "--json", *iperf3_args]).wait()
        src, sout, serr = server.wait()
        self.assertEqual(rc, 0, out + err + serr)
        self.assertEqual(src, 0, serr)
        stock = json.loads(out)
        self.assertNotIn("error", stock)
        mine = last_json(sout)
        return stock["end"], mine

    def check(self, end, mine, reverse, streams):
        received = end["sum_received"]["bytes"]
        sent = end["sum_sent"]["bytes"]
        self.assertGreater(received, 0)
        # Both sides print what was exchanged in the results: the counts
        # agree exactly, and the receiver never got more than was sent.
        self.assertEqual(mine["bytes"], received)
        self.assertEqual(mine["sender_bytes"], sent)
        self.assertLessEqual(received, sent)
        self.assertEqual(mine["reverse"], reverse)
        self.assertEqual(mine["streams"], streams)
        self.assertGreater(mine["gbps"], 0)

    def test_forward(self):
        end, mine = self.run_pair([])
        self.check(end, mine, False, 1)

    def test_reverse(self):
        end, mine = self.run_pair(["-R"])
        self.check(end, mine, True, 1)

    def test_parallel(self):
        end, mine = self.run_pair(["-P", "2"])
        self.check(end, mine, False, 2)
        self.assertEqual(len(end["streams"]), 2)

    def test_server_splice_receive(self):
        end, mine = self.run_pair([], ["--recv_mode=splice"])
        self.check(end, mine, False, 1)

    def test_server_vmsplice_send(self):
        end, mine = self.run_pair(["-R"], ["--send_mode=vmsplice"])
        self.check(end, mine, True, 1)

    def test_server_sendfile_send(self):
        end, mine = self.run_pair(["-R", "-P", "2"], ["--send_mode=sendfile"])
        self.check(end, mine, True, 2)


@unittest.skipUnless(shutil.which("iperf3"), "needs iperf3 (tools/dev/install-deps)")
class OurClientStockServer(unittest.TestCase):
    """tcp_benchmark --role=client against iperf3 -s -1."""

    def run_pair(self, client_args):
        port = free_port()
        server = Proc(["iperf3", "-s", "-1", "-p", str(port), "--json"])
        wait_listening(port)
        rc, out, err = Proc(ours("--role=client", "--stack=kernel",
                                 f"--connect=127.0.0.1:{port}", "--duration=2",
                                 "--json", *client_args)).wait()
        src, sout, serr = server.wait()
        self.assertEqual(rc, 0, err)
        self.assertEqual(src, 0, sout + serr)
        stock = json.loads(sout)
        self.assertNotIn("error", stock)
        mine = json.loads(out)  # exactly one JSON object on stdout
        self.assertIn("Interval", err)  # progress went to stderr
        self.assertGreater(mine["bytes"], 0)
        return stock["end"], mine

    def test_forward(self):
        end, mine = self.run_pair([])
        self.assertEqual(mine["bytes"], end["sum_received"]["bytes"])
        self.assertGreaterEqual(mine["sender_bytes"], mine["bytes"])

    def test_reverse(self):
        # iperf3 -s 3.12 leaves its own receiver count at 0 in reverse mode
        # (stock client or not): compare what it sent.
        end, mine = self.run_pair(["--reverse"])
        self.assertTrue(mine["reverse"])
        self.assertEqual(mine["sender_bytes"], end["sum_sent"]["bytes"])
        self.assertLessEqual(mine["bytes"], mine["sender_bytes"])

    def test_parallel_reverse(self):
        end, mine = self.run_pair(["--reverse", "--streams=3"])
        self.assertEqual(mine["streams"], 3)
        self.assertEqual(mine["sender_bytes"], end["sum_sent"]["bytes"])

    def test_client_vmsplice_send(self):
        end, mine = self.run_pair(["--send_mode=vmsplice"])
        self.assertEqual(mine["bytes"], end["sum_received"]["bytes"])

    def test_client_sendfile_send(self):
        end, mine = self.run_pair(["--send_mode=sendfile", "--streams=2"])
        self.assertEqual(mine["bytes"], end["sum_received"]["bytes"])

    def test_client_splice_receive(self):
        end, mine = self.run_pair(["--reverse", "--recv_mode=splice"])
        self.assertEqual(mine["sender_bytes"], end["sum_sent"]["bytes"])


class OursBothEnds(unittest.TestCase):
    def test_client_and_server_agree(self):
        port = free_port()
        server = Proc(ours("--role=server", "--stack=kernel", f"--port={port}",
                           "--one_off", "--json", "--recv_mode=splice"))
        wait_listening(port)
        rc, out, err = Proc(ours("--role=client", "--stack=kernel",
                                 f"--connect=[::1]:{port}", "--duration=1",
                                 "--streams=2", "--send_mode=vmsplice",
                                 "--json")).wait()
        src, sout, serr = server.wait()
        self.assertEqual(rc, 0, err)
        self.assertEqual(src, 0, serr)
        client, srv = json.loads(out), last_json(sout)
        self.assertEqual(client["bytes"], srv["bytes"])
        self.assertEqual(client["sender_bytes"], srv["sender_bytes"])
        self.assertGreater(client["bytes"], 0)


def recv_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


COOKIE = b"abcdefghijklmnopqrstuvwxyz2345672345\0"


class BadClientsAgainstOurServer(unittest.TestCase):
    """Our server with --one_off must fail the test (exit 1), close the
    connection and not hang, whatever the client does."""

    def setUp(self):
        self.port = free_port()
        self.server = Proc(ours("--role=server", "--stack=kernel",
                                f"--port={self.port}", "--one_off"))
        wait_listening(self.port)
        self.sock = socket.create_connection(("127.0.0.1", self.port))
        self.sock.settimeout(15)

    def tearDown(self):
        self.sock.close()

    def expect_failure(self, text):
        rc, out, err = self.server.wait()
        self.assertEqual(rc, 1, out + err)
        self.assertIn(text, err)
        # The server closed our connection.
        try:
            while self.sock.recv(4096):
                pass
        except OSError:  # reset, or closed by the test itself
            pass

    def params(self, body):
        self.sock.sendall(COOKIE)
        self.assertEqual(recv_exact(self.sock, 1), b"\x09")  # PARAM_EXCHANGE
        self.sock.sendall(struct.pack(">I", len(body)) + body)

    def test_bad_cookie(self):
        self.sock.sendall(b"\x01" * 37)
        self.expect_failure("cookie")

    def test_bad_json(self):
        self.params(b'{"tcp":true,"time":')
        self.assertEqual(recv_exact(self.sock, 1), b"\xfe")  # SERVER_ERROR
        self.expect_failure("bad JSON")

    def test_absurd_length(self):
        self.sock.sendall(COOKIE)
        recv_exact(self.sock, 1)
        self.sock.sendall(b"\xff\xff\xff\xff")
        self.expect_failure("out of range")

    def test_udp_refused(self):
        self.params(b'{"udp":true,"time":1,"parallel":1,"len":1000}')
        self.assertEqual(recv_exact(self.sock, 1), b"\xfe")
        iperf_errno, = struct.unpack(">i", recv_exact(self.sock, 4))
        self.assertEqual(iperf_errno, 131)  # IEPROTOCOL
        self.expect_failure("only TCP")

    def test_wrong_cookie_on_data_then_unexpected_state(self):
        self.params(b'{"tcp":true,"time":1,"parallel":1}')
        self.assertEqual(recv_exact(self.sock, 1), b"\x0a")  # CREATE_STREAMS
        with socket.create_connection(("127.0.0.1", self.port)) as data:
            data.settimeout(15)
            data.sendall(b"z" * 36 + b"\0")
            self.assertEqual(recv_exact(data, 1), b"\xff")  # ACCESS_DENIED
        self.sock.sendall(b"\x0e")  # DISPLAY_RESULTS: not the client's
        self.expect_failure("unexpected DISPLAY_RESULTS")

    def test_client_closes_early(self):
        self.params(b'{"tcp":true,"time":1,"parallel":2}')
        # Read CREATE_STREAMS first: a close with that byte unread would
        # send an RST instead of a FIN (or not, if the byte came late), and
        # the server would report a reset, not a close (a flake CI hit).
        self.assertEqual(recv_exact(self.sock, 1), b"\x0a")
        self.sock.close()
        self.expect_failure("closed the control connection")

    def test_client_resets_early(self):
        self.params(b'{"tcp":true,"time":1,"parallel":2}')
        self.assertEqual(recv_exact(self.sock, 1), b"\x0a")
        # SO_LINGER 0: close sends an RST.
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                             struct.pack("ii", 1, 0))
        self.sock.close()
        self.expect_failure("connection reset by peer")

    def test_silent_client_times_out(self):
        self.sock.sendall(COOKIE[:10])
        self.expect_failure("went silent")


class FakeServer:
    """A listener thread that runs `script(conn)` on the first connection."""

    def __init__(self, script):
        self.sock = socket.socket(socket.AF_INET)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.script = script
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        conn, _ = self.sock.accept()
        conn.settimeout(15)
        with conn:
            try:
                self.script(self, conn)
            except OSError:
                pass

    def close(self):
        self.sock.close()
        self.thread.join(timeout=5)


class BadServersAgainstOurClient(unittest.TestCase):
    def run_client(self, script, expect):
        fake = FakeServer(script)
        try:
            rc, out, err = Proc(ours("--role=client", "--stack=kernel",
                                     f"--connect=127.0.0.1:{fake.port}",
                                     "--duration=1")).wait()
        finally:
            fake.close()
        self.assertEqual(rc, 1, out + err)
        self.assertIn(expect, err)

    @staticmethod
    def handshake(fake, conn):
        recv_exact(conn, 37)
        conn.sendall(b"\x09")
        n, = struct.unpack(">I", recv_exact(conn, 4))
        return json.loads(recv_exact(conn, n))

    def test_access_denied(self):
        self.run_client(lambda f, c: c.sendall(b"\xff"), "busy")

    def test_unexpected_state(self):
        def script(f, c):
            recv_exact(c, 37)
            c.sendall(b"\x0d")  # EXCHANGE_RESULTS before anything
            time.sleep(1)
        self.run_client(script, "unexpected EXCHANGE_RESULTS")

    def test_server_error(self):
        def script(f, c):
            self.handshake(f, c)
            c.sendall(b"\xfe" + struct.pack(">ii", 131, 0))
            time.sleep(1)
        self.run_client(script, "iperf3 error 131")

    def test_closes_early(self):
        def script(f, c):
            self.handshake(f, c)
        self.run_client(script, "closed the control connection")

    def test_bad_results(self):
        def script(f, c):
            params = self.handshake(f, c)
            c.sendall(b"\x0a")
            data = [f.sock.accept()[0] for _ in range(params["parallel"])]
            c.sendall(b"\x01\x02")
            self.assertEqual(recv_exact(c, 1), b"\x04")  # TEST_END
            c.sendall(b"\x0d")
            n, = struct.unpack(">I", recv_exact(c, 4))
            recv_exact(c, n)
            bad = b'{"cpu_util_total":1,"streams":[}'
            c.sendall(struct.pack(">I", len(bad)) + bad)
            time.sleep(1)
            for d in data:
                d.close()
        self.run_client(script, "bad JSON")

    def test_silent_server_times_out(self):
        def script(f, c):
            time.sleep(14)
        self.run_client(script, "no answer from the server")


class CommandLine(unittest.TestCase):
    def test_bad_flags_exit_2(self):
        for args in (["--role=client", "--stack=kernel", "--connect=nonsense"],
                     ["--role=bogus"],
                     ["--role=server", "--stack=kernel", "--recv_mode=zero"],
                     ["--role=server", "--no-such-flag"],
                     ["--role=server", "--streams=many"]):
            rc, out, err = Proc([binary()] + args).wait()
            self.assertEqual(rc, 2, (args, err))
            self.assertIn("tcp_benchmark:", err)

    def test_help_lists_only_our_flags(self):
        rc, out, err = Proc([binary(), "--help"]).wait()
        text = out + err
        self.assertIn("--recv-mode", text)
        self.assertIn("iperf3", text)
        self.assertNotIn("--flagfile", text)

    def test_dashed_names(self):
        port = free_port()
        server = Proc(ours("--role=server", "--stack=kernel", f"--port={port}",
                           "--one-off", "--recv-mode=splice"))
        wait_listening(port)
        rc, out, err = Proc(ours("--role=client", "--stack=kernel",
                                 f"--connect=127.0.0.1:{port}",
                                 "--duration=0.5", "--send-mode=sendfile")).wait()
        self.assertEqual(rc, 0, err)
        self.assertIn("sender", out)
        self.assertIn("receiver", out)
        self.assertEqual(server.wait()[0], 0)

    def test_sigterm_stops_a_serving_server(self):
        port = free_port()
        server = Proc(ours("--role=server", "--stack=kernel", f"--port={port}"))
        wait_listening(port)
        server.p.send_signal(signal.SIGTERM)
        rc, out, err = server.wait()
        self.assertEqual(rc, 0, err)

    def test_sigint_mid_test_stops_both(self):
        port = free_port()
        server = Proc(ours("--role=server", "--stack=kernel", f"--port={port}"))
        wait_listening(port)
        client = Proc(ours("--role=client", "--stack=kernel",
                           f"--connect=127.0.0.1:{port}", "--duration=30"))
        time.sleep(1.5)
        client.p.send_signal(signal.SIGINT)
        rc, out, err = client.wait(timeout=10)
        self.assertEqual(rc, 1)
        self.assertIn("interrupted", err)
        server.p.send_signal(signal.SIGINT)
        src, sout, serr = server.wait(timeout=10)
        self.assertEqual(src, 0, serr)
        self.assertIn("client terminated", serr)


if __name__ == "__main__":
    unittest.main()
