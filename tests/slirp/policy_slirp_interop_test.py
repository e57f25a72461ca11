#!/usr/bin/env python3
"""The egress policy where the C ABI runs it for a tool nobody here wrote
(issue #33 must-show 5): Debian's slirp4netns 1.2.0, unmodified, on
netstack's libslirp.so.0 (NETSTACK_LIBSLIRP_DIR), and netstackd answering
to slirp4netns's command line (NETSTACK_SLIRP4NETNS). slirp4netns has no
policy flag; both read the file NETSTACK_POLICY names, from the
environment that rootlesskit and Podman pass on. The same policy file for
both:

    allow allowed.test

H (lo and a veth into an empty sink namespace, no default route, asserted
before slirp4netns starts) runs dnsmasq (allowed.test -> 198.51.100.1,
denied.test -> 198.51.100.20) and an HTTP server on every address. The
guest is a network namespace the test made; slirp4netns runs with
--configure, --enable-sandbox and --enable-seccomp, so the policy must
outlive the sandbox's pivot_root.

Checked from the guest:
  - denied: 198.51.100.20:8080, which H serves (checked from H itself), is
    refused with an RST (ECONNREFUSED) in under 100 ms, as is
    198.51.100.1:8080 before any DNS answer pinned it; denied.test gets
    NXDOMAIN from 10.0.2.3;
  - allowed: allowed.test resolves through 10.0.2.3 to 198.51.100.1, and
    then 4 MiB flow from it (sha256).
And a policy file with a bad line: slirp4netns does not start (no ready
byte, exit status not 0), and its stderr names the file and the line;
netstackd's own --policy=FILE, which slirp4netns 1.2 does not have, is
read instead of NETSTACK_POLICY.

With neither variable set, both programs are Debian's, which know no
policy: the test is skipped. Needs root, slirp4netns, curl, dig, dnsmasq,
iproute2, util-linux.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest

from tests.backend.backend_topology import H4
from tests.interop import interop_util as iu
from tests.slirp import slirp_util as su

SLIRP4NETNS = "slirp4netns"
HTTP_PORT = 8080
SIZE = 4 << 20
DENIED4 = "198.51.100.20"
DNS4 = "10.0.2.3"
POLICY = "# issue #33: one name, nothing else\nallow allowed.test\n"
BAD_POLICY = "allow allowed.test\nallow 198.51.100.0/33\n"
# A refusal must come at once (docs/POLICY.md), not after a timeout.
REFUSAL_LIMIT_S = 0.1
# How a TCP connect to argv[1]:argv[2] ends, and how long it took:
# "connected 0.0012" or "ConnectionRefusedError 0.0009".
CONNECT = """
import socket, sys, time
s = socket.socket()
s.settimeout(5)
t0 = time.monotonic()
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
    what = "connected"
except OSError as e:
    what = type(e).__name__
print(what, f"{time.monotonic() - t0:.4f}")
"""


class PolicySlirpTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root")
        if not (os.environ.get(su.ENV_DIR) or
                os.environ.get(su.ENV_SLIRP4NETNS)):
            raise unittest.SkipTest(
                f"{su.ENV_DIR} or {su.ENV_SLIRP4NETNS} must name netstack's "
                "libslirp.so.0 or netstackd: Debian's know no policy")
        for tool in (SLIRP4NETNS, "curl", "dig", "dnsmasq", "unshare"):
            if not iu.have(tool):
                raise unittest.SkipTest(
                    f"needs {tool} (tools/dev/install-deps)")
        # Bazel's timeout is a SIGTERM: unwind, so that everything goes.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        cls.procs = su.Processes()
        cls.host = su.Host("nstsp")
        cls.lib = cls.prog = None
        cls.tmp = tempfile.mkdtemp(prefix="nst-sp-", dir="/tmp")
        os.chmod(cls.tmp, 0o755)
        try:
            cls._setup()
        except BaseException:
            cls._teardown()
            raise

    @classmethod
    def _setup(cls):
        tmp, host = cls.tmp, cls.host
        cls.prog = su.Slirp4netns()
        cls.lib = su.Libslirp()
        print(f"slirp4netns under test: {cls.prog.exe}, libslirp "
              f"{cls.lib.describe()}", flush=True)
        host.setup()
        h = host.h
        iu.run("ip", "-n", h, "addr", "add", f"{DENIED4}/32", "dev", "lo")
        www = os.path.join(tmp, "www")
        os.makedirs(www)
        cls.dl_sha = iu.write_random_file(os.path.join(www, "dl.bin"), SIZE,
                                          seed=33)
        cls.procs.start(host.in_ns(h, sys.executable, "-m", "http.server",
                                   "--bind", "::", "--directory", www,
                                   str(HTTP_PORT)))
        cls.procs.start(host.in_ns(
            h, "dnsmasq", "--keep-in-foreground", "--no-resolv", "--no-hosts",
            "--no-poll", "--bind-interfaces", f"--listen-address={H4}",
            "--port=53", f"--address=/allowed.test/{H4}",
            f"--address=/denied.test/{DENIED4}",
            f"--pid-file={tmp}/dnsmasq.pid", "--user=root"))
        ok = iu.wait_for(lambda: iu.run(*host.in_ns(
            h, "dig", f"@{H4}", "+short", "+time=1", "+tries=1",
            "denied.test", "A"), check=False).stdout.strip() == DENIED4, 10)
        assert ok, "dnsmasq does not answer in H"
        # H serves both addresses: a refusal in the guest is the policy's.
        for addr in (H4, DENIED4):
            ok = iu.wait_for(lambda: iu.run(*host.in_ns(
                h, "curl", "-sf", "-o", "/dev/null",
                f"http://{addr}:{HTTP_PORT}/dl.bin"),
                check=False).returncode == 0, 10)
            assert ok, f"H does not serve {addr}:{HTTP_PORT}"
        cls.resolv = os.path.join(tmp, "resolv.conf")
        with open(cls.resolv, "w") as f:
            f.write(f"nameserver {H4}\n")
        cls.policy = os.path.join(tmp, "policy")
        with open(cls.policy, "w") as f:
            f.write(POLICY)
        cls.bad_policy = os.path.join(tmp, "bad-policy")
        with open(cls.bad_policy, "w") as f:
            f.write(BAD_POLICY)
        cls.guest_ns = f"{h[:-2]}-g"
        host.add_ns(cls.guest_ns)
        cls.guest = ["ip", "netns", "exec", cls.guest_ns]
        cls.log_path = os.path.join(tmp, "slirp4netns.log")
        cls.s4, got = cls._start(cls.policy, cls.log_path)
        assert got == b"1", f"slirp4netns not ready ({got!r}): {cls.log()}"
        cls.s4_pid = su.find_process(cls.s4.pid, SLIRP4NETNS)
        assert cls.s4_pid, f"no slirp4netns process: {cls.log()}"
        if cls.prog.is_debian:
            cls.lib.assert_loaded(cls.s4_pid)
        else:
            cls.prog.assert_is(cls.s4_pid)

    @classmethod
    def _start(cls, policy, log_path, extra=()):
        """slirp4netns with NETSTACK_POLICY=`policy` (and `extra` options)
        on the guest's tap0; returns the process and what came on its
        ready fd (b"1", or b"" when it died first)."""
        cls.host.assert_isolated()  # no default route in H: nothing leaves
        ready_r, ready_w = os.pipe()
        cmd = cls.host.in_ns(cls.host.h, *su.in_mount_ns(
            [(cls.resolv, "/etc/resolv.conf")],
            [cls.prog.path, "--configure", "--enable-sandbox",
             "--enable-seccomp", *extra, "-r", str(ready_w),
             "--netns-type=path",
             f"/var/run/netns/{cls.guest_ns}", "tap0"]))
        env = cls.lib.env()
        env["NETSTACK_POLICY"] = policy
        with open(log_path, "w") as log:
            p = cls.procs.start(cmd, stdout=log, stderr=log,
                                pass_fds=(ready_w,), env=env)
        os.close(ready_w)
        try:
            got = su.wait_readable_byte(ready_r, 15)
        finally:
            os.close(ready_r)
        return p, got

    @classmethod
    def log(cls, path=None):
        try:
            with open(path or cls.log_path) as f:
                return "\n--- slirp4netns:\n" + f.read()
        except (OSError, AttributeError):
            return ""

    @classmethod
    def _teardown(cls):
        cls.procs.stop_all()
        cls.host.close()
        for x in (cls.lib, cls.prog):
            if x:
                x.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def tearDownClass(cls):
        cls._teardown()
        su.assert_nothing_left(cls.procs, cls.host, cls.tmp)

    def guest_run(self, *cmd, timeout=60):
        return iu.run(*self.guest, *cmd, check=False, timeout=timeout)

    def connect(self, addr, port=HTTP_PORT):
        out = self.guest_run(sys.executable, "-c", CONNECT, addr,
                             str(port)).stdout.split()
        self.assertEqual(len(out), 2, f"connect {addr}: {out}{self.log()}")
        return out[0], float(out[1])

    def assert_refused(self, addr):
        what, seconds = self.connect(addr)
        print(f"POLICY_SLIRP tool={self.tool()} connect={addr}:{HTTP_PORT} "
              f"result={what} ms={seconds * 1000:.2f}", flush=True)
        self.assertEqual(what, "ConnectionRefusedError",
                         f"{addr}:{HTTP_PORT}{self.log()}")
        self.assertLess(seconds, REFUSAL_LIMIT_S, f"{addr}: {seconds:.4f} s")

    def dig(self, name):
        return self.guest_run("dig", f"@{DNS4}", "+time=2", "+tries=2", name,
                              "A").stdout

    @classmethod
    def tool(cls):
        return ("slirp4netns+netstack" if cls.prog.is_debian
                else "netstackd-as-slirp4netns")

    # --- the checks --------------------------------------------------------

    def test_denied_address_gets_an_rst_at_once(self):
        self.assert_refused(DENIED4)

    def test_denied_name_gets_nxdomain(self):
        out = self.dig("denied.test")
        self.assertIn("status: NXDOMAIN", out, out + self.log())

    def test_allowed_name_pins_its_address_and_data_flows(self):
        # Before any answer pinned it, the address is refused too: a name
        # rule admits only what 10.0.2.3 answered.
        self.assert_refused(H4)
        out = self.dig("allowed.test")
        self.assertIn("status: NOERROR", out, out + self.log())
        self.assertRegex(out, rf"allowed\.test\.\s+\d+\s+IN\s+A\s+"
                         rf"{re.escape(H4)}", out)
        r = su.curl(self.guest, f"http://{H4}:{HTTP_PORT}/dl.bin", 60)
        why = (f"rc {r.returncode}, {r.received} bytes, {r.stderr}"
               f"{self.log()}")
        self.assertEqual(r.returncode, 0, why)
        self.assertEqual(r.received, SIZE, why)
        self.assertEqual(r.received_sha.hexdigest(), self.dl_sha, why)
        print(f"POLICY_SLIRP tool={self.tool()} allowed_download_MBps="
              f"{SIZE / 1e6 / r.seconds:.1f}", flush=True)

    def test_sighup_rereads_the_file(self):
        # netstackd's --policy, whichever way it came: SIGHUP reads the
        # file again (the libslirp stand-in has no such thing).
        if self.prog.is_debian:
            self.skipTest("libslirp reads NETSTACK_POLICY at slirp_new only")

        def reload(text, want):
            with open(self.policy, "w") as f:
                f.write(text)
            os.kill(self.s4_pid, signal.SIGHUP)
            return iu.wait_for(lambda: self.connect(DENIED4)[0] == want, 5)
        try:
            self.assertTrue(reload(POLICY + f"allow {DENIED4}\n", "connected"),
                            self.log())
        finally:
            self.assertTrue(reload(POLICY, "ConnectionRefusedError"),
                            self.log())
        self.assertIn("SIGHUP: --policy", self.log())

    def test_start_line_names_the_policy(self):
        if self.prog.is_debian:
            self.skipTest("Debian's slirp4netns prints no start line of ours")
        log = self.log()
        self.assertRegex(log, r"egress: allowlist, 1 rule \(metadata "
                         r"169\.254\.169\.254, fd00:ec2::254 denied\) from "
                         rf"NETSTACK_POLICY {re.escape(self.policy)}", log)
        self.assertIn(f"--policy={self.policy}", log)

    def assert_does_not_start(self, name, policy, want, extra=()):
        log_path = os.path.join(self.tmp, f"{name}.log")
        guest_ns = self.guest_ns
        # A guest of its own: the first one's tap0 is taken.
        self.__class__.guest_ns = f"{self.host.h[:-2]}-{name}"
        self.host.add_ns(self.guest_ns)
        try:
            p, got = self._start(policy, log_path, extra)
            try:
                rc = p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                rc = None
        finally:
            self.__class__.guest_ns = guest_ns
        log = self.log(log_path)
        print(f"{name}: exit {rc}, ready {got!r}{log}", flush=True)
        self.assertEqual(got, b"", log)
        self.assertIsNotNone(rc, "still running with a bad policy" + log)
        self.assertNotEqual(rc, 0, log)
        self.assertIn(want, log)

    def test_bad_policy_file_does_not_start(self):
        self.assert_does_not_start(
            "b", self.bad_policy,
            f"NETSTACK_POLICY {self.bad_policy}: line 2: ")

    def test_policy_option_wins_over_the_environment(self):
        # netstackd's own --policy (not slirp4netns's): NETSTACK_POLICY
        # names the good file, --policy the bad one, which is read.
        if self.prog.is_debian:
            self.skipTest("slirp4netns 1.2 has no --policy")
        self.assert_does_not_start(
            "o", self.policy, f"--policy {self.bad_policy}: line 2: ",
            extra=[f"--policy={self.bad_policy}"])


if __name__ == "__main__":
    unittest.main()
