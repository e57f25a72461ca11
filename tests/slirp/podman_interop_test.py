#!/usr/bin/env python3
"""Debian's Podman 4.3.1, rootless and unmodified, on a network command
under test (issue #32 must-show 2).

The network command comes from NETSTACK_SLIRP4NETNS
(slirp_util.Slirp4netns): unset or empty, Debian's /usr/bin/slirp4netns
(the harness's proof); else netstackd, copied with a symlink named
slirp4netns beside it into a directory the test user can read (Bazel's
output lives under /root). The symlink is the user's network_cmd_path.

The test makes the user nstpodman (useradd gives it subordinate ids;
userdel removes them after), with HOME and XDG_RUNTIME_DIR in a
temporary directory and a containers.conf there: runtime runc,
cgroup_manager cgroupfs, network_cmd_path the command under test;
storage driver vfs. The image is imported (`podman import`) from a
busybox-static rootfs built here, with a 16 MiB file to serve: no
registry.

Podman runs in the "host" H (lo and a veth into an empty sink
namespace, no default route: asserted first), entered with `nsenter
--net` (`ip netns exec` remounts /sys and hides the cgroups from runc),
in a private mount namespace where H's resolv.conf names H's dnsmasq and
/dev/net/tun is a 0666 node (the machine's is 0600). The checks:
  1. `podman run --network slirp4netns` resolves a name through 10.0.2.3
     (the network command forwards it to H's dnsmasq) and downloads
     16 MiB from H's HTTP server (sha256);
  2. `-p 127.0.0.1:PORT:80` with Podman's default port handler
     (rootlessport) reaches busybox httpd in the container from H
     (16 MiB, sha256); removing the container closes the port;
  3. the same with `--network slirp4netns:port_handler=slirp4netns` (the
     network command's API socket, add_hostfwd);
  4. IPv6 is on, as Podman 4.3 asks by default: the network command got
     --enable-ipv6, the container has a global fd00::/64 address, and
     the 16 MiB download from H also works over IPv6.
Each running container's network command is checked to be the program
under test (/proc/PID/exe), in H, and run as the user; its log (the
unlinked file Podman gives it, held open through /proc/PID/fd/2) must
hold no sanitizer report when it has exited.

At the end the containers are removed, whatever of the user's still
runs (podman's pause process above all) is killed by pid, and the test
asserts that no process, mount, namespace, user or file is left. Needs
root, podman, runc, conmon, uidmap, dnsmasq, dig, curl, and Debian's
busybox-static (fetched once into tests/vm's cache).
"""
import hashlib
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time
import unittest

from tests.backend.backend_topology import H4, H6
from tests.interop import interop_util as iu
from tests.slirp import podman_util as pu
from tests.slirp import slirp_util as su
from tests.vm import vm_image

NAME = "pm.netstack.test"
HTTP_PORT = 8080
PORT_ROOTLESSPORT = 18083
PORT_SLIRP4NETNS = 18084
SIZE = 16 << 20
IMAGE = "localhost/nst-busybox:test"
# busybox httpd in the container serves the image's /www.
HTTPD = ["httpd", "-f", "-p", "80", "-h", "/www"]
# What ASan, LSan and UBSan write when they find something.
SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                     "LeakSanitizer has encountered", "runtime error:")
LOG_TAIL = 4


def _sha(data):
    return hashlib.sha256(data).hexdigest()


class PodmanTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root")
        for tool in ("podman", "runc", "conmon", "newuidmap", "newgidmap",
                     "useradd", "userdel", "nsenter", "unshare", "setpriv",
                     "dnsmasq", "dig", "curl"):
            if not iu.have(tool):
                raise unittest.SkipTest(
                    f"needs {tool} (tools/dev/install-deps)")
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        cls.procs = su.Processes()
        cls.host = su.Host("nstpm")
        # A short path: the API socket Podman asks for lies under
        # XDG_RUNTIME_DIR/libpod/tmp/ with a 68-character name, and a UNIX
        # socket's path must stay under 108 bytes.
        cls.tmp = tempfile.mkdtemp(prefix="nstpm-", dir="/tmp")
        os.chmod(cls.tmp, 0o755)
        cls.user = pu.TestUser(os.path.join(cls.tmp, "home"))
        cls.left_after_rm = []   # what Podman itself left running
        cls.left_after_kill = []
        cls.binds = None   # set once podman can run
        cls.s4 = None
        try:
            cls._setup()
        except BaseException:
            cls._teardown()
            raise

    @classmethod
    def _setup(cls):
        tmp, user = cls.tmp, cls.user
        # Debian's, or netstackd copied where the user can read it, with
        # a symlink named slirp4netns (slirp_util.Slirp4netns).
        cls.s4 = su.Slirp4netns()
        cls.label = cls.s4.label
        print(f"network command under test: {cls.s4.path} ({cls.label}, "
              f"{cls.s4.exe})", flush=True)
        unreadable = pu.ldd_unreadable(cls.s4.exe)
        assert not unreadable, (f"{cls.s4.exe} loads libraries the test "
                                f"user cannot read: {unreadable}")
        user.create()
        print(f"user {user.name}: uid {user.uid}, subuids {user.subuid}",
              flush=True)
        home = user.home
        cls.run_dir = os.path.join(tmp, "r")
        cls.user_tmp = os.path.join(tmp, "usertmp")
        for d in (home, cls.run_dir, cls.user_tmp):
            os.makedirs(d)
            os.chown(d, user.uid, user.gid)
            os.chmod(d, 0o700)
        pu.write_config(user, home, cls.run_dir, cls.s4.path)
        extra = {}
        if pu.needs_asan(cls.s4.exe):
            # The network command inherits podman's environment: the
            # sanitizer options of this run (--config=asan sets them).
            # Its reports go to its log, which the checks read
            # (hold_log).
            for var, default in (("ASAN_OPTIONS", "abort_on_error=1"),
                                 ("UBSAN_OPTIONS", "print_stacktrace=1")):
                extra[var] = os.environ.get(var, default)
        cls.env = pu.podman_env(user, home, cls.run_dir, cls.user_tmp, extra)

        busybox = os.path.join(vm_image.fetch(), "busybox")
        up = random.Random(32).randbytes(SIZE)
        cls.up_sha = _sha(up)
        rootfs = os.path.join(tmp, "rootfs.tar")
        pu.write_rootfs(rootfs, busybox, {"www/up.bin": up})
        del up

        host = cls.host
        host.setup()
        www = os.path.join(tmp, "www")
        os.makedirs(www)
        os.chmod(www, 0o755)
        cls.dl_sha = iu.write_random_file(os.path.join(www, "dl.bin"), SIZE,
                                          seed=31)
        resolv = su.serve_in_h(cls.procs, host, www, tmp, NAME, HTTP_PORT,
                               "dl.bin")
        os.chmod(resolv, 0o644)
        cls.binds = [(resolv, "/etc/resolv.conf"),
                     (su.private_tun(tmp), "/dev/net/tun")]
        host.assert_isolated()  # no default route in H: nothing leaves
        cls.h_netns = os.stat(f"/var/run/netns/{host.h}").st_ino
        rc, out, err, secs = cls.podman("import", rootfs, IMAGE)
        assert rc == 0, f"podman import failed (rc {rc}):\n{out}\n{err}"
        print(f"podman import: {secs:.2f} s", flush=True)

    @classmethod
    def podman(cls, *args, timeout=60):
        """(returncode, stdout, stderr, seconds) of `podman ARGS` as the
        user in H."""
        return pu.run(pu.podman_command(cls.host.h, cls.binds, cls.user,
                                        *args), cls.env, cls.user.home,
                      timeout=timeout)

    @classmethod
    def _teardown(cls):
        user = cls.user
        if user.uid is not None and cls.binds:
            cls.podman("rm", "-af", "-t", "0", timeout=60)
            # Podman's own remains, before they are killed (for the log).
            cls.left_after_rm = user.live_processes()
            if cls.left_after_rm:
                print(f"after podman rm -af, the user still runs "
                      f"{cls.left_after_rm}: killed", flush=True)
        user.kill_processes()
        left = user.wait_gone(30)
        cls.left_after_kill = [p for p in left if p[1] != "Z"]
        cls.procs.stop_all()
        cls.host.close()
        user.remove()
        if cls.s4:
            cls.s4.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def tearDownClass(cls):
        cls._teardown()
        assert not cls.left_after_kill, (
            f"the user's processes survive SIGKILL: {cls.left_after_kill}")
        left = cls.user.live_processes()
        assert not left, f"processes of {cls.user.name} left: {left}"
        left = cls.user.leftovers()
        assert not left, f"user left: {left}"
        su.assert_nothing_left(cls.procs, cls.host, cls.tmp)

    # --- helpers -----------------------------------------------------------

    def run_ok(self, *args, timeout=60):
        rc, out, err, secs = self.podman(*args, timeout=timeout)
        self.assertEqual(rc, 0, f"podman {' '.join(args)} failed (rc {rc})"
                         f"\n--- stdout:\n{out}\n--- stderr:\n{err}")
        return out, secs

    def network_command(self, container):
        """The pid of the network command Podman started for the running
        `container`: the user's process whose command line names the
        container's network namespace and tap0 (whatever the program
        calls itself: check_network_command checks what it is)."""
        out, _ = self.run_ok("inspect", "--format",
                             "{{.NetworkSettings.SandboxKey}}", container)
        netns = out.strip()
        self.assertTrue(netns, f"{container} has no network namespace")
        found = [pid for pid, state, comm in self.user.processes()
                 if state != "Z" and netns in pu.cmdline(pid)
                 and "tap0" in pu.cmdline(pid)]
        # A helper it forked carries the same command line: take the one
        # whose parent is not among them.
        top = [p for p in found if self._ppid(p) not in found]
        self.assertEqual(len(top), 1,
                         f"network commands for {netns}: {found}")
        return top[0]

    @staticmethod
    def _ppid(pid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                return int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            return 0

    def check_network_command(self, pid):
        """The process is the program under test, runs in H as the user.
        Returns its argv."""
        exe = self.s4.assert_is(pid)
        self.assertEqual(os.stat(f"/proc/{pid}/ns/net").st_ino, self.h_netns,
                         "the network command is not in H")
        with open(f"/proc/{pid}/status") as f:
            uid = re.search(r"^Uid:\s+(\d+)", f.read(), re.M).group(1)
        self.assertEqual(int(uid), self.user.uid)
        argv = pu.cmdline(pid)
        print(f"network command {pid}: exe {exe}, argv {argv}", flush=True)
        return argv

    def hold_log(self, pid):
        """The network command's log, open for reading. Podman gives the
        command an unlinked file as stdout and stderr, and quotes it only
        when the start fails; holding it open keeps what the command
        writes up to its exit (its exit counters, a sanitizer's report),
        also after a sandbox (pivot_root) hid every other path from it."""
        f = open(f"/proc/{pid}/fd/2", "rb")
        self.addCleanup(f.close)
        return f

    @staticmethod
    def read_log(f):
        f.seek(0)
        return f.read().decode(errors="replace")

    def check_log_after_exit(self, pid, log):
        """Waits for the network command to exit, then fails on any
        sanitizer report in its log; prints the log's last lines."""
        self.assertTrue(iu.wait_for(
            lambda: (pu.proc_status(pid) or ("Z",))[0] == "Z", 10),
            f"the network command {pid} outlived its container")
        text = self.read_log(log)
        for marker in SANITIZER_MARKERS:
            self.assertNotIn(marker, text, f"network command {pid}'s log:\n"
                             f"{text}")
        tail = "\n  ".join(text.splitlines()[-LOG_TAIL:])
        print(f"network command {pid}'s log ({len(text)} bytes), last "
              f"lines:\n  {tail}", flush=True)

    def rootlessports(self):
        return [pid for pid, state, comm in self.user.processes()
                if state != "Z" and comm == "rootlessport"]

    def h_curl(self, port, path, timeout=60):
        return su.curl(self.host.in_ns(self.host.h),
                       f"http://127.0.0.1:{port}/{path}", timeout)

    def published_port(self, name, port, network):
        """Runs busybox httpd in a container publishing 127.0.0.1:port:80
        with `network`; fetches /up.bin from H; removes the container.
        Returns (network command argv, rootlessport pids while it ran)."""
        t0 = time.monotonic()
        self.run_ok("run", "-d", "--name", name, "--network", network,
                    "-p", f"127.0.0.1:{port}:80", IMAGE, *HTTPD)
        try:
            pid = self.network_command(name)
            log = self.hold_log(pid)
            argv = self.check_network_command(pid)
            ok = iu.wait_for(lambda: self.h_curl(port, "up.bin", 5).received
                             == SIZE, 30, interval=0.3)
            started = time.monotonic() - t0
            r = self.h_curl(port, "up.bin")
            why = (f"rc {r.returncode}, {r.received} bytes, {r.stderr}\n"
                   f"--- the network command's log:\n{self.read_log(log)}")
            self.assertTrue(ok, f"127.0.0.1:{port} never served: {why}")
            self.assertEqual(r.returncode, 0, why)
            self.assertEqual(r.received, SIZE, why)
            self.assertEqual(r.received_sha.hexdigest(), self.up_sha, why)
            rlp = self.rootlessports()
            print(f"PODMAN_BENCH network_cmd={self.label} test=publish "
                  f"network={network} run_to_served_s={started:.2f} "
                  f"published_port_MBps={SIZE / 1e6 / r.seconds:.1f}",
                  flush=True)
        finally:
            _, rm_secs = self.run_ok("rm", "-f", "-t", "0", name)
        self.check_log_after_exit(pid, log)
        r = iu.run(*self.host.in_ns(self.host.h, "curl", "-sS", "-m", "5",
                                    f"http://127.0.0.1:{port}/"),
                   check=False)
        self.assertEqual(r.returncode, 7,
                         f"port {port} still answers after podman rm: "
                         f"{r.stderr}")
        print(f"podman rm -f: {rm_secs:.2f} s", flush=True)
        return argv, rlp

    # --- the checks --------------------------------------------------------

    def test_1_run_resolves_and_downloads_from_h(self):
        script = f"""
ip -4 -o addr show dev tap0
nslookup -type=a {NAME} 10.0.2.3 >/tmp/ns.txt 2>&1
echo "nslookup_rc=$?"
cat /tmp/ns.txt
wget -q -O /tmp/dl.bin http://{H4}:{HTTP_PORT}/dl.bin
echo "wget_rc=$?"
echo "size=$(wc -c </tmp/dl.bin)"
echo "sha=$(sha256sum /tmp/dl.bin | cut -d' ' -f1)"
"""
        out, secs = self.run_ok("run", "--rm", "--network", "slirp4netns",
                                IMAGE, "sh", "-c", script)
        print(f"PODMAN_BENCH network_cmd={self.label} test=run_download "
              f"run_s={secs:.2f}", flush=True)
        self.assertIn("inet 10.0.2.100/24", out)
        self.assertIn("nslookup_rc=0", out)
        # busybox nslookup: "Name: NAME" then "Address: H4" (after the
        # server's own "Address: 10.0.2.3:53").
        answer = out.split("nslookup_rc=0", 1)[1]
        self.assertRegex(answer, rf"Name:\s+{re.escape(NAME)}\s+"
                                 rf"Address:\s+{re.escape(H4)}\b")
        self.assertRegex(answer, r"Address:\s+10\.0\.2\.3:53\b")
        self.assertIn("wget_rc=0", out)
        self.assertIn(f"size={SIZE}", out)
        self.assertIn(f"sha={self.dl_sha}", out)

    def test_2_published_port_rootlessport(self):
        argv, rlp = self.published_port("nst-web-rlp", PORT_ROOTLESSPORT,
                                        "slirp4netns")
        # The default handler: rootlessport, no API socket.
        self.assertTrue(rlp, "no rootlessport ran for the published port")
        self.assertNotIn("--api-socket", argv)

    def test_3_published_port_slirp4netns(self):
        argv, rlp = self.published_port(
            "nst-web-s4", PORT_SLIRP4NETNS,
            "slirp4netns:port_handler=slirp4netns")
        # Podman published it through the network command's API socket.
        self.assertIn("--api-socket", argv)
        self.assertEqual(rlp, [], "rootlessport ran with "
                                  "port_handler=slirp4netns")

    def test_4_ipv6_is_on(self):
        name = "nst-v6"
        self.run_ok("run", "-d", "--name", name, "--network", "slirp4netns",
                    IMAGE, "sleep", "600")
        try:
            pid = self.network_command(name)
            log = self.hold_log(pid)
            argv = self.check_network_command(pid)
            self.assertIn("--enable-ipv6", argv)
            # The address comes by router advertisement (SLAAC).
            script = ("for i in $(seq 100); do "
                      "ip -6 -o addr show dev tap0 scope global | "
                      "grep -q 'inet6 fd00:' && break; sleep 0.1; done; "
                      "ip -6 -o addr show dev tap0")
            out, _ = self.run_ok("exec", name, "sh", "-c", script)
            self.assertRegex(out, r"inet6 fd00:[0-9a-f:]+/64 scope global",
                             out)
            # And it carries a flow: the same download from H over IPv6,
            # by the default route the advertisement gave.
            script = (f"wget -q -O /tmp/dl6.bin http://[{H6}]:{HTTP_PORT}/"
                      "dl.bin; echo wget_rc=$?; "
                      "echo sha=$(sha256sum /tmp/dl6.bin | cut -d' ' -f1)")
            out, secs = self.run_ok("exec", name, "sh", "-c", script)
            self.assertIn("wget_rc=0", out, self.read_log(log))
            self.assertIn(f"sha={self.dl_sha}", out)
            print(f"PODMAN_BENCH network_cmd={self.label} test=ipv6_download "
                  f"exec_s={secs:.2f}", flush=True)
        finally:
            self.run_ok("rm", "-f", "-t", "0", name)
        self.check_log_after_exit(pid, log)


if __name__ == "__main__":
    unittest.main()
