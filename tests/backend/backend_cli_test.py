#!/usr/bin/env python3
"""netstackd --backend's flags: bad input is a clear message and exit
status 2 before anything is opened; --help names the backend flags."""
import os
import subprocess
import tempfile
import unittest

RUNFILES = os.environ.get("TEST_SRCDIR", "")
WORKSPACE = os.environ.get("TEST_WORKSPACE", "netstack")
NETSTACKD = os.path.join(RUNFILES, WORKSPACE, "tools/netstackd/netstackd")


def run(*args):
    # In a network namespace of its own (as root), so that a flag check
    # that regressed would start the backend where it can reach nothing.
    return subprocess.run(["unshare", "--net", NETSTACKD, *args],
                          capture_output=True, text=True, timeout=60)


class BackendCli(unittest.TestCase):
    def expect_usage(self, args, message):
        p = run(*args)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn(message, p.stderr)

    def test_bad_flags(self):
        tap = ["--tap", "t0", "--backend"]
        self.expect_usage(tap + ["--addr", "10.0.0.2/24"],
                          "--backend takes its addresses from --net")
        self.expect_usage(tap + ["--gateway", "10.0.0.1"],
                          "no --addr, --addr6 or --gateway")
        self.expect_usage(tap + ["--net", "10.0.2.0"], "--net: bad IPv4 CIDR")
        self.expect_usage(tap + ["--net", "10.0.2.0/28"], "too small")
        self.expect_usage(tap + ["--net6", "fd00::/129"], "--net6: bad IPv6")
        self.expect_usage(tap + ["--mtu", "1000"], "out of range [1280, 65535]")
        self.expect_usage(tap + ["--outbound-bind", "nope"],
                          "--outbound-bind: 'nope' is not an IP address")
        self.expect_usage(tap + ["--outbound-bind", "10.0.0.1,10.0.0.2"],
                          "two IPv4 addresses")
        self.expect_usage(tap + ["--max-tcp-flows", "0"],
                          "--max-tcp-flows 0 out of range")
        self.expect_usage(["--tap", "t0", "--addr", "10.0.0.2/24",
                           "--host-loopback"], "need --backend")
        self.expect_usage(tap + ["--max-udp-flows", "0"],
                          "--max-udp-flows 0 out of range")
        self.expect_usage(tap + ["--udp-timeout", "0s"], "is below 1s")
        self.expect_usage(tap + ["--dns-upstream", "dns.example"],
                          "--dns-upstream:")
        self.expect_usage(tap + ["--dns-upstream", "10.0.0.1:0"],
                          "--dns-upstream:")
        self.expect_usage(["--tap", "t0", "--addr", "10.0.0.2/24",
                           "--dns-upstream", "10.0.0.1"], "need --backend")

    def test_bad_egress_policy_flags(self):
        backend = ["--tap", "t0", "--backend"]

        def expect_usage(args, message):
            # A check that regressed starts netstackd: fail in 10 s.
            try:
                p = subprocess.run(["unshare", "--net", NETSTACKD, *args],
                                   capture_output=True, text=True, timeout=10)
            except subprocess.TimeoutExpired:
                self.fail(f"{args}: netstackd started")
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(message, p.stderr)

        # A bad rule is named, with what is wrong with it.
        expect_usage(backend + ["--allow", "exa mple.com"],
                     "--allow exa mple.com: ")
        expect_usage(backend + ["--deny=10.0.0.0/33"],
                     "--deny 10.0.0.0/33: ")
        expect_usage(backend + ["--allow"], "--allow needs a RULE")
        expect_usage(backend + ["--egress", "closed"],
                     "--egress 'closed': want open or none")
        expect_usage(backend + ["--policy", "/nonexistent/policy"],
                     "--policy /nonexistent/policy: ")
        expect_usage(backend + ["--flow-log-rate", "0"],
                     "--flow-log-rate 0 out of range")
        expect_usage(["--tap", "t0", "--addr", "10.0.0.2/24",
                      "--allow", "example.com"], "need --backend")
        with tempfile.NamedTemporaryFile("w", suffix=".policy") as f:
            f.write("allow example.com\n# a comment\nfrobnicate x\n")
            f.flush()
            expect_usage(backend + ["--policy", f.name],
                         f"--policy {f.name}: line 3: ")

    def test_every_allow_and_deny_counts(self):
        # Abseil would keep only the last of a repeated flag: the start
        # line counts all of them, in both spellings, with the file's.
        with tempfile.TemporaryDirectory() as d, \
                open(os.path.join(d, "policy"), "w") as f:
            f.write("allow a.example\ndeny 10.0.0.0/8\n")
            f.flush()
            p = subprocess.Popen(
                ["unshare", "--net", NETSTACKD, "--backend", "--unix",
                 os.path.join(d, "vm.sock"), "--allow", "example.com",
                 "--allow=tcp:192.0.2.0/24:443", "--deny", "192.0.2.7",
                 "--policy", f.name],
                stderr=subprocess.PIPE, text=True)
            try:
                lines = []
                for line in p.stderr:
                    lines.append(line)
                    if "GSO:" in line:
                        break
            finally:
                p.terminate()
                p.communicate(timeout=30)
        egress = [l for l in lines if "egress:" in l]
        self.assertEqual(len(egress), 1, "".join(lines))
        self.assertIn("egress: allowlist, 5 rules (metadata 169.254.169.254, "
                      "fd00:ec2::254 denied)", egress[0])

    def test_bad_fd_flags(self):
        self.expect_usage(["--backend", "--fd", "0"], "--fd needs --fd-type")
        self.expect_usage(["--backend", "--fd", "0", "--fd-type", "vhost"],
                          "--fd needs --fd-type tap or stream")
        self.expect_usage(["--backend", "--fd-type", "tap", "--tap", "t0"],
                          "--fd-type needs --fd N")
        self.expect_usage(["--backend", "--fd", "0", "--tap", "t0",
                           "--fd-type", "tap"], "exactly one of --tap")
        self.expect_usage(["--backend", "--fd", "77", "--fd-type", "tap"],
                          "--fd 77 is not open in this process")
        self.expect_usage(["--backend", "--fd", "0", "--fd-type", "tap",
                           "--netns", "x"], "--netns does not apply to --fd")
        self.expect_usage(["--backend", "--fd", "0", "--fd-type", "stream",
                           "--hostgso"], "--hostgso needs --packet or --tap")

    def test_fd_that_is_not_a_tap_is_refused_at_start(self):
        # stdin is a pipe here: open, but no TAP.
        p = subprocess.run(["unshare", "--net", NETSTACKD, "--backend", "--fd",
                            "0", "--fd-type", "tap", "--dns-upstream",
                            "127.0.0.1"], input="", capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("TAP fd 0 is not an attached TUN/TAP device", p.stderr)

    def test_help_names_the_backend_flags(self):
        p = run("--help")
        out = p.stdout + p.stderr
        # --help names flags with dashes (tools/common/cli.h FormatHelp).
        for flag in ("--backend", "--net", "--net6", "--host-loopback",
                     "--outbound-bind", "--max-tcp-flows", "--max-udp-flows",
                     "--udp-timeout", "--dns-upstream", "--fd", "--fd-type"):
            self.assertIn(flag, out)
        self.assertIn("netstackd --backend", out)


if __name__ == "__main__":
    unittest.main()
