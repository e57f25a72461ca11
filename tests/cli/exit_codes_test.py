"""One rule for every tool's exit status (issue #17, part 5):
0 for --help (the usage on stdout), 2 for a usage error (an unknown flag,
a missing or unparsable value: one line on stderr naming the flag), 1 for a
runtime failure. Runs each tool binary as a user would."""
import os
import subprocess
import tempfile
import unittest

RUNFILES = os.path.join(os.environ.get("TEST_SRCDIR", ""),
                        os.environ.get("TEST_WORKSPACE", "netstack"))
TOOLS = {
    "netstackd": "tools/netstackd/netstackd",
    "tcp_benchmark": "tools/tcp_benchmark/tcp_benchmark",
    "pcap_inspect": "tools/pcap_inspect/pcap_inspect",
    "splice_proxy": "tools/splice_proxy/splice_proxy",
}
# A flag of each tool's own that --help must describe.
OWN_FLAG = {
    "netstackd": "--addr",
    "tcp_benchmark": "--role",
    "pcap_inspect": "--summary",
    "splice_proxy": "--listen",
}


def run(tool, *args):
    path = os.path.join(RUNFILES, TOOLS[tool])
    p = subprocess.run([path, *args], capture_output=True, text=True,
                       timeout=60)
    return p.returncode, p.stdout, p.stderr


class HelpExitsZero(unittest.TestCase):
    def test_help(self):
        for tool in TOOLS:
            with self.subTest(tool=tool):
                rc, out, err = run(tool, "--help")
                self.assertEqual(rc, 0, err)
                self.assertIn(OWN_FLAG[tool].lstrip("-"), out)
                self.assertNotIn("No flags matched", out)
                self.assertIn("usage", out.lower())


class UsageErrorsExitTwo(unittest.TestCase):
    def test_unknown_flag(self):
        for tool in TOOLS:
            with self.subTest(tool=tool):
                rc, out, err = run(tool, "--no_such_flag_xyz=1")
                self.assertEqual(rc, 2, out + err)
                self.assertIn("no_such_flag_xyz", err)
                self.assertEqual(len(err.strip().splitlines()), 1, err)

    def test_missing_value(self):
        rc, _, err = run("netstackd", "--addr")
        self.assertEqual(rc, 2, err)
        self.assertIn("--addr needs a value", err)

    def test_duration_without_unit_gets_a_hint(self):
        for tool, flag in (("netstackd", "--delay"),
                           ("tcp_benchmark", "--latency")):
            with self.subTest(tool=tool):
                rc, _, err = run(tool, f"{flag}=10")
                self.assertEqual(rc, 2, err)
                self.assertIn(f"{flag}=10", err)
                self.assertIn("needs its unit", err)

    def test_bad_bool_value(self):
        rc, _, err = run("pcap_inspect", "--json=maybe", "x.pcap")
        self.assertEqual(rc, 2, err)
        self.assertIn("--json=maybe", err)

    def test_no_input_is_usage(self):
        rc, _, err = run("pcap_inspect")
        self.assertEqual(rc, 2, err)


class RuntimeFailuresExitOne(unittest.TestCase):
    def test_pcap_inspect_unreadable_file(self):
        with tempfile.NamedTemporaryFile(suffix=".pcap") as f:
            f.write(b"not a pcap at all")
            f.flush()
            rc, _, err = run("pcap_inspect", f.name)
        self.assertEqual(rc, 1, err)

    def test_splice_proxy_forward_cannot_start(self):
        rc, _, err = run("splice_proxy",
                         "--listen=unix:/nonexistent-dir-xyz/sock",
                         "--connect=127.0.0.1:9")
        self.assertEqual(rc, 1, err)
        self.assertIn("nonexistent-dir-xyz", err)

    def test_tcp_benchmark_refused(self):
        # Port 1 on loopback: nobody listens there in the test's sandbox.
        rc, _, err = run("tcp_benchmark", "--role=client", "--stack=kernel",
                         "--connect=127.0.0.1:1", "--duration=1")
        self.assertEqual(rc, 1, err)

    def test_netstackd_missing_namespace(self):
        # A namespace that does not exist: netstackd fails before it has
        # a link, and never runs in this test's own namespace.
        rc, _, err = run("netstackd", "--tap=nst0", "--netns=no-such-ns-xyz",
                         "--addr=10.99.0.1/24")
        self.assertEqual(rc, 1, err)
        self.assertIn("no-such-ns-xyz", err)


class Sigusr1PrintsAndGoesOn(unittest.TestCase):
    def test_tcp_benchmark_server(self):
        import signal
        import socket
        import time
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        path = os.path.join(RUNFILES, TOOLS["tcp_benchmark"])
        p = subprocess.Popen([path, "--role=server", "--stack=kernel",
                              f"--port={port}"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.time() + 20
            while time.time() < deadline:  # wait until it listens
                try:
                    socket.create_connection(("127.0.0.1", port), 1).close()
                    break
                except OSError:
                    time.sleep(0.05)
            p.send_signal(signal.SIGUSR1)
            time.sleep(0.5)
            self.assertIsNone(p.poll(), "SIGUSR1 killed the server")
            p.send_signal(signal.SIGTERM)
            _, err = p.communicate(timeout=20)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.assertIn("SIGUSR1", err)
        self.assertIn("no counters of ours", err)


if __name__ == "__main__":
    unittest.main()
