#!/usr/bin/env python3
"""Debian's rootlesskit 1.1.0, unmodified, with slirp4netns on the
libslirp.so.0 under test (issue #31 part 4 item 3; slirp_util.py:
NETSTACK_LIBSLIRP_DIR unset is Debian's libslirp0, the baseline).

As uid 65534, in the "host" H (lo and a veth into an empty sink
namespace, no default route: asserted first), the test runs

  rootlesskit --state-dir=DIR --net=slirp4netns --port-driver=slirp4netns
      -p 127.0.0.1:FWD_PORT:80/tcp --slirp4netns-sandbox=true
      --slirp4netns-seccomp=true sh child.sh

rootlesskit makes the user, mount and network namespaces, maps 65534's
subordinate ids (the test writes an /etc/subuid and /etc/subgid entry for
nobody and restores both files after), creates tap0, starts slirp4netns
with its own environment (so LD_LIBRARY_PATH reaches it), and publishes
the port through slirp4netns's API (add_hostfwd). child.sh, the command
inside, resolves a name (rootlesskit's resolv.conf names 10.0.2.3, which
slirp4netns forwards to H's dnsmasq), downloads 16 MiB from H's HTTP
server, then serves 16 MiB on port 80. The test checks the download
(sha256), the name, and fetches the served file through the published
port from H (sha256); and that the slirp4netns rootlesskit started runs
as 65534 and mapped the library under test (/proc/PID/maps). Last,
rootlesskit is stopped (SIGTERM): slirp4netns must go with it, and the
published port with them.

All of it runs in a mount namespace of the test's own, where H's
resolv.conf names dnsmasq and /dev/net/tun is a 0666 node (the machine's
is 0600 and resolv.conf names a server H cannot reach). Needs root,
rootlesskit, slirp4netns, uidmap (newuidmap), curl, dnsmasq, dig.
"""
import hashlib
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

NAME = "rk.netstack.test"
HTTP_PORT = 8080
FWD_PORT = 18082
SIZE = 16 << 20
SUBID_START = 200000
SUBID_COUNT = 65536
# The command inside rootlesskit's namespaces. What it finds goes to files
# in $OUT; the test checks them (it does not trust the script's verdict).
CHILD = """#!/bin/sh
getent hosts "$NAME" >"$OUT/dns.txt" 2>&1
ip -o -4 addr show dev tap0 >"$OUT/addr.txt" 2>&1
curl -sS -m 60 -o "$OUT/dl.bin" "$URL" 2>"$OUT/curl.txt"
echo "rc=$?" >>"$OUT/curl.txt"
exec /usr/bin/python3 -m http.server 80 --bind 0.0.0.0 --directory "$WWW"
"""


class RootlesskitTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root")
        for tool in ("rootlesskit", "slirp4netns", "newuidmap", "newgidmap",
                     "curl", "dnsmasq", "dig", "setpriv", "unshare"):
            if not iu.have(tool):
                raise unittest.SkipTest(
                    f"needs {tool} (tools/dev/install-deps)")
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        cls.procs = su.Processes()
        cls.host = su.Host("nstrk")
        cls.lib = None
        cls.subids = {}   # file -> its bytes before the test
        cls.tmp = tempfile.mkdtemp(prefix="nst-rk-", dir="/tmp")
        os.chmod(cls.tmp, 0o755)
        try:
            cls._setup()
        except BaseException:
            cls._teardown()
            raise

    @classmethod
    def _add_subids(cls):
        su.add_nobody_subids(cls.subids, SUBID_START, SUBID_COUNT)

    @classmethod
    def _restore_subids(cls):
        su.restore_subids(cls.subids)

    @classmethod
    def _setup(cls):
        tmp = cls.tmp
        cls.lib = su.Libslirp().readable_by_all(tmp)
        print(f"libslirp under test: {cls.lib.describe()}", flush=True)
        cls._add_subids()
        host = cls.host
        host.setup()
        h = host.h
        www, gwww = os.path.join(tmp, "www"), os.path.join(tmp, "gwww")
        cls.out = os.path.join(tmp, "out")   # uid 65534 writes here
        for d in (www, gwww, cls.out):
            os.makedirs(d)
            os.chmod(d, 0o755)
        os.chown(cls.out, su.NOBODY_UID, su.NOBODY_UID)
        cls.dl_sha = iu.write_random_file(os.path.join(www, "dl.bin"), SIZE,
                                          seed=33)
        cls.up_sha = iu.write_random_file(os.path.join(gwww, "up.bin"), SIZE,
                                          seed=34)
        os.chmod(os.path.join(gwww, "up.bin"), 0o644)
        child = os.path.join(tmp, "child.sh")
        with open(child, "w") as f:
            f.write(CHILD)
        os.chmod(child, 0o755)
        resolv = su.serve_in_h(cls.procs, host, www, tmp, NAME, HTTP_PORT,
                               "dl.bin")

        state = os.path.join(cls.out, "state")
        env = cls.lib.env(preload=False)
        slirp4netns = cls.lib.client_wrapper(tmp, "/usr/bin/slirp4netns")
        env.update(HOME=cls.out, XDG_RUNTIME_DIR=cls.out, NAME=NAME,
                   OUT=cls.out, WWW=gwww,
                   URL=f"http://{H4}:{HTTP_PORT}/dl.bin")
        cls.log_path = os.path.join(tmp, "rootlesskit.log")
        host.assert_isolated()  # no default route in H: nothing leaves
        cmd = host.in_ns(h, *su.in_mount_ns(
            [(resolv, "/etc/resolv.conf"),
             (su.private_tun(tmp), "/dev/net/tun")],
            [*su.NOBODY, "rootlesskit", f"--state-dir={state}",
             "--net=slirp4netns", "--port-driver=slirp4netns",
             f"--slirp4netns-binary={slirp4netns}",
             "-p", f"127.0.0.1:{FWD_PORT}:80/tcp",
             "--slirp4netns-sandbox=true", "--slirp4netns-seccomp=true",
             "sh", child]))
        with open(cls.log_path, "w") as log:
            cls.rk = cls.procs.start(cmd, stdout=log, stderr=log, env=env)
        cls.s4_pid = su.find_process(cls.rk.pid, "slirp4netns", timeout=15)
        assert cls.s4_pid, f"rootlesskit started no slirp4netns{cls.log()}"
        # The command inside is done with its checks once it serves.
        ok = iu.wait_for(lambda: cls.rk.poll() is not None or iu.run(
            *host.in_ns(h, "curl", "-sf", "-o", "/dev/null", "-m", "5",
                        f"http://127.0.0.1:{FWD_PORT}/"),
            check=False).returncode == 0, 60, interval=0.5)
        assert ok and cls.rk.poll() is None, (
            f"the published port does not answer{cls.log()}")

    @classmethod
    def log(cls):
        parts = []
        for path in (cls.log_path, *(os.path.join(cls.out, f) for f in
                                     ("curl.txt", "dns.txt", "addr.txt"))):
            try:
                with open(path) as f:
                    parts.append(f"\n--- {os.path.basename(path)}:\n"
                                 + f.read())
            except (OSError, AttributeError):
                pass
        return "".join(parts)

    @classmethod
    def _teardown(cls):
        cls.procs.stop_all()
        cls.host.close()
        cls._restore_subids()
        if cls.lib:
            cls.lib.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def tearDownClass(cls):
        cls._teardown()
        su.assert_nothing_left(cls.procs, cls.host, cls.tmp)

    def read_out(self, name):
        with open(os.path.join(self.out, name)) as f:
            return f.read()

    # --- the checks --------------------------------------------------------

    def test_1_slirp4netns_loads_the_library_under_test(self):
        path = self.lib.assert_loaded(self.s4_pid)
        print(f"slirp4netns {self.s4_pid} (started by rootlesskit) mapped "
              f"{path}", flush=True)
        with open(f"/proc/{self.s4_pid}/status") as f:
            uids = re.search(r"^Uid:\s+(.*)$", f.read(), re.M).group(1)
        self.assertEqual(set(uids.split()), {str(su.NOBODY_UID)})
        with open(f"/proc/{self.s4_pid}/cmdline", "rb") as f:
            args = f.read().decode().split("\0")
        # The port driver works through the API socket; the sandbox and
        # seccomp filter were asked for.
        for flag in ("--api-socket", "--enable-sandbox", "--enable-seccomp"):
            self.assertIn(flag, args)

    def test_2_inside_reaches_a_server_in_h(self):
        self.assertIn("inet 10.0.2.100/24", self.read_out("addr.txt"),
                      self.log())
        self.assertIn("rc=0", self.read_out("curl.txt"), self.log())
        path = os.path.join(self.out, "dl.bin")
        self.assertEqual(os.path.getsize(path), SIZE, self.log())
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        self.assertEqual(h.hexdigest(), self.dl_sha)

    def test_3_inside_resolves_through_10_0_2_3(self):
        self.assertEqual(self.read_out("dns.txt").split()[:2], [H4, NAME],
                         self.log())

    def test_4_published_port_is_reached_from_h(self):
        r = su.curl(self.host.in_ns(self.host.h),
                    f"http://127.0.0.1:{FWD_PORT}/up.bin", 60)
        why = f"rc {r.returncode}, {r.received} bytes, {r.stderr}{self.log()}"
        self.assertEqual(r.returncode, 0, why)
        self.assertEqual(r.received, SIZE, why)
        self.assertEqual(r.received_sha.hexdigest(), self.up_sha, why)
        print(su.bench_line("rootlesskit", self.lib,
                            published_port_MBps=SIZE / 1e6 / r.seconds),
              flush=True)

    def test_5_stopping_rootlesskit_ends_slirp4netns(self):
        os.kill(self.rk.pid, signal.SIGTERM)
        try:
            self.rk.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.fail(f"rootlesskit did not stop on SIGTERM{self.log()}")
        self.assertTrue(iu.wait_for(
            lambda: not os.path.exists(f"/proc/{self.s4_pid}"), 10),
            "slirp4netns outlived rootlesskit")
        r = iu.run(*self.host.in_ns(self.host.h, "curl", "-sS", "-m", "5",
                                    f"http://127.0.0.1:{FWD_PORT}/"),
                   check=False)
        self.assertEqual(r.returncode, 7, r.stderr)


if __name__ == "__main__":
    unittest.main()
