#!/usr/bin/env python3
"""Debian's slirp4netns 1.2.0, unmodified, on the libslirp.so.0 under test
(issue #31 part 4 item 2; slirp_util.py: NETSTACK_LIBSLIRP_DIR unset is
Debian's libslirp0, the baseline).

Two runs, one class each, with the same checks:
  - as root: the guest is a network namespace the test made (ip netns);
  - as uid 65534: slirp4netns runs unprivileged (setpriv), and the guest
    is a user + network namespace that uid 65534 made (unshare -rn); the
    test's commands enter it as 65534 (nsenter -U -n).
slirp4netns runs with --configure --enable-ipv6 --enable-sandbox
--enable-seccomp --api-socket, plus -e (exit-fd) and -r (ready-fd), in
the "host" H: lo and a veth into an empty sink namespace, no default route
(asserted before it starts), where every server lives: an HTTP server
(dual-stack), dnsmasq, a UDP echo server. slirp4netns runs in a mount
namespace of its own where H's resolv.conf names dnsmasq (the machine's
names a server H cannot reach), since it forwards 10.0.2.3 to resolv.conf's
nameserver; for uid 65534 the same mount namespace holds a 0666
/dev/net/tun node (the machine's is 0600).

Checked: that slirp4netns mapped exactly the library under test
(/proc/PID/maps, device and inode), the guest's IPv4 configuration and its
SLAAC address on fd00::/64, 16 MiB downloads over IPv4 and IPv6 (sha256),
a name resolved through 10.0.2.3 (A and AAAA), UDP echo over IPv4 and
IPv6, pings (to H, whose kernel must count the echoes, and to the
gateways), add_hostfwd / list_hostfwd / remove_hostfwd over the API socket
while a rate-limited 16 MiB download flows (the forward carries 16 MiB
from the guest's server, sha256; after removal a new connection is
refused; the download still completes intact), and a clean exit on the
exit-fd (status 0, API socket unlinked). At the end nothing of the test's
is left: processes, namespaces, the mount namespaces with them, files.
Needs root, slirp4netns, curl, dig, dnsmasq, ping, iproute2, util-linux.

With NETSTACK_SLIRP4NETNS set (slirp_util.Slirp4netns; the BUILD target
slirp4netns_interop_test_netstackd), the program run as slirp4netns is
netstackd itself, answering to slirp4netns's command line (issue #32),
with the same checks; instead of the library's mapping, /proc/PID/exe
must be that netstackd, and at the exit-fd's close the API socket must be
gone (netstackd removes it by its directory, sandbox or not).
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import unittest

from tests.backend.backend_topology import H4, H6
from tests.interop import interop_util as iu
from tests.slirp import slirp_util as su

HERE = os.path.dirname(os.path.abspath(__file__))
SLIRP4NETNS = "slirp4netns"
NAME = "s4.netstack.test"
HTTP_PORT = 8080
UDP_PORT = 7007
GUEST_PORT = 80
FWD_PORT = 18080
SIZE = 16 << 20
# The flowing transfer of the hostfwd test: slow enough to outlast the
# forward's add, use and removal.
SLOW_RATE = "2M"
GUEST4, GATEWAY4, DNS4 = "10.0.2.100", "10.0.2.2", "10.0.2.3"
GATEWAY6 = "fd00::2"
# Prints how a TCP connect to argv[1]:argv[2] ends: "connected" or the
# exception's name.
CONNECT = """
import socket, sys
s = socket.socket()
s.settimeout(5)
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
    print("connected")
except OSError as e:
    print(type(e).__name__)
"""


class Slirp4netnsCase:
    """The checks; a subclass says who runs slirp4netns."""

    UNPRIVILEGED = False
    PREFIX = "nsts4"

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root")
        for tool in (SLIRP4NETNS, "curl", "dig", "dnsmasq", "ping",
                     "setpriv", "nsenter", "unshare"):
            if not iu.have(tool):
                raise unittest.SkipTest(
                    f"needs {tool} (tools/dev/install-deps)")
        # Bazel's timeout is a SIGTERM: unwind, so that everything goes.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        cls.procs = su.Processes()
        cls.host = su.Host(cls.PREFIX + ("u" if cls.UNPRIVILEGED else "r"))
        cls.lib = None
        cls.prog = None
        cls.guest_ns = None
        cls.exit_w = None
        # Under /tmp and 0755: uid 65534 reads the guest's files and the
        # library copy here; UNIX socket paths must stay short.
        cls.tmp = tempfile.mkdtemp(prefix="nst-s4-", dir="/tmp")
        os.chmod(cls.tmp, 0o755)
        try:
            cls._setup()
        except BaseException:
            cls._teardown()
            raise

    @classmethod
    def _setup(cls):
        tmp = cls.tmp
        cls.prog = su.Slirp4netns()
        cls.lib = su.Libslirp()
        if not cls.prog.is_debian:
            print(f"slirp4netns under test: {cls.prog.netstackd}", flush=True)
        if cls.UNPRIVILEGED:
            cls.lib = cls.lib.readable_by_all(tmp)
        print(f"libslirp under test: {cls.lib.describe()}", flush=True)
        host = cls.host
        host.setup()
        h = host.h
        www = os.path.join(tmp, "www")
        gwww = os.path.join(tmp, "gwww")
        for d in (www, gwww):
            os.makedirs(d)
            os.chmod(d, 0o755)
        cls.dl_sha = iu.write_random_file(os.path.join(www, "dl.bin"), SIZE,
                                          seed=31)
        cls.up_sha = iu.write_random_file(os.path.join(gwww, "up.bin"), SIZE,
                                          seed=32)
        for d in (www, gwww):
            for f in os.listdir(d):
                os.chmod(os.path.join(d, f), 0o644)
        cls.udp_echo = os.path.join(tmp, "udp_echo.py")
        shutil.copy(os.path.join(HERE, "udp_echo.py"), cls.udp_echo)
        os.chmod(cls.udp_echo, 0o755)
        # H's servers.
        resolv = su.serve_in_h(cls.procs, host, www, tmp, NAME, HTTP_PORT,
                               "dl.bin", aaaa=True)
        cls.procs.start(host.in_ns(h, sys.executable, cls.udp_echo, "serve",
                                   str(UDP_PORT)))

        cls._make_guest()
        cls._start_slirp4netns(resolv)
        # --configure sets IPv4; IPv6 comes from libslirp's router
        # advertisement (SLAAC), once duplicate address detection is done.
        ok = iu.wait_for(lambda: cls._global6() is not None, 15)
        assert ok, ("no SLAAC address in the guest: "
                    + cls.guest_run("ip", "-6", "addr").stdout + cls.log())

    @classmethod
    def _make_guest(cls):
        if not cls.UNPRIVILEGED:
            cls.guest_ns = f"{cls.host.h[:-2]}-g"
            cls.host.add_ns(cls.guest_ns)
            cls.guest = ["ip", "netns", "exec", cls.guest_ns]
            cls.target = ["--netns-type=path", f"/var/run/netns/{cls.guest_ns}"]
            return
        # uid 65534 makes the guest's user and network namespaces; the
        # process that holds them is the target slirp4netns joins.
        holder = cls.procs.start([*su.NOBODY, "unshare", "--user",
                                  "--map-root-user", "--net", "sleep",
                                  "3600"])
        own = os.readlink("/proc/self/ns/user")

        def ready():
            try:
                return os.readlink(f"/proc/{holder.pid}/ns/user") != own
            except OSError:
                return False
        assert iu.wait_for(ready, 10), "unshare -rn did not start"
        cls.holder = holder
        cls.guest = [*su.NOBODY, "nsenter", "-t", str(holder.pid), "-U",
                     "-n", "--preserve-credentials"]
        cls.target = [str(holder.pid)]
        iu.run(*cls.guest, "ip", "link", "set", "lo", "up")

    @classmethod
    def _start_slirp4netns(cls, resolv):
        host, tmp = cls.host, cls.tmp
        rundir = os.path.join(tmp, "run")
        os.makedirs(rundir)
        binds = [(resolv, "/etc/resolv.conf")]
        user = []
        if cls.UNPRIVILEGED:
            os.chown(rundir, su.NOBODY_UID, su.NOBODY_UID)
            binds.append((su.private_tun(tmp), "/dev/net/tun"))
            user = su.NOBODY
        cls.api = os.path.join(rundir, "api.sock")
        exit_r, cls.exit_w = os.pipe()
        ready_r, ready_w = os.pipe()
        cls.log_path = os.path.join(tmp, "slirp4netns.log")
        host.assert_isolated()  # no default route in H: nothing leaves
        cmd = host.in_ns(host.h, *su.in_mount_ns(binds, [
            *user, cls.prog.path, "--configure", "--enable-ipv6",
            "--enable-sandbox", "--enable-seccomp", "--api-socket", cls.api,
            "-e", str(exit_r), "-r", str(ready_w), *cls.target, "tap0"]))
        with open(cls.log_path, "w") as log:
            cls.s4 = cls.procs.start(cmd, stdout=log, stderr=log,
                                     pass_fds=(exit_r, ready_w),
                                     env=cls.lib.env())
        os.close(exit_r)
        os.close(ready_w)
        try:
            got = su.wait_readable_byte(ready_r, 15)
        finally:
            os.close(ready_r)
        assert got == b"1", f"slirp4netns not ready ({got!r}): {cls.log()}"
        cls.s4_pid = su.find_process(cls.s4.pid, SLIRP4NETNS)
        assert cls.s4_pid, f"no slirp4netns process: {cls.log()}"
        if cls.prog.is_debian:
            cls.loaded = cls.lib.assert_loaded(cls.s4_pid)
        else:
            cls.prog.assert_is(cls.s4_pid)

    @classmethod
    def tool(cls):
        return (("slirp4netns-" if cls.prog.is_debian else "netstackd-as-s4-")
                + ("65534" if cls.UNPRIVILEGED else "root"))

    @classmethod
    def log(cls):
        try:
            with open(cls.log_path) as f:
                return "\n--- slirp4netns:\n" + f.read()
        except (OSError, AttributeError):
            return ""

    @classmethod
    def guest_run(cls, *cmd, timeout=60):
        return iu.run(*cls.guest, *cmd, check=False, timeout=timeout)

    @classmethod
    def _global6(cls):
        out = cls.guest_run("ip", "-6", "-o", "addr", "show", "dev", "tap0",
                            "scope", "global", "-tentative").stdout
        m = re.search(r"inet6 (\S+)/64", out)
        return m.group(1) if m else None

    @classmethod
    def _teardown(cls):
        if cls.exit_w is not None:
            os.close(cls.exit_w)
            cls.exit_w = None
        cls.procs.stop_all()
        cls.host.close()
        if cls.lib:
            cls.lib.close()
        if cls.prog:
            cls.prog.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def tearDownClass(cls):
        cls._teardown()
        # Nothing may be left behind, also after a failure.
        su.assert_nothing_left(cls.procs, cls.host, cls.tmp)

    # --- the checks --------------------------------------------------------

    def test_loads_the_library_under_test(self):
        # Asserted at start-up too; again after everything else ran (the
        # sandbox's pivot_root must not have mattered).
        if not self.prog.is_debian:
            exe = self.prog.assert_is(self.s4_pid)
            print(f"slirp4netns {self.s4_pid} is {exe}", flush=True)
            return
        path = self.lib.assert_loaded(self.s4_pid)
        print(f"slirp4netns {self.s4_pid} mapped {path}", flush=True)
        if self.lib.dir is None:
            self.assertNotIn("LD_LIBRARY_PATH", self.lib.env())

    def test_guest_configuration(self):
        out = self.guest_run("ip", "-o", "-4", "addr", "show", "dev",
                             "tap0").stdout
        self.assertIn(f"inet {GUEST4}/24", out)
        out = self.guest_run("ip", "-4", "route", "show", "default").stdout
        self.assertIn(f"via {GATEWAY4}", out)
        a6 = self._global6()
        self.assertTrue(a6 and a6.startswith("fd00::"), a6)
        out = self.guest_run("ip", "-6", "route", "show", "default").stdout
        self.assertRegex(out, r"via fe80::\S+ dev tap0")

    def _download(self, url, *extra, timeout=60):
        r = su.curl(self.guest, url, timeout, *extra)
        why = (f"{url}: rc {r.returncode}, {r.received} bytes, "
               f"{r.stderr}{self.log()}")
        self.assertEqual(r.returncode, 0, why)
        self.assertEqual(r.received, SIZE, why)
        self.assertEqual(r.received_sha.hexdigest(), self.dl_sha, why)
        return r

    def test_download_ipv4(self):
        r = self._download(f"http://{H4}:{HTTP_PORT}/dl.bin")
        print(su.bench_line(self.tool(), self.lib,
                            download_ipv4_MBps=SIZE / 1e6 / r.seconds),
              flush=True)

    def test_download_ipv6(self):
        r = self._download(f"http://[{H6}]:{HTTP_PORT}/dl.bin")
        print(su.bench_line(self.tool(), self.lib,
                            download_ipv6_MBps=SIZE / 1e6 / r.seconds),
              flush=True)

    def test_dns_through_10_0_2_3(self):
        for rtype, want in (("A", H4), ("AAAA", H6)):
            out = self.guest_run("dig", f"@{DNS4}", "+short", "+time=2",
                                 "+tries=2", NAME, rtype)
            self.assertEqual(out.stdout.strip(), want,
                             f"{rtype}: {out.stdout}{out.stderr}{self.log()}")

    def test_udp_echo(self):
        # IPv4 includes a datagram the guest fragments (8000 bytes over
        # MTU 1500). IPv6 does not: libslirp 4.7 drops IPv6 fragments (it
        # has no IPv6 reassembly), so the baseline would fail there.
        for addr, sizes in ((H4, ["1", "100", "1400", "8000"]),
                            (H6, ["1", "100", "1400"])):
            out = self.guest_run(su.SYSTEM_PYTHON, self.udp_echo, "ask", addr,
                                 str(UDP_PORT), *sizes)
            self.assertEqual(out.returncode, 0,
                             f"{addr}: {out.stdout}{out.stderr}{self.log()}")
            self.assertEqual(out.stdout.strip(), f"ok {len(sizes)}")

    def test_ping(self):
        before = self.host.snmp()["Icmp.InEchos"]
        out = self.guest_run("ping", "-c", "3", "-i", "0.2", "-W", "2", H4)
        self.assertIn("3 received", out.stdout, out.stdout + out.stderr)
        # libslirp answers the guest itself, so the reply proves little:
        # H's kernel must have seen the echo requests (libslirp sends them
        # from an ICMP datagram socket, which ping_group_range allows).
        got = self.host.snmp()["Icmp.InEchos"] - before
        self.assertGreaterEqual(got, 3, "H saw no echo request")
        for addr in (GATEWAY4, GATEWAY6):
            out = self.guest_run("ping", "-c", "2", "-i", "0.2", "-W", "2",
                                 addr)
            self.assertIn("2 received", out.stdout,
                          f"{addr}: {out.stdout}{out.stderr}")

    def test_hostfwd_while_a_transfer_flows(self):
        h = self.host.h
        server = self.procs.start([*self.guest, su.SYSTEM_PYTHON, "-m",
                                   "http.server", "--bind", "0.0.0.0",
                                   "--directory", os.path.join(self.tmp,
                                                               "gwww"),
                                   str(GUEST_PORT)])
        try:
            ok = iu.wait_for(lambda: f":{GUEST_PORT} " in self.guest_run(
                "ss", "-ltnH").stdout, 10)
            self.assertTrue(ok, "the guest's HTTP server did not start")
            # The flowing transfer: guest <- H, rate-limited.
            flowing = {}
            t = threading.Thread(target=lambda: flowing.update(r=su.curl(
                self.guest, f"http://{H4}:{HTTP_PORT}/dl.bin", 60,
                "--limit-rate", SLOW_RATE, progress=flowing)))
            t.start()
            try:
                self.assertTrue(iu.wait_for(
                    lambda: flowing.get("received", 0) > 0, 10),
                    "the transfer did not start")
                self._hostfwd_cycle(h, flowing)
            finally:
                t.join(timeout=70)
            r = flowing["r"]
            why = f"rc {r.returncode}, {r.received} bytes, {r.stderr}"
            self.assertEqual(r.returncode, 0, why)
            self.assertEqual(r.received, SIZE, why)
            self.assertEqual(r.received_sha.hexdigest(), self.dl_sha, why)
        finally:
            self.procs.stop(server)

    def _hostfwd_cycle(self, h, flowing):
        reply = su.api_request(self.api, {
            "execute": "add_hostfwd", "arguments": {
                "proto": "tcp", "host_addr": "127.0.0.1",
                "host_port": FWD_PORT, "guest_port": GUEST_PORT}})
        self.assertIn("return", reply, reply)
        fwd_id = reply["return"]["id"]
        self.assertIsInstance(fwd_id, int)
        listed = su.api_request(self.api, {"execute": "list_hostfwd"})
        self.assertIn({"id": fwd_id, "proto": "tcp",
                       "host_addr": "127.0.0.1", "host_port": FWD_PORT,
                       "guest_addr": GUEST4, "guest_port": GUEST_PORT},
                      listed.get("entries", []), listed)
        url = f"http://127.0.0.1:{FWD_PORT}/up.bin"
        r = su.curl(self.host.in_ns(h), url, 60)
        why = f"rc {r.returncode}, {r.received} bytes, {r.stderr}{self.log()}"
        self.assertEqual(r.returncode, 0, why)
        self.assertEqual(r.received, SIZE, why)
        self.assertEqual(r.received_sha.hexdigest(), self.up_sha, why)
        print(su.bench_line(self.tool(), self.lib,
                            hostfwd_upload_MBps=SIZE / 1e6 / r.seconds),
              flush=True)
        reply = su.api_request(self.api, {
            "execute": "remove_hostfwd", "arguments": {"id": fwd_id}})
        self.assertEqual(reply, {"return": {}})
        # All of that while the other transfer was still under way.
        self.assertLess(flowing.get("received", 0), SIZE,
                        "the transfer ended before the forward was removed: "
                        "lower SLOW_RATE")
        listed = su.api_request(self.api, {"execute": "list_hostfwd"})
        self.assertEqual(listed.get("entries"), [], listed)
        r = iu.run(*self.host.in_ns(h, su.SYSTEM_PYTHON, "-c", CONNECT,
                                    "127.0.0.1", str(FWD_PORT)), check=False)
        self.assertEqual(r.stdout.strip(), "ConnectionRefusedError",
                         r.stdout + r.stderr)

    def test_zz_exit_fd_ends_it_cleanly(self):
        # Runs last (by name): closing the exit-fd is slirp4netns's clean
        # shutdown. (It also tries to unlink the API socket, which the
        # sandbox's pivot_root has put out of its reach: the file stays,
        # with either library, and goes with the test's directory.)
        os.close(self.exit_w)
        type(self).exit_w = None
        try:
            code = self.s4.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.fail("slirp4netns did not exit on its exit-fd")
        self.assertEqual(code, 0, self.log())
        if not self.prog.is_debian:
            self.assertFalse(os.path.exists(self.api),
                             "netstackd left its API socket" + self.log())


class Slirp4netnsAsRootTest(Slirp4netnsCase, unittest.TestCase):
    UNPRIVILEGED = False


class Slirp4netnsUnprivilegedTest(Slirp4netnsCase, unittest.TestCase):
    UNPRIVILEGED = True

    def test_runs_as_65534(self):
        with open(f"/proc/{self.s4_pid}/status") as f:
            status = f.read()
        uids = re.search(r"^Uid:\s+(.*)$", status, re.M).group(1).split()
        self.assertEqual(set(uids), {str(su.NOBODY_UID)}, status)
        caps = int(re.search(r"^CapEff:\s+(\S+)", status, re.M).group(1), 16)
        # Capabilities it may hold only in a user namespace below ours (the
        # guest's, which the sandbox needs for its mount namespace).
        if (os.readlink(f"/proc/{self.s4_pid}/ns/user")
                == os.readlink("/proc/self/ns/user")):
            self.assertEqual(caps, 0, status)

if __name__ == "__main__":
    unittest.main()
