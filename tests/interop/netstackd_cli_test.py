#!/usr/bin/env python3
"""netstackd's command line: bad input gets a clear message, a non-zero
exit status and leaves nothing behind; SIGUSR1 prints counters; SIGTERM
stops it cleanly. Needs root (namespaces, TAP)."""
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

RUNFILES = os.environ.get("TEST_SRCDIR", "")
WORKSPACE = os.environ.get("TEST_WORKSPACE", "netstack")
NETSTACKD = os.path.join(RUNFILES, WORKSPACE, "tools/netstackd/netstackd")


def run(*cmd, check=True):
    return subprocess.run(list(cmd), check=check, capture_output=True,
                          text=True, timeout=60)


class NetstackdCli(unittest.TestCase):
    def setUp(self):
        self.assertEqual(os.geteuid(), 0, "this test needs root")
        self.ns = f"nst-cli-{os.getpid()}"
        run("ip", "netns", "add", self.ns)
        self.addCleanup(run, "ip", "netns", "del", self.ns, check=False)
        self.tmp = tempfile.mkdtemp(prefix="nst-cli-")
        self.addCleanup(lambda: os.rmdir(self.tmp))

    def expect_failure(self, args, code, message):
        p = run(NETSTACKD, *args, check=False)
        self.assertEqual(p.returncode, code, p.stderr)
        self.assertIn(message, p.stderr)
        self.assertEqual(os.listdir(self.tmp), [], "left files behind")
        return p

    def test_bad_flags(self):
        self.expect_failure(["--tap", "t0", "--addr", "10.0.0.2"], 2,
                            "bad IPv4 CIDR '10.0.0.2'")
        self.expect_failure(["--tap", "t0", "--addr6", "fd00::2/129"], 2,
                            "bad IPv6 CIDR")
        self.expect_failure(["--addr", "10.0.0.2/24"], 2,
                            "exactly one of --tap, --packet, --unix, "
                            "--vhost-user or --fd")
        self.expect_failure(["--tap", "t0", "--packet", "p0", "--addr",
                             "10.0.0.2/24"], 2, "exactly one of")
        self.expect_failure(["--tap", "t0", "--addr", "10.0.0.2/24",
                             "--loss", "5"], 2, "not a fraction")
        self.expect_failure(["--tap", "t0", "--addr", "10.0.0.2/24",
                             "--delay", "1ms", "--jitter", "5ms"], 2,
                            "--jitter must not exceed --delay")
        self.expect_failure(["--tap", "t0", "--addr", "10.0.0.2/24",
                             "--gateway", "nope"], 2, "not an IP address")
        self.expect_failure(["--tap", "t0", "--addr", "10.0.0.2/24",
                             "--mtu", "100"], 2, "out of range")
        for t in ("500ms", "2m1s"):
            self.expect_failure(["--tap", "t0", "--addr", "10.0.0.2/24",
                                 "--reassembly-timeout", t], 2,
                                f"--reassembly-timeout {t} out of range "
                                "[1s, 2m]")
        self.expect_failure(["--unix", "/tmp/x.sock", "--netns", "x",
                             "--addr", "10.0.0.2/24"], 2,
                            "--netns does not apply to --unix")
        self.expect_failure(["--tap", "t0", "--unix_connect",
                             "--addr", "10.0.0.2/24"], 2,
                            "--unix_connect needs --unix")
        # A GSO size without a GSO mode would do nothing.
        for gso in (["--gso", "1000"], ["--gso=1000"]):
            self.expect_failure(["--tap", "t0", "--addr", "10.0.0.2/24",
                                 *gso], 2, "--gso 1000 needs --swgso or "
                                           "--hostgso")

    def test_bad_service_flags(self):
        base = ["--tap", "t0", "--addr", "10.0.0.2/24"]
        self.expect_failure(base + ["--echo-port", "70000"], 2,
                            "--echo-port 70000 out of range [1, 65535]")
        self.expect_failure(base + ["--discard-port=-1"], 2,
                            "--discard-port -1 out of range")
        self.expect_failure(base + ["--http_port", "65536", "--http-root",
                                    "/"], 2, "--http-port 65536 out of range")
        self.expect_failure(base + ["--http-port", "8080"], 2,
                            "--http-port needs --http-root DIR")
        self.expect_failure(base + ["--loss", "0.1", "--fault_queue_limit",
                                    "0"], 2, "--fault_queue_limit 0 out of range")

    def test_help_lists_the_flags(self):
        p = run(NETSTACKD, "--help", check=False)
        out = p.stdout + p.stderr
        # --help names flags with dashes (tools/common/cli.h FormatHelp).
        for flag in ("--http-root", "--http-port", "--echo-port",
                     "--discard-port", "--fault-queue-limit", "--packet",
                     "--loss"):
            self.assertIn(flag, out)
        self.assertIn("Flag names take '-' or '_'", out)

    def test_service_resources(self):
        www = tempfile.mkdtemp(prefix="nst-cli-www-")
        self.addCleanup(lambda: os.rmdir(www))
        base = ["--tap", "nstcli2", "--netns", self.ns, "--addr", "10.0.0.2/24"]
        self.expect_failure(base + ["--http-root", "/nonexistent-nst-www"], 1,
                            "--http-root: '/nonexistent-nst-www': No such file")
        # The underscore spelling is the same flag.
        self.expect_failure(base + ["--http_root", "/nonexistent-nst-www"], 1,
                            "--http-root: '/nonexistent-nst-www'")
        self.expect_failure(base + ["--http-root", "/etc/hostname"], 1,
                            "Not a directory")
        # Two services on one port: the second cannot bind it.
        self.expect_failure(base + ["--echo-port", "7", "--discard-port", "7"],
                            1, "--discard-port: TCP 0.0.0.0:7: address already in use")
        self.expect_failure(base + ["--http-root", www, "--http-port", "9",
                                    "--discard-port", "9"], 1,
                            "--discard-port: TCP 0.0.0.0:9: address already in use")
        # Nothing is left behind: the TAP went away with the process.
        links = run("ip", "-n", self.ns, "link", "show").stdout
        self.assertNotIn("nstcli2", links)

    def test_missing_resources(self):
        self.expect_failure(["--packet", "nst-nothere", "--netns", self.ns,
                             "--addr", "10.0.0.2/24"], 1, "does not exist")
        self.expect_failure(["--tap", "t0", "--netns", "nst-no-such-ns",
                             "--addr", "10.0.0.2/24"], 1,
                            "netns 'nst-no-such-ns' does not exist")
        # An unwritable pcap path: the link is opened first, so the error
        # must also close it (the TAP is not left attached).
        self.expect_failure(["--tap", "nstcli0", "--netns", self.ns,
                             "--addr", "10.0.0.2/24", "--pcap",
                             "/nonexistent-dir/x.pcap"], 1, "--pcap")

    def test_busy_tap_signals_and_clean_stop(self):
        log = os.path.join(self.tmp, "log")
        pcap = os.path.join(self.tmp, "x.pcap")
        with open(log, "w") as f:
            proc = subprocess.Popen(
                [NETSTACKD, "--tap", "nstcli1", "--netns", self.ns,
                 "--addr", "10.0.0.2/24", "--addr6", "fd00:5::2/64",
                 "--echo-port", "7", "--swgso", "--gso", "30000",
                 "--pcap", pcap],
                stdout=f, stderr=f)
        try:
            deadline = time.time() + 10
            while "netstackd: GSO:" not in open(log).read():
                self.assertIsNone(proc.poll(), open(log).read())
                self.assertLess(time.time(), deadline, "did not start")
                time.sleep(0.05)
            # The start lines say what runs where.
            start = open(log).read()
            self.assertIn("-> tap:nstcli1@", start)
            self.assertIn("netstackd: addresses: 10.0.0.2/24 fd00:5::2/64\n",
                          start)
            self.assertIn("netstackd: services: echo tcp+udp/7\n", start)
            self.assertIn("netstackd: GSO: software, 30000 bytes\n", start)
            # A second daemon on the same TAP: busy.
            p = run(NETSTACKD, "--tap", "nstcli1", "--netns", self.ns,
                    "--addr", "10.0.0.3/24", check=False)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn("busy", p.stderr)
            proc.send_signal(signal.SIGUSR1)
            deadline = time.time() + 10
            while "counters (SIGUSR1)" not in open(log).read():
                self.assertLess(time.time(), deadline, open(log).read())
                time.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            self.assertEqual(proc.wait(timeout=10), 0, open(log).read())
            self.assertIn("counters (exit)", open(log).read())
            self.assertTrue(os.path.getsize(pcap) >= 24, "pcap header missing")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for name in os.listdir(self.tmp):
                os.unlink(os.path.join(self.tmp, name))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
