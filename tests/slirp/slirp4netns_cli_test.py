#!/usr/bin/env python3
"""slirp4netns 1.2's command line and API socket, as its callers see them
(issue #32 must-show 4, "bad input"), on the slirp4netns under test
(slirp_util.Slirp4netns: NETSTACK_SLIRP4NETNS unset is Debian's
/usr/bin/slirp4netns, the reference; else netstackd, run through a
symlink named slirp4netns).

- CliTest: --help (exit 0, every flag name the callers search for),
  --version (slirp4netns's first line; names netstack), an unknown flag
  and no arguments (exit 1 with the usage), a PID that does not exist and
  a tap that another process holds (exit non-zero, a message naming the
  cause, nothing left behind).
- ApiTest: one instance with -c and --api-socket on a namespace the test
  made (`unshare -n sleep`), requests written straight to the socket (one
  per connection: JSON and "\\n", the write side shut, the reply read to
  EOF): add_hostfwd, list_hostfwd and remove_hostfwd with their exact
  reply shapes, the forward carrying a download, and every bad request
  getting {"error":{"desc":"bad request: ..."}} while the instance keeps
  serving.
- LifetimeTest: a stale socket file is replaced at start; the ready-fd's
  byte comes when the API socket already answers; closing the exit-fd's
  write end, and SIGTERM, end it with status 0, the socket file and the
  tap gone.
- NetnsPathTest: Podman's `--netns-type=path PATH`.

Where Debian's slirp4netns 1.2.0 differs from what issue #32 asks of
netstackd (it crashes on a request whose proto is missing or not a
string, accepts ports outside 0..65535, and dies by SIGTERM's default
action, leaving its socket file), the case is skipped on Debian's binary
and says why. Every instance runs in H (slirp_util.Host: no route off
this machine, asserted before each start). Needs root.
"""
import hashlib
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

from tests.interop import interop_util as iu
from tests.slirp import slirp_util as su

# Every option name of slirp4netns 1.2's --help. rootlesskit refuses a
# binary whose help lacks --netns-type; Podman 4.3.1 fails every
# container when it lacks --enable-ipv6.
FLAGS = ("-c", "--configure", "-e", "--exit-fd", "-r", "--ready-fd", "-m",
         "--mtu", "-6", "--enable-ipv6", "-a", "--api-socket", "--cidr",
         "--disable-host-loopback", "--netns-type", "--userns-path",
         "--enable-sandbox", "--enable-seccomp", "--outbound-addr",
         "--outbound-addr6", "--disable-dns", "--macaddress",
         "--target-type", "-h", "--help", "-v", "--version")
# Its first line, whatever the path it was started by.
USAGE = r"(?m)^Usage: .*slirp4netns \[OPTION\]\.\.\. PID\|PATH"
FWD_PORT = 18190
FWD_PORT_UDP = 18191
SIZE = 4 << 20
HTTP_PORT = 80
# Holds a tap open (TUNSETIFF, IFF_TAP|IFF_NO_PI, not multi-queue) so
# that a second attach gets EBUSY.
HOLD_TAP = """import fcntl, os, struct, sys, time
fd = os.open("/dev/net/tun", os.O_RDWR)
fcntl.ioctl(fd, 0x400454ca, struct.pack("16sH", sys.argv[1].encode(),
                                        0x0002 | 0x1000))
print("held", flush=True)
time.sleep(600)
"""


def raw_request(path, data, timeout=10):
    """Writes `data` on a new connection to the API socket at `path`,
    shuts the write side, and returns every byte of the reply. A reset
    after the reply counts as its end: slirp4netns closes a connection
    whose request it did not read to the end (too large), and the kernel
    then resets it."""
    out = b""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        try:
            while True:
                b = s.recv(65536)
                if not b:
                    break
                out += b
        except ConnectionResetError:
            pass
    return out


def request(path, obj):
    """One request object; the reply decoded (AssertionError with the raw
    bytes when it is not one JSON value)."""
    raw = raw_request(path, json.dumps(obj).encode() + b"\n")
    try:
        return json.loads(raw)
    except ValueError:
        raise AssertionError(f"reply to {obj} is not JSON: {raw!r}")


def free_pid():
    """A PID no process has (above every live one, below pid_max)."""
    with open("/proc/sys/kernel/pid_max") as f:
        pid = int(f.read()) - 17
    while os.path.exists(f"/proc/{pid}"):
        pid -= 1
    return pid


class Fixture:
    """What every class here shares: the program under test, H, a 0755
    temporary directory, the processes started (each in a session of its
    own, stopped at the end), and target namespaces."""

    def __init__(self, prefix):
        self.prog = su.Slirp4netns()
        self.procs = su.Processes()
        self.host = su.Host(prefix)
        self.tmp = tempfile.mkdtemp(prefix=f"nst-{prefix}-", dir="/tmp")
        os.chmod(self.tmp, 0o755)
        self.logs = []
        self.host.setup()

    def target(self):
        """A process alone in a new network namespace (`unshare -n
        sleep`); returns its Popen once it is in there."""
        p = self.procs.start(["unshare", "-n", "sleep", "600"])
        mine = os.readlink("/proc/self/ns/net")

        def moved():
            try:
                return os.readlink(f"/proc/{p.pid}/ns/net") != mine
            except OSError:
                return False
        assert iu.wait_for(moved, 5), "unshare -n did not start"
        return p

    def in_target(self, target, *cmd):
        return ["nsenter", "-t", str(target.pid), "-n", *cmd]

    def start(self, *args, pass_fds=()):
        """The program under test in H with `args`; its output goes to a
        log of its own (self.log(p))."""
        self.host.assert_isolated()
        log_path = os.path.join(self.tmp, f"s4nn-{len(self.logs)}.log")
        before = self.running_prog()
        with open(log_path, "w") as log:
            p = self.procs.start(self.host.in_ns(self.host.h, self.prog.path,
                                                 *args),
                                 stdout=log, stderr=log, pass_fds=pass_fds)
        p.log_path = log_path
        p.before = before
        self.logs.append(log_path)
        return p

    def run(self, *args, timeout=30):
        """Runs the program under test in H to its end: (returncode,
        stdout, stderr, leftovers)."""
        self.host.assert_isolated()
        before = self.running_prog()
        # Files, not pipes: a process it leaves behind holding them must
        # not make the wait longer, but show up in left_by.
        with tempfile.TemporaryFile("w+") as out_f, \
                tempfile.TemporaryFile("w+") as err_f:
            p = self.procs.start(self.host.in_ns(self.host.h, self.prog.path,
                                                 *args),
                                 stdout=out_f, stderr=err_f)
            p.before = before
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.procs.stop(p)
                raise AssertionError(f"{self.prog.label} {args} did not end "
                                     f"in {timeout} s")
            out_f.seek(0)
            err_f.seek(0)
            out, err = out_f.read(), err_f.read()
        return p.returncode, out, err, self.left_by(p)

    def running_prog(self):
        """The pids of the processes running the program under test's
        file."""
        mine = os.stat(self.prog.exe)
        found = set()
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                st = os.stat(f"/proc/{d}/exe")
            except OSError:
                continue
            if (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino):
                found.add(int(d))
        return found

    def left_by(self, p):
        """What `p` left behind once it ended: the live processes of its
        process group or session, and any process running the program
        under test that started after `p` did (others may run Debian's
        slirp4netns on this machine meanwhile)."""
        new = self.running_prog() - p.before
        left = []
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            # fields[0] is the state, [2] the process group, [3] the
            # session.
            if fields[0] == "Z":
                continue
            if (p.pid in (int(fields[2]), int(fields[3])) or
                    int(d) in new):
                left.append(f"{d} {stat.split()[1]}")
        return left

    @staticmethod
    def log(p):
        try:
            with open(p.log_path) as f:
                return f"\n--- {os.path.basename(p.log_path)}:\n{f.read()}"
        except OSError:
            return ""

    def close(self):
        self.procs.stop_all()
        self.host.close()
        self.prog.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def assert_clean(self):
        left = self.procs.leftovers()
        assert not left, f"processes left: {left}"
        left = self.host.leftover_namespaces()
        assert not left, f"namespaces left: {left}"


def needs_root():
    if os.geteuid() != 0:
        raise unittest.SkipTest("needs root")
    for tool in ("unshare", "nsenter", "ip", "curl"):
        if not iu.have(tool):
            raise unittest.SkipTest(f"needs {tool} (tools/dev/install-deps)")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


class FixtureCase(unittest.TestCase):
    PREFIX = "nsts4"

    @classmethod
    def setUpClass(cls):
        needs_root()
        cls.fx = None
        try:
            cls.fx = Fixture(cls.PREFIX)
            print(f"slirp4netns under test: {cls.fx.prog.label} "
                  f"({cls.fx.prog.path})", flush=True)
            cls._setup()
        except BaseException:
            if cls.fx:
                cls.fx.close()
            raise

    @classmethod
    def _setup(cls):
        pass

    @classmethod
    def tearDownClass(cls):
        cls.fx.close()
        cls.fx.assert_clean()

    def skip_on_debian(self, why):
        if self.fx.prog.is_debian:
            self.skipTest(f"Debian's slirp4netns 1.2.0 {why}")


class CliTest(FixtureCase):
    PREFIX = "nsts4c"

    def assert_help(self, rc, out, err):
        self.assertEqual(rc, 0, err)
        text = out + err
        missing = [f for f in FLAGS
                   if not re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])",
                                    text)]
        self.assertEqual(missing, [], f"--help lacks them:\n{text}")
        self.assertRegex(text, USAGE)
        # rootlesskit's DetectFeatures and dockerd-rootless.sh's
        # `grep -qw -- --netns-type` read stdout.
        self.assertIn("--netns-type", out)
        self.assertIn("--enable-ipv6", out)

    def test_help_exits_0_and_lists_every_flag(self):
        self.assert_help(*self.fx.run("--help")[:3])

    def test_subcommand_form_gives_the_help_too(self):
        self.skip_on_debian("has no `netstackd slirp4netns` form")
        self.fx.host.assert_isolated()
        r = iu.run(*self.fx.host.in_ns(self.fx.host.h, self.fx.prog.netstackd,
                                       "slirp4netns", "--help"), check=False)
        self.assert_help(r.returncode, r.stdout, r.stderr)

    def test_version_has_slirp4netns_shape(self):
        rc, out, err, _ = self.fx.run("--version")
        self.assertEqual(rc, 0, err)
        first = out.splitlines()[0] if out else ""
        self.assertRegex(first, r"^slirp4netns version \S+$", out)
        if not self.fx.prog.is_debian:
            self.assertIn("netstack", out.lower(), out)

    def test_unknown_flag_exits_1_with_usage(self):
        rc, out, err, left = self.fx.run("--no-such-flag", "1", "tap0")
        self.assertEqual(rc, 1, out + err)
        self.assertRegex(out + err, USAGE)
        self.assertIn("--no-such-flag", err)
        self.assertEqual(left, [])

    def test_no_arguments_exits_1_with_usage(self):
        rc, out, err, left = self.fx.run()
        self.assertEqual(rc, 1, out + err)
        self.assertRegex(out + err, USAGE)
        self.assertEqual(left, [])

    def test_pid_that_does_not_exist(self):
        pid = free_pid()
        api = os.path.join(self.fx.tmp, "np.sock")
        rc, out, err, left = self.fx.run("-c", "-a", api, str(pid), "tap0")
        print(f"PID {pid} that does not exist: rc {rc}, stderr "
              f"{err.strip()!r}", flush=True)
        self.assertNotEqual(rc, 0, out + err)
        # One line names the PID and says why (not an echo of the
        # command line).
        self.assertTrue(any(
            re.search(rf"\b{pid}\b", l) and
            re.search(r"no such|no process|not exist", l, re.I)
            for l in err.splitlines()),
            f"no line names the PID and the cause:\n{err}")
        self.assertEqual(left, [])
        self.assertFalse(os.path.exists(api), "the API socket is left")

    def test_busy_tap(self):
        target = self.fx.target()
        hold = os.path.join(self.fx.tmp, "hold_tap.py")
        with open(hold, "w") as f:
            f.write(HOLD_TAP)
        holder = self.fx.procs.start(
            self.fx.in_target(target, sys.executable, hold, "tap0"),
            stdout=subprocess.PIPE)
        self.assertEqual(holder.stdout.readline(), b"held\n")
        api = os.path.join(self.fx.tmp, "held.sock")
        rc, out, err, left = self.fx.run("-a", api, str(target.pid), "tap0")
        print(f"busy tap: rc {rc}, stderr {err.strip()!r}", flush=True)
        self.assertNotEqual(rc, 0, out + err)
        # One line says the tap is busy (and, from netstackd, which tap).
        lines = [l for l in err.splitlines() if re.search(r"busy", l, re.I)]
        self.assertTrue(lines, f"no line says the tap is busy:\n{err}")
        if not self.fx.prog.is_debian:
            self.assertTrue(any("tap0" in l for l in lines),
                            f"no line names the busy tap:\n{err}")
        self.assertEqual(left, [])
        self.assertFalse(os.path.exists(api), "the API socket is left")
        # The holder's tap is untouched.
        links = iu.run(*self.fx.in_target(target, "ip", "-o", "link",
                                          "show")).stdout
        self.assertIn("tap0", links)
        for p in (holder, target):
            self.fx.procs.stop(p)


class ApiTest(FixtureCase):
    """One instance: `slirp4netns -c --mtu 65520 -a API PID tap0`; the
    tests run in the order of their names, ids counting from 1."""
    PREFIX = "nsts4a"

    @classmethod
    def _setup(cls):
        fx = cls.fx
        cls.api = os.path.join(fx.tmp, "api.sock")
        cls.target = fx.target()
        www = os.path.join(fx.tmp, "www")
        os.makedirs(www)
        cls.sha = iu.write_random_file(os.path.join(www, "f.bin"), SIZE,
                                       seed=32)
        fx.procs.start(fx.in_target(cls.target, sys.executable, "-m",
                                    "http.server", "--bind", "0.0.0.0",
                                    "--directory", www, str(HTTP_PORT)))
        assert iu.wait_for(lambda: f":{HTTP_PORT} " in iu.run(
            *fx.in_target(cls.target, "ss", "-ltnH")).stdout, 10), (
            "the server in the target does not listen")
        rr, rw = os.pipe()
        try:
            cls.s4 = fx.start("-c", "--mtu", "65520", "-r", str(rw), "-a",
                              cls.api, str(cls.target.pid), "tap0",
                              pass_fds=(rw,))
            os.close(rw)
            ready = su.wait_readable_byte(rr, 15)
        finally:
            os.close(rr)
        assert ready, f"no ready byte{fx.log(cls.s4)}"
        cls.ids = []

    def req(self, obj):
        self.assertIsNone(self.s4.poll(), f"it died{self.fx.log(self.s4)}")
        try:
            return request(self.api, obj)
        except OSError as e:
            self.fail(f"{obj}: {e}{self.fx.log(self.s4)}")

    def add(self, proto, host_addr, host_port, guest_addr, guest_port):
        return self.req({"execute": "add_hostfwd", "arguments": {
            "proto": proto, "host_addr": host_addr, "host_port": host_port,
            "guest_addr": guest_addr, "guest_port": guest_port}})

    def entries(self):
        r = self.req({"execute": "list_hostfwd"})
        self.assertEqual(list(r), ["entries"], r)
        return r["entries"]

    def fetch(self, port):
        return su.curl(self.fx.host.in_ns(self.fx.host.h),
                       f"http://127.0.0.1:{port}/f.bin", 30)

    def test_01_configure_sets_up_tap0(self):
        ns = self.fx.in_target(self.target, "ip")
        addr = iu.run(*ns, "-o", "-4", "addr", "show", "dev", "tap0").stdout
        self.assertIn("inet 10.0.2.100/24", addr)
        link = iu.run(*ns, "-o", "link", "show", "dev", "tap0").stdout
        self.assertIn("mtu 65520", link)
        self.assertRegex(link, r"<[^>]*\bUP\b")
        route = iu.run(*ns, "-4", "route", "show", "default").stdout
        self.assertIn("default via 10.0.2.2 dev tap0", route)
        lo = iu.run(*ns, "-o", "link", "show", "dev", "lo").stdout
        self.assertRegex(lo, r"<[^>]*\bUP\b")

    def test_02_add_hostfwd_returns_ids_from_1(self):
        r = self.add("tcp", "127.0.0.1", FWD_PORT, "", HTTP_PORT)
        self.assertEqual(r, {"return": {"id": 1}})
        self.assertIs(type(r["return"]["id"]), int)
        # Podman's shape: an empty host_addr is 0.0.0.0.
        r = self.add("udp", "", FWD_PORT_UDP, "", 81)
        self.assertEqual(r, {"return": {"id": 2}})

    def test_03_list_hostfwd(self):
        self.assertEqual(self.entries(), [
            {"id": 1, "proto": "tcp", "host_addr": "127.0.0.1",
             "host_port": FWD_PORT, "guest_addr": "10.0.2.100",
             "guest_port": HTTP_PORT},
            {"id": 2, "proto": "udp", "host_addr": "0.0.0.0",
             "host_port": FWD_PORT_UDP, "guest_addr": "10.0.2.100",
             "guest_port": 81}])

    def test_04_the_forward_carries_a_download(self):
        r = self.fetch(FWD_PORT)
        why = f"rc {r.returncode}, {r.received} bytes, {r.stderr}"
        self.assertEqual(r.returncode, 0, why + self.fx.log(self.s4))
        self.assertEqual(r.received_sha.hexdigest(), self.sha, why)

    def test_05_remove_hostfwd(self):
        r = self.req({"execute": "remove_hostfwd", "arguments": {"id": 1}})
        self.assertEqual(r, {"return": {}})
        self.assertEqual([e["id"] for e in self.entries()], [2])
        r = self.fetch(FWD_PORT)
        self.assertEqual(r.returncode, 7, f"still forwarded: {r.stderr}")

    def test_06_bad_requests(self):
        add = lambda **a: {"execute": "add_hostfwd", "arguments": {
            "proto": "tcp", "host_addr": "127.0.0.1", "host_port": FWD_PORT,
            "guest_addr": "", "guest_port": HTTP_PORT, **a}}
        without = lambda key: {"execute": "add_hostfwd", "arguments": {
            k: v for k, v in add()["arguments"].items() if k != key}}
        debian_crashes = "segfaults on it (strcmp(NULL, ...))"
        debian_wraps = "accepts it (the port wraps)"
        # (name, bytes sent, a word the desc must hold, why Debian's is
        # skipped or None).
        cases = [
            ("not JSON", b"nonsense\n", None, None),
            ("not an object", b"[1,2]\n", None, None),
            ("no execute", b"{}\n", None, None),
            ("execute not a string", b'{"execute":5}\n', None, None),
            ("unknown execute", b'{"execute":"frobnicate"}\n', None, None),
            ("missing proto", without("proto"), "proto", debian_crashes),
            ("proto not a string", add(proto=6), "proto", debian_crashes),
            ("no arguments", {"execute": "add_hostfwd"}, "proto",
             debian_crashes),
            ("bad proto", add(proto="sctp"), "proto", None),
            ("missing host_port", without("host_port"), "host_port", None),
            ("host_port a string", add(host_port="80"), "host_port", None),
            ("host_port 70000", add(host_port=70000), "host_port",
             debian_wraps),
            ("host_port -1", add(host_port=-1), "host_port", debian_wraps),
            ("missing guest_port", without("guest_port"), "guest_port",
             None),
            ("guest_port a string", add(guest_port="80"), "guest_port",
             None),
            ("guest_port 70000", add(guest_port=70000), "guest_port",
             debian_wraps),
            ("bad host_addr", add(host_addr="bogus"), "host_addr", None),
            ("host_addr 999.1.1.1", add(host_addr="999.1.1.1"), "host_addr",
             None),
            ("bad guest_addr", add(guest_addr="bogus"), "guest_addr", None),
            ("port in use", add(host_port=FWD_PORT_UDP, proto="udp"), None,
             None),
            ("remove of an unknown id", {"execute": "remove_hostfwd",
                                         "arguments": {"id": 99}}, "id",
             None),
            ("remove with a string id", {"execute": "remove_hostfwd",
                                         "arguments": {"id": "2"}}, "id",
             None),
            ("remove without id", {"execute": "remove_hostfwd"}, "id", None),
            ("4096 bytes", b'{"execute":"list_hostfwd"}'.ljust(4096), "large",
             None),
            ("5000 bytes", b'{"execute":"list_hostfwd"}'.ljust(5000), "large",
             None),
        ]
        before = self.entries()
        for name, data, word, debian_skip in cases:
            with self.subTest(name):
                if debian_skip:
                    self.skip_on_debian(debian_skip)
                if not isinstance(data, bytes):
                    data = json.dumps(data).encode() + b"\n"
                self.assertIsNone(self.s4.poll(),
                                  f"it died{self.fx.log(self.s4)}")
                raw = raw_request(self.api, data)
                try:
                    r = json.loads(raw)
                except ValueError:
                    self.fail(f"{name}: the reply is not JSON: {raw!r}"
                              f"{self.fx.log(self.s4)}")
                print(f"{name}: {raw.decode(errors='replace')}", flush=True)
                self.assertEqual(list(r), ["error"], raw)
                self.assertEqual(list(r["error"]), ["desc"], raw)
                desc = r["error"]["desc"]
                self.assertTrue(desc.startswith("bad request: "), raw)
                if word:
                    self.assertIn(word, desc, raw)
                # It keeps serving, and nothing changed.
                self.assertEqual(self.entries(), before)

    def test_07_a_request_under_4096_bytes_is_served(self):
        data = b'{"execute":"list_hostfwd"}'.ljust(4095)
        self.assertEqual(json.loads(raw_request(self.api, data)),
                         {"entries": self.entries()})

    def test_08_ids_are_not_reused(self):
        r = self.add("tcp", "127.0.0.1", FWD_PORT, "", HTTP_PORT)
        self.assertEqual(list(r), ["return"], r)
        self.assertIs(type(r["return"]["id"]), int)
        self.assertGreater(r["return"]["id"], 2, r)
        self.assertEqual(self.fetch(FWD_PORT).returncode, 0)


class LifetimeTest(FixtureCase):
    """Each test starts an instance of its own on a target of its own."""
    PREFIX = "nsts4l"

    def launch(self, api, *extra):
        """Starts `-c -e FD -r FD -a api PID tap0` on a new target; returns
        (process, target, exit-fd write end, ready-fd read end)."""
        target = self.fx.target()
        er, ew = os.pipe()
        rr, rw = os.pipe()
        p = self.fx.start("-c", "-e", str(er), "-r", str(rw), "-a", api,
                          *extra, str(target.pid), "tap0", pass_fds=(er, rw))
        os.close(er)
        os.close(rw)
        self.addCleanup(self.fx.procs.stop, target)
        self.addCleanup(self.fx.procs.stop, p)
        for fd in (ew, rr):
            self.addCleanup(lambda fd=fd: _close_quietly(fd))
        return p, target, ew, rr

    def ready(self, p, rr):
        b = su.wait_readable_byte(rr, 15)
        self.assertEqual(len(b), 1, f"ready-fd gave {b!r}{self.fx.log(p)}")
        return b

    def assert_gone(self, p, target, api):
        self.assertFalse(os.path.exists(api), f"{api} is left")
        self.assertEqual(self.fx.left_by(p), [])
        # The tap it made with -c went with its fd.
        links = iu.run(*self.fx.in_target(target, "ip", "-o", "link",
                                          "show")).stdout
        self.assertNotIn("tap0", links)

    def test_stale_socket_is_replaced(self):
        api = os.path.join(self.fx.tmp, "stale.sock")
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(api)   # closed unlinked: a stale socket file
        with self.assertRaises(ConnectionRefusedError):
            raw_request(api, b"{}\n")
        p, target, ew, rr = self.launch(api)
        self.ready(p, rr)
        self.assertEqual(request(api, {"execute": "list_hostfwd"}),
                         {"entries": []}, self.fx.log(p))

    def test_ready_byte_comes_when_the_api_answers(self):
        api = os.path.join(self.fx.tmp, "ready.sock")
        p, target, ew, rr = self.launch(
            api, "--enable-sandbox", "--enable-seccomp")
        self.ready(p, rr)
        # At once, no retry: the API must already answer.
        self.assertEqual(request(api, {"execute": "list_hostfwd"}),
                         {"entries": []}, self.fx.log(p))
        # One byte only: then nothing, or the end of the pipe.
        r, _, _ = select.select([rr], [], [], 0.5)
        if r:
            self.assertEqual(os.read(rr, 16), b"", "more than one byte")

    def test_closing_the_exit_fd_exits_0(self):
        api = os.path.join(self.fx.tmp, "exitfd.sock")
        p, target, ew, rr = self.launch(api)
        self.ready(p, rr)
        os.close(ew)
        try:
            rc = p.wait(10)
        except subprocess.TimeoutExpired:
            self.fail(f"it outlived its exit-fd{self.fx.log(p)}")
        self.assertEqual(rc, 0, self.fx.log(p))
        self.assert_gone(p, target, api)

    def test_sigterm_exits_0(self):
        self.skip_on_debian("dies by SIGTERM's default action and leaves "
                           "its socket file")
        api = os.path.join(self.fx.tmp, "term.sock")
        p, target, ew, rr = self.launch(api)
        self.ready(p, rr)
        p.send_signal(signal.SIGTERM)
        try:
            rc = p.wait(10)
        except subprocess.TimeoutExpired:
            self.fail(f"it outlived SIGTERM{self.fx.log(p)}")
        self.assertEqual(rc, 0, self.fx.log(p))
        self.assert_gone(p, target, api)


class NetnsPathTest(FixtureCase):
    """Podman's form: `--netns-type=path PATH tap0`, the namespace a
    file (here one `ip netns add` made) rather than a process's."""
    PREFIX = "nsts4p"

    def test_configures_the_namespace_at_path(self):
        ns = f"{self.PREFIX}-{os.getpid()}-t"
        iu.run("ip", "netns", "add", ns)
        self.addCleanup(iu.run, "ip", "netns", "del", ns, check=False)
        api = os.path.join(self.fx.tmp, "path.sock")
        er, ew = os.pipe()
        rr, rw = os.pipe()
        p = self.fx.start("-c", "-e", str(er), "-r", str(rw), "-a", api,
                          "--netns-type=path", f"/var/run/netns/{ns}",
                          "tap0", pass_fds=(er, rw))
        os.close(er)
        os.close(rw)
        self.addCleanup(self.fx.procs.stop, p)
        self.addCleanup(_close_quietly, rr)
        try:
            self.assertEqual(len(su.wait_readable_byte(rr, 15)), 1,
                             self.fx.log(p))
            addr = iu.run("ip", "-n", ns, "-o", "-4", "addr", "show", "dev",
                          "tap0", check=False).stdout
            self.assertIn("inet 10.0.2.100/24", addr, self.fx.log(p))
            self.assertEqual(request(api, {"execute": "list_hostfwd"}),
                             {"entries": []})
        finally:
            os.close(ew)
        self.assertEqual(p.wait(10), 0, self.fx.log(p))
        self.assertFalse(os.path.exists(api))


def _close_quietly(fd):
    try:
        os.close(fd)
    except OSError:
        pass


if __name__ == "__main__":
    unittest.main()
