#!/usr/bin/env python3
"""Debian's rootlesskit 1.1.0, unmodified, on the slirp4netns under test
(issue #32 must-show 1; slirp_util.Slirp4netns: NETSTACK_SLIRP4NETNS
unset is Debian's /usr/bin/slirp4netns, the reference; else netstackd,
through a symlink named slirp4netns).

As uid 65534 with subordinate ids (an /etc/subuid and /etc/subgid entry
the test writes and restores), in the "host" H (lo and a veth into an
empty sink namespace, no default route: asserted before each start), once
per port driver (SlirpPortDriverTest, BuiltinPortDriverTest):

  rootlesskit --state-dir=DIR --net=slirp4netns --slirp4netns-binary=PATH
      --port-driver=DRIVER -p 127.0.0.1:FWD_PORT:80/tcp
      --slirp4netns-sandbox=true --slirp4netns-seccomp=true
      --copy-up=/etc sh child.sh

child.sh, the command inside, resolves a name (rootlesskit's resolv.conf
names 10.0.2.3, which slirp4netns forwards to H's dnsmasq), downloads
16 MiB from H's HTTP server, then serves a file on ports 80 and 81 (one
process). The test checks the name and the download (sha256); fetches the
file through the published port from H (sha256); publishes port 81 with
`rootlessctl add-ports`, reaches it, sees it in `list-ports`, takes it
away with `remove-ports` and sees it refused. Then rootlesskit is stopped
with SIGTERM, started again on the same state directory, stopped with
SIGKILL (its Pdeathsig takes slirp4netns along), and started once more:
after each stop nothing is left (no process of uid 65534 that was not
there before, no process in or holding rootlesskit's namespaces, the
published port refused), and each start works (no stale socket in the
state directory blocks it). The slirp4netns rootlesskit runs is the
program under test (/proc/PID/exe) and runs as 65534.

All of it runs in a mount namespace of the test's own, where H's
resolv.conf names dnsmasq and /dev/net/tun is a 0666 node (the machine's
is 0600). Needs root, rootlesskit, rootlessctl, slirp4netns (Debian's
run), uidmap, curl, dnsmasq, dig.
"""
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

from tests.backend.backend_topology import H4
from tests.interop import interop_util as iu
from tests.slirp import slirp_util as su

NAME = "rk.netstack.test"
HTTP_PORT = 8080
SIZE = 16 << 20
UP_SIZE = 4 << 20
SUBID_START = 200000
SUBID_COUNT = 65536
# The command inside. What it finds goes to files in $OUT; the test
# checks them. One process serves ports 80 and 81, so that it is the only
# process rootlesskit's child started (a server left in the background
# would outlive a killed rootlesskit and prove nothing about it).
CHILD = """#!/bin/sh
getent hosts "$NAME" >"$OUT/dns.txt" 2>&1
cat /etc/resolv.conf >"$OUT/resolv.txt" 2>&1
ip -o -4 addr show dev tap0 >"$OUT/addr.txt" 2>&1
curl -sS -m 60 -o "$OUT/dl.bin" "$URL" 2>"$OUT/curl.txt"
echo "rc=$?" >>"$OUT/curl.txt"
exec /usr/bin/python3 "$SERVE" "$WWW" 80 81
"""
SERVE = """import functools, http.server, sys, threading
handler = functools.partial(http.server.SimpleHTTPRequestHandler,
                            directory=sys.argv[1])
servers = [http.server.ThreadingHTTPServer(("0.0.0.0", int(p)), handler)
           for p in sys.argv[2:]]
for s in servers[1:]:
    threading.Thread(target=s.serve_forever, daemon=True).start()
servers[0].serve_forever()
"""


def uid_of(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return int(re.search(r"^Uid:\s+(\d+)", f.read(), re.M).group(1))
    except (OSError, AttributeError):
        return None


def _state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        return stat[stat.rindex(")") + 2]
    except OSError:
        return None


def processes_of(uid):
    """{pid: comm} of the live processes whose real uid is `uid`."""
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit() and uid_of(d) == uid:
            try:
                with open(f"/proc/{d}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if stat[stat.rindex(")") + 2] != "Z":
                out[int(d)] = stat.split()[1]
    return out


def namespace_ids(pid):
    """{"user": "user:[N]", ...} of process `pid`."""
    return {k: os.readlink(f"/proc/{pid}/ns/{k}")
            for k in ("user", "net", "mnt")}


def namespace_holders(ids):
    """Processes in, or holding an fd to, any namespace in `ids` (the
    values of namespace_ids): while one exists, the namespace does."""
    wanted = set(ids.values())
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            links = [os.readlink(f"/proc/{d}/ns/{k}") for k in ids]
            fds = os.listdir(f"/proc/{d}/fd")
            for fd in fds:
                try:
                    links.append(os.readlink(f"/proc/{d}/fd/{fd}"))
                except OSError:
                    pass
        except OSError:
            continue
        hit = wanted.intersection(links)
        if hit:
            found.append(f"{d} {su._comm(int(d))} {sorted(hit)}")
    return found


class Rootlesskit:
    """One run of rootlesskit: the process (`ip netns exec` wrapper
    exec'd into it), the slirp4netns it started, and its child's
    namespaces."""

    def __init__(self, proc, s4_pid, child_ns):
        self.proc, self.s4_pid, self.child_ns = proc, s4_pid, child_ns


class RootlesskitCase(unittest.TestCase):
    """Set up once per port driver; the tests run in the order of their
    names."""
    DRIVER = None
    PREFIX = None
    FWD_PORT = None

    @classmethod
    def setUpClass(cls):
        if cls.DRIVER is None:
            raise unittest.SkipTest("the base class")
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root")
        for tool in ("rootlesskit", "rootlessctl", "newuidmap", "newgidmap",
                     "curl", "dnsmasq", "dig", "setpriv", "unshare"):
            if not iu.have(tool):
                raise unittest.SkipTest(
                    f"needs {tool} (tools/dev/install-deps)")
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        cls.procs = su.Processes()
        cls.host = su.Host(cls.PREFIX)
        cls.prog = None
        cls.rk = None
        cls.rks = []
        cls.baseline = None
        cls.subids = {}
        cls.tmp = tempfile.mkdtemp(prefix=f"nst-{cls.PREFIX}-", dir="/tmp")
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
        cls.prog = su.Slirp4netns()
        print(f"slirp4netns under test: {cls.prog.label} ({cls.prog.path}); "
              f"port driver {cls.DRIVER}", flush=True)
        cls.baseline = processes_of(su.NOBODY_UID)
        cls._add_subids()
        cls.host.setup()
        www, gwww = os.path.join(tmp, "www"), os.path.join(tmp, "gwww")
        cls.out = os.path.join(tmp, "out")   # uid 65534 writes here
        for d in (www, gwww, cls.out):
            os.makedirs(d)
            os.chmod(d, 0o755)
        os.chown(cls.out, su.NOBODY_UID, su.NOBODY_UID)
        cls.dl_sha = iu.write_random_file(os.path.join(www, "dl.bin"), SIZE,
                                          seed=35)
        cls.up_sha = iu.write_random_file(os.path.join(gwww, "up.bin"),
                                          UP_SIZE, seed=36)
        os.chmod(os.path.join(gwww, "up.bin"), 0o644)
        for name, text in (("child.sh", CHILD), ("serve.py", SERVE)):
            with open(os.path.join(tmp, name), "w") as f:
                f.write(text)
            os.chmod(os.path.join(tmp, name), 0o755)
        cls.resolv = su.serve_in_h(cls.procs, cls.host, www, tmp, NAME,
                                   HTTP_PORT, "dl.bin")
        cls.tun = su.private_tun(tmp)
        cls.state = os.path.join(cls.out, "state")
        cls.runs = 0
        cls.rk = cls.start()

    @classmethod
    def start(cls):
        """Starts rootlesskit on cls.state; returns a Rootlesskit once the
        published port answers."""
        host = cls.host
        env = dict(os.environ)
        env.update(HOME=cls.out, XDG_RUNTIME_DIR=cls.out, NAME=NAME,
                   OUT=cls.out, WWW=os.path.join(cls.tmp, "gwww"),
                   SERVE=os.path.join(cls.tmp, "serve.py"),
                   URL=f"http://{H4}:{HTTP_PORT}/dl.bin")
        for f in ("dns.txt", "resolv.txt", "addr.txt", "curl.txt", "dl.bin"):
            try:
                os.unlink(os.path.join(cls.out, f))
            except FileNotFoundError:
                pass
        cls.runs += 1
        cls.log_path = os.path.join(cls.tmp, f"rootlesskit-{cls.runs}.log")
        host.assert_isolated()  # no default route in H: nothing leaves
        cmd = host.in_ns(host.h, *su.in_mount_ns(
            [(cls.resolv, "/etc/resolv.conf"), (cls.tun, "/dev/net/tun")],
            [*su.NOBODY, "rootlesskit", f"--state-dir={cls.state}",
             "--net=slirp4netns", f"--slirp4netns-binary={cls.prog.path}",
             f"--port-driver={cls.DRIVER}",
             "-p", f"127.0.0.1:{cls.FWD_PORT}:80/tcp",
             "--slirp4netns-sandbox=true", "--slirp4netns-seccomp=true",
             "--copy-up=/etc", "sh", os.path.join(cls.tmp, "child.sh")]))
        with open(cls.log_path, "w") as log:
            proc = cls.procs.start(cmd, stdout=log, stderr=log, env=env)
        s4_pid = su.find_process(proc.pid, "slirp4netns", timeout=15)
        assert s4_pid, f"rootlesskit started no slirp4netns{cls.log()}"
        ok = iu.wait_for(lambda: proc.poll() is not None or iu.run(
            *host.in_ns(host.h, "curl", "-sf", "-o", "/dev/null", "-m", "5",
                        f"http://127.0.0.1:{cls.FWD_PORT}/"),
            check=False).returncode == 0, 60, interval=0.5)
        assert ok and proc.poll() is None, (
            f"the published port does not answer{cls.log()}")
        mine = os.readlink("/proc/self/ns/user")
        child = [p for p in su.descendants(proc.pid)
                 if os.path.exists(f"/proc/{p}") and
                 os.readlink(f"/proc/{p}/ns/user") != mine]
        assert child, "no process of rootlesskit's in a user namespace"
        rk = Rootlesskit(proc, s4_pid, namespace_ids(child[0]))
        cls.rks.append(rk)
        return rk

    @classmethod
    def log(cls):
        parts = []
        for path in (cls.log_path, *(os.path.join(cls.out, f) for f in
                                     ("curl.txt", "dns.txt", "addr.txt",
                                      "resolv.txt"))):
            try:
                with open(path) as f:
                    parts.append(f"\n--- {os.path.basename(path)}:\n"
                                 + f.read())
            except (OSError, AttributeError):
                pass
        return "".join(parts)

    @classmethod
    def strays(cls):
        """uid 65534's processes that were not there before the test and
        are ours: in a namespace of one of our rootlesskits, or running a
        slirp4netns. (Another user of uid 65534 on this machine is left
        alone.)"""
        ours = set()
        for rk in cls.rks:
            ours.update(rk.child_ns.values())
        exes = {os.path.realpath(su.DEBIAN_SLIRP4NETNS)}
        if cls.prog:
            exes.add(os.path.realpath(cls.prog.exe))
        found = {}
        for pid, comm in processes_of(su.NOBODY_UID).items():
            if pid in cls.baseline:
                continue
            try:
                ns = set(namespace_ids(pid).values())
                exe = os.path.realpath(f"/proc/{pid}/exe")
            except OSError:
                continue
            if ns & ours or exe in exes:
                found[pid] = comm
        return found

    @classmethod
    def _teardown(cls):
        cls.procs.stop_all()
        cls.left = {}
        if cls.baseline is not None:
            iu.wait_for(lambda: not cls.strays(), 5)
            cls.left = cls.strays()
            for pid in cls.left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        cls.host.close()
        cls._restore_subids()
        if cls.prog:
            cls.prog.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def tearDownClass(cls):
        cls._teardown()
        assert not cls.left, f"uid {su.NOBODY_UID}'s processes left: {cls.left}"
        su.assert_nothing_left(cls.procs, cls.host, cls.tmp)

    def read_out(self, name):
        with open(os.path.join(self.out, name)) as f:
            return f.read()

    def fetch(self, port, path="up.bin"):
        return su.curl(self.host.in_ns(self.host.h),
                       f"http://127.0.0.1:{port}/{path}", 30)

    def rootlessctl(self, *args):
        return iu.run(*self.host.in_ns(
            self.host.h, *su.NOBODY, "rootlessctl", "--socket",
            os.path.join(self.state, "api.sock"), *args), check=False)

    def stop_and_check(self, sig):
        """Stops rootlesskit with `sig` and checks that nothing is left."""
        rk = self.rk
        t0 = time.monotonic()
        os.kill(rk.proc.pid, sig)
        try:
            rk.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.fail(f"rootlesskit outlived {sig!r}{self.log()}")
        gone = lambda: uid_of(rk.s4_pid) is None or _state(rk.s4_pid) == "Z"
        self.assertTrue(iu.wait_for(gone, 10, interval=0.01),
                        f"slirp4netns outlived rootlesskit ({sig!r})")
        print(f"slirp4netns ended {time.monotonic() - t0:.3f} s after "
              f"rootlesskit's {sig!r}", flush=True)
        new = lambda: {p: c for p, c in processes_of(su.NOBODY_UID).items()
                       if p not in self.baseline}
        iu.wait_for(lambda: not new(), 10)
        self.assertEqual(new(), {}, f"uid {su.NOBODY_UID}'s processes are "
                         f"left after {sig!r}")
        iu.wait_for(lambda: not namespace_holders(rk.child_ns), 10)
        self.assertEqual(namespace_holders(rk.child_ns), [],
                         f"rootlesskit's namespaces are left after {sig!r}")
        r = self.fetch(self.FWD_PORT, "")
        self.assertEqual(r.returncode, 7, r.stderr)
        if sig == signal.SIGTERM:
            # A clean exit: rootlesskit removes its state directory.
            self.assertFalse(os.path.exists(self.state),
                             f"{self.state} is left")
            return
        left = sorted(os.listdir(self.state))
        print(f"after {sig!r}, the state directory holds {left}", flush=True)
        if self.DRIVER == "slirp4netns":
            # slirp4netns died by SIGKILL (rootlesskit's Pdeathsig): its
            # API socket stays, and the next start (restart) on this state
            # directory must replace it.
            self.assertIn(".s4nn.sock", left)

    def restart(self):
        """rootlesskit again on the same state directory: it must start
        (nothing stale blocks it) and work."""
        try:
            type(self).rk = self.start()
        except AssertionError as e:
            self.fail(f"the next start on {self.state} failed: {e}")
        self.check_slirp4netns()
        self.check_download()
        r = self.fetch(self.FWD_PORT)
        self.assertEqual(r.received_sha.hexdigest(), self.up_sha,
                         f"rc {r.returncode} {r.stderr}")

    # --- the checks --------------------------------------------------------

    def check_slirp4netns(self):
        pid = self.rk.s4_pid
        exe = self.prog.assert_is(pid)
        print(f"slirp4netns {pid} (started by rootlesskit) runs {exe}",
              flush=True)
        with open(f"/proc/{pid}/status") as f:
            uids = re.search(r"^Uid:\s+(.*)$", f.read(), re.M).group(1)
        self.assertEqual(set(uids.split()), {str(su.NOBODY_UID)})
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().decode().split("\0")
        want = ["--enable-sandbox", "--enable-seccomp"]
        if self.DRIVER == "slirp4netns":
            want.append("--api-socket")
        for flag in want:
            self.assertIn(flag, args)

    def check_download(self):
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

    def test_1_slirp4netns_is_the_program_under_test(self):
        self.check_slirp4netns()

    def test_2_inside_downloads_from_h(self):
        self.check_download()

    def test_3_inside_resolves_through_10_0_2_3(self):
        self.assertRegex(self.read_out("resolv.txt"),
                         r"(?m)^nameserver 10\.0\.2\.3$", self.log())
        self.assertEqual(self.read_out("dns.txt").split()[:2], [H4, NAME],
                         self.log())

    def test_4_published_port_is_reached_from_h(self):
        r = self.fetch(self.FWD_PORT)
        why = f"rc {r.returncode}, {r.received} bytes, {r.stderr}{self.log()}"
        self.assertEqual(r.returncode, 0, why)
        self.assertEqual(r.received_sha.hexdigest(), self.up_sha, why)
        print(f"ROOTLESSKIT_BENCH slirp4netns={self.prog.label} "
              f"port_driver={self.DRIVER} published_port_MBps="
              f"{UP_SIZE / 1e6 / r.seconds:.2f}", flush=True)

    def test_5_rootlessctl_add_list_remove(self):
        port2 = self.FWD_PORT + 1
        spec = f"127.0.0.1:{port2}:81/tcp"
        r = self.rootlessctl("add-ports", spec)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr + self.log())
        f = self.fetch(port2)
        self.assertEqual(f.received_sha.hexdigest(), self.up_sha,
                         f"rc {f.returncode} {f.stderr}{self.log()}")
        r = self.rootlessctl("list-ports", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        ports = [json.loads(l) for l in r.stdout.splitlines() if l.strip()]
        print(f"rootlessctl list-ports --json: {ports}", flush=True)
        mine = [p for p in ports if p["spec"].get("parentPort") == port2]
        self.assertEqual(len(mine), 1, ports)
        self.assertEqual(mine[0]["spec"].get("childPort"), 81)
        self.assertEqual(mine[0]["spec"].get("proto"), "tcp")
        self.assertEqual(mine[0]["spec"].get("parentIP"), "127.0.0.1")
        self.assertTrue(any(p["spec"].get("parentPort") == self.FWD_PORT
                            for p in ports), ports)
        r = self.rootlessctl("remove-ports", str(mine[0]["id"]))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr + self.log())
        f = self.fetch(port2, "")
        self.assertEqual(f.returncode, 7, f"still answers: {f.stderr}")
        r = self.rootlessctl("list-ports", "--json")
        self.assertNotIn(f'"parentPort":{port2}', r.stdout.replace(" ", ""))
        # The -p port is untouched.
        self.assertEqual(self.fetch(self.FWD_PORT).returncode, 0)

    def test_6_sigterm_leaves_nothing(self):
        self.stop_and_check(signal.SIGTERM)

    def test_7_starts_again_then_sigkill_leaves_nothing(self):
        self.restart()
        self.stop_and_check(signal.SIGKILL)

    def test_8_starts_again_after_sigkill(self):
        self.restart()
        self.stop_and_check(signal.SIGTERM)


class SlirpPortDriverTest(RootlesskitCase):
    DRIVER = "slirp4netns"
    PREFIX = "nstrks"
    FWD_PORT = 18282


class BuiltinPortDriverTest(RootlesskitCase):
    DRIVER = "builtin"
    PREFIX = "nstrkb"
    FWD_PORT = 18292


del RootlesskitCase  # only its subclasses run

if __name__ == "__main__":
    unittest.main()
