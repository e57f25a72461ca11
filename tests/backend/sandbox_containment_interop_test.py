"""The sandbox holds (issue #30): what `netstackd -- CMD` and a
`--netns-pid` guest try in order to get out, and what stops them.

Each test is a proof of concept of the 2026-12-06 review
(shared/research/review-2026-12-06.md), findings 1, 2, 4, 13, 14 and 18,
turned into a check that the attack fails:
- CMD (root netstackd, and uid 65534) unmounts its /proc and opens
  netstackd's (and its init's) /proc/PID/mem and ns/net;
- a process in a --netns-pid guest's user namespace does the same;
- root's CMD tries to leave through the host's network namespace, and
  keeps the capabilities it needs over its own;
- CMD types into the user's terminal with TIOCSTI (a pty this test owns
  stands for the user's terminal);
- one ^C on that terminal is one SIGINT for CMD;
- CMD inherits no fd netstackd did not mean to give it;
- CMD starts when /etc/resolv.conf is missing or a dangling symlink.

netstackd runs in H (BackendTopology: lo and a veth into an empty sink,
no default route, asserted before each start). Each run checks that it
left nothing behind: no namespace with a process of ours, no mount in H's
view, no process with the run's marker. The unprivileged runs use uid
65534 and set /dev/net/tun to 0666 for their time (restored after).
Needs root, setpriv, unshare, nsenter, python3.
"""
import errno
import fcntl
import os
import pty
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import termios
import time
import unittest

from tests.backend.backend_topology import BackendTopology
from tests.interop import interop_util as iu

# The system python: uid 65534 may run it (pyenv's is under /root).
PY = "/usr/bin/python3"
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]

# CMD's side of finding 1 and 4: unmount /proc, look for netstackd (by
# the path of this test's copy) and for pid 1, and try to open what would
# give it netstackd: /proc/PID/mem read-write, and its network namespace.
ATTACK = r'''
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
exe = sys.argv[1].encode()
if sys.argv[2] == "umount":
    r = libc.umount2(b"/proc", 2)  # MNT_DETACH
    print("umount", "ok" if r == 0 else
          errno.errorcode.get(ctypes.get_errno(), "?"), flush=True)
found = []
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv0 = f.read().split(b"\0")[0]
    except OSError:
        continue
    if argv0 == exe:
        found.append(int(pid))
print("netstackd pids", found, flush=True)
for pid in sorted(set(found + [1])):
    for what, mode in (("mem", "r+b"), ("ns/net", "rb")):
        try:
            with open(f"/proc/{pid}/{what}", mode, buffering=0):
                pass
            print(f"OPENED /proc/{pid}/{what}", flush=True)
        except OSError as e:
            print(f"refused /proc/{pid}/{what}: "
                  f"{errno.errorcode.get(e.errno, e.errno)}", flush=True)
'''

# Finding 2: CMD types a command into its terminal, as a shell would read
# it after netstackd exits.
TIOCSTI = r'''
import fcntl, os, sys, termios
typed = 0
for fd in (0, 1, 2):
    try:
        for c in b"echo INJECTED\n":
            fcntl.ioctl(fd, termios.TIOCSTI, bytes([c]))
        typed += 1
    except OSError as e:
        print(f"TIOCSTI fd {fd}: {e.strerror}", flush=True)
try:
    t = os.open("/dev/tty", os.O_RDWR)
    for c in b"echo INJECTED\n":
        fcntl.ioctl(t, termios.TIOCSTI, bytes([c]))
    typed += 1
except OSError as e:
    print(f"TIOCSTI /dev/tty: {e.strerror}", flush=True)
print("typed into", typed, flush=True)
'''

# Finding 13: CMD counts the SIGINTs one ^C brings.
SIGINT_COUNT = r'''
import signal, sys, time
n = 0
def on_int(signo, frame):
    global n
    n += 1
signal.signal(signal.SIGINT, on_int)
print("up", flush=True)
end = time.monotonic() + 8
while n == 0 and time.monotonic() < end:
    time.sleep(0.05)
time.sleep(1.0)  # the others, if more come
print("SIGINTS", n, flush=True)
'''


def our_namespaces(tags):
    """The network namespaces that hold a process whose command line has
    one of `tags`."""
    found = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().decode(errors="replace")
            ns = os.readlink(f"/proc/{pid}/ns/net")
        except OSError:
            continue
        if any(t in cmdline for t in tags):
            found.add(ns)
    return found


class Tun0666:
    """/dev/net/tun at 0666 for uid 65534's runs, restored after."""

    def __enter__(self):
        self.mode = os.stat("/dev/net/tun").st_mode & 0o7777
        os.chmod("/dev/net/tun", 0o666)

    def __exit__(self, *exc):
        os.chmod("/dev/net/tun", self.mode)


class SandboxContainmentTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root")
        for tool in ("setpriv", "unshare", "nsenter"):
            if not iu.have(tool):
                raise unittest.SkipTest(f"needs {tool}")
        cls.topo = BackendTopology()
        cls.tmp = tempfile.mkdtemp(prefix="nst-contain-")
        os.chmod(cls.tmp, 0o755)
        try:
            cls.topo.setup()
            # A copy that uid 65534 may run (the runfiles are under /root).
            cls.netstackd = os.path.join(cls.tmp, "netstackd")
            shutil.copy(iu.NETSTACKD, cls.netstackd)
            os.chmod(cls.netstackd, 0o755)
            for name, text in (("attack.py", ATTACK), ("tiocsti.py", TIOCSTI),
                               ("sigint.py", SIGINT_COUNT)):
                path = os.path.join(cls.tmp, name)
                with open(path, "w") as f:
                    f.write(text)
                os.chmod(path, 0o644)
        except BaseException:
            cls.topo.close()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.topo.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def script(self, name):
        return os.path.join(self.tmp, name)

    def args(self, *args, wrap=()):
        cmd = self.topo.sandbox_args(*args, wrap=wrap)
        return [self.netstackd if a == iu.NETSTACKD else a for a in cmd]

    def snapshot(self):
        mounts = iu.run(*self.topo.in_ns(self.topo.h, "cat",
                                         "/proc/self/mountinfo")).stdout
        points = {}
        for line in mounts.splitlines():
            point = line.split()[4]
            if (point.startswith("/run/netns/") and
                    f"-{os.getpid()}-" not in point):
                continue  # other tests' namespaces come and go
            points[point] = points.get(point, 0) + 1
        return {"netns": our_namespaces((self.tmp,)), "mounts": points}

    def assert_nothing_left(self, before):
        self.assertTrue(iu.wait_for(
            lambda: not iu.run("pgrep", "-f", self.tmp,
                               check=False).stdout.split(), timeout=5),
            "processes left: " +
            iu.run("pgrep", "-af", self.tmp, check=False).stdout)
        after = self.snapshot()
        self.assertEqual(after["netns"] - before["netns"], set())
        self.assertEqual(after["mounts"], before["mounts"],
                         "mounts left in H's mount namespace")

    def run_cmd(self, *cmd, flags=(), wrap=(), pass_fds=(), timeout=60):
        before = self.snapshot()
        p = subprocess.run(self.args(*flags, "--", *cmd, wrap=wrap),
                           capture_output=True, text=True, timeout=timeout,
                           pass_fds=pass_fds)
        self.assert_nothing_left(before)
        return p

    # --- Finding 1 and 4: /proc/PID/mem and the host's namespaces ------

    def check_attack_output(self, label, out):
        self.assertNotIn("OPENED", out, f"{label}: {out}")
        self.assertIn("refused /proc/1/mem", out, f"{label}: {out}")

    def test_cmd_cannot_open_netstackd_memory_as_root(self):
        p = self.run_cmd(PY, self.script("attack.py"),
                         self.netstackd, "umount")
        print(p.stdout, file=sys.stderr)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.check_attack_output("root", p.stdout)
        # CMD cannot unmount the /proc of its PID namespace: the mount is
        # locked in its mount namespace.
        self.assertRegex(p.stdout, r"umount (EINVAL|EPERM)")
        # Only the init (a clone of netstackd's, pid 1 here) is in sight.
        self.assertIn("netstackd pids [1]\n", p.stdout)

    def test_cmd_cannot_open_netstackd_memory_unprivileged(self):
        with Tun0666():
            p = self.run_cmd(PY, self.script("attack.py"),
                             self.netstackd, "umount", wrap=NOBODY)
        print(p.stdout, file=sys.stderr)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.check_attack_output("uid 65534", p.stdout)
        self.assertRegex(p.stdout, r"umount (EINVAL|EPERM)")
        # Only the init (a clone of netstackd's, pid 1 here) is in sight.
        self.assertIn("netstackd pids [1]\n", p.stdout)

    def test_netns_pid_guest_cannot_open_netstackd_memory(self):
        """The review's third case: netstackd (uid 65534) joins the user
        namespace of a guest that `unshare -Urn` made, so the guest's root
        is root in netstackd's user namespace, and it sees netstackd in
        the PID namespace they share."""
        h = self.topo.h
        before = self.snapshot()
        with Tun0666():
            target = subprocess.Popen(self.topo.in_ns(
                h, *NOBODY, "unshare", "-Urn", "sleep", "60"))
            nd = None
            try:
                self.assertTrue(iu.wait_for(
                    lambda: os.readlink(f"/proc/{target.pid}/ns/user") !=
                    os.readlink("/proc/self/ns/user"), timeout=5))
                ready_r, ready_w = os.pipe()
                nd = subprocess.Popen(
                    self.args("--netns-pid", str(target.pid), "--ready-fd",
                              str(ready_w), wrap=NOBODY),
                    pass_fds=(ready_w,), stderr=subprocess.PIPE, text=True)
                os.close(ready_w)
                got = os.read(ready_r, 1)
                os.close(ready_r)
                self.assertEqual(got, b"1", "netstackd did not come up")
                p = subprocess.run(
                    [*NOBODY, "nsenter", "-t", str(target.pid), "-U", "-n",
                     "--preserve-credentials", PY,
                     self.script("attack.py"), self.netstackd, "no-umount"],
                    capture_output=True, text=True, timeout=30)
                print(p.stdout, p.stderr, file=sys.stderr)
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertRegex(p.stdout, r"netstackd pids \[\d+\]",
                                 "the guest sees netstackd")
                self.assertNotIn("OPENED", p.stdout)
                self.assertIn("refused", p.stdout)
            finally:
                target.kill()
                target.wait()
                if nd is not None:
                    try:
                        nd.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        nd.kill()
                        nd.wait()
                    nd.stderr.close()
        self.assert_nothing_left(before)

    def test_root_cmd_has_no_capability_over_the_host(self):
        """Finding 4: as root, CMD was real root. Now it is root in a user
        namespace of its own: it still runs its own network (addresses,
        routes, raw sockets), but `nsenter` into the host's network
        namespace and a module or a reboot are not its to do."""
        host_net = os.readlink(f"/proc/{os.getpid()}/ns/net")
        script = (
            "ip addr add 192.0.2.77/32 dev lo && echo own-net-ok; "
            "umount -l /proc 2>/dev/null && echo UMOUNTED; "
            # The host's init's network namespace: real root may enter it.
            "nsenter --net=/proc/1/ns/net true 2>/dev/null && echo ESCAPED; "
            "readlink /proc/self/ns/user; "
            "grep CapEff /proc/self/status")
        p = self.run_cmd("sh", "-c", script)
        print(p.stdout, file=sys.stderr)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("own-net-ok", p.stdout)
        self.assertNotIn("UMOUNTED", p.stdout)
        self.assertNotIn("ESCAPED", p.stdout)
        self.assertNotIn(host_net, p.stdout)
        self.assertNotEqual(p.stdout.splitlines()[-2],
                            os.readlink("/proc/self/ns/user"),
                            "CMD runs in a user namespace of its own")

    # --- Finding 2 and 13: the terminal --------------------------------

    def run_on_pty(self, cmd, wrap=(), send=None, after=None, timeout=30,
                   stdin_tty=True):
        """Runs netstackd with a new pty as its controlling terminal (as a
        shell's foreground job), and returns (exit status, everything the
        pty printed, what is left in the terminal's input queue after
        netstackd exits: what the user's shell would read next)."""
        master, slave = pty.openpty()
        before = self.snapshot()

        def child_setup():
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        def child_setup_no_stdin():
            os.setsid()
            fcntl.ioctl(1, termios.TIOCSCTTY, 0)

        p = subprocess.Popen(self.args("--", *cmd, wrap=wrap),
                             stdin=slave if stdin_tty else subprocess.DEVNULL,
                             stdout=slave, stderr=slave,
                             preexec_fn=(child_setup if stdin_tty
                                         else child_setup_no_stdin))
        out = b""
        sent = False
        deadline = time.monotonic() + timeout
        try:
            while p.poll() is None and time.monotonic() < deadline:
                r, _, _ = select.select([master], [], [], 0.1)
                if r:
                    try:
                        out += os.read(master, 4096)
                    except OSError:
                        break
                if send is not None and not sent and after in out:
                    time.sleep(0.2)
                    os.write(master, send)
                    sent = True
            rc = p.wait(timeout=max(1, deadline - time.monotonic()))
            while select.select([master], [], [], 0.2)[0]:
                try:
                    chunk = os.read(master, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
            # The input queue: read through the slave, without waiting.
            attrs = termios.tcgetattr(slave)
            attrs[3] &= ~(termios.ICANON | termios.ECHO)
            termios.tcsetattr(slave, termios.TCSANOW, attrs)
            os.set_blocking(slave, False)
            pending = b""
            try:
                pending = os.read(slave, 4096)
            except BlockingIOError:
                pass
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            os.close(master)
            os.close(slave)
        self.assert_nothing_left(before)
        return rc, out.decode(errors="replace"), pending

    def test_cmd_cannot_type_into_the_users_terminal(self):
        """With stdin a terminal, CMD gets a pty of its own; without, no
        controlling terminal at all, though its stdout is the user's."""
        for label, wrap, stdin_tty in (
                ("root", (), True), ("uid 65534", NOBODY, True),
                ("root, stdin /dev/null", (), False),
                ("uid 65534, stdin /dev/null", NOBODY, False)):
            with Tun0666():
                rc, out, pending = self.run_on_pty(
                    [PY, self.script("tiocsti.py")], wrap=wrap,
                    stdin_tty=stdin_tty)
            print(f"{label}: exit {rc}\n{out}\npending {pending!r}",
                  file=sys.stderr)
            self.assertEqual(rc, 0, out)
            self.assertNotIn(b"INJECTED", pending,
                             f"{label}: CMD typed into the terminal: {out}")

    def test_one_ctrl_c_is_one_sigint(self):
        rc, out, _ = self.run_on_pty(
            [PY, self.script("sigint.py")], send=b"\x03",
            after=b"up")
        print(out, file=sys.stderr)
        self.assertEqual(rc, 0, out)
        self.assertIn("SIGINTS 1", out)

    def test_terminal_is_restored_when_netstackd_quits_first(self):
        """netstackd ends while CMD still runs (here its --exit-fd
        closes): the init puts the user's terminal back as it was, not
        raw, and CMD's namespace goes."""
        master, slave = pty.openpty()
        before = self.snapshot()
        modes = termios.tcgetattr(slave)
        exit_r, exit_w = os.pipe()

        def child_setup():
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        p = subprocess.Popen(
            self.args("--exit-fd", str(exit_r), "--", "sh", "-c",
                      "echo up; exec sleep 30"),
            stdin=slave, stdout=slave, stderr=slave, pass_fds=(exit_r,),
            preexec_fn=child_setup)
        os.close(exit_r)
        try:
            out = b""
            while b"up" not in out:
                r, _, _ = select.select([master], [], [], 10)
                self.assertTrue(r, f"CMD did not start: {out!r}")
                out += os.read(master, 4096)
            raw = termios.tcgetattr(slave)
            self.assertFalse(raw[3] & termios.ICANON,
                             "the terminal is raw while CMD has its pty")
            os.close(exit_w)
            exit_w = -1
            rc = p.wait(timeout=10)
            self.assertEqual(termios.tcgetattr(slave), modes)
            # 0: a clean stop (159 was the seccomp filter trapping a call
            # the stop made).
            self.assertEqual(rc, 0, os.read(master, 4096)
                             if select.select([master], [], [], 0.5)[0]
                             else b"")
        finally:
            if exit_w >= 0:
                os.close(exit_w)
            if p.poll() is None:
                p.kill()
                p.wait()
            os.close(master)
            os.close(slave)
        self.assert_nothing_left(before)

    # --- Finding 14: fds ------------------------------------------------

    def test_cmd_inherits_only_its_stdio(self):
        pcap = os.path.join(self.tmp, "leak.pcap")
        leaked = os.open("/etc/hostname", os.O_RDONLY)  # no O_CLOEXEC
        os.set_inheritable(leaked, True)
        try:
            p = self.run_cmd(
                "sh", "-c", "for f in /proc/self/fd/*; do "
                "echo \"$f -> $(readlink $f)\"; done",
                flags=("--pcap", pcap), pass_fds=(leaked,))
        finally:
            os.close(leaked)
            if os.path.exists(pcap):
                os.unlink(pcap)
        print(p.stdout, file=sys.stderr)
        self.assertEqual(p.returncode, 0, p.stderr)
        fds = sorted(int(line.split()[0].rsplit("/", 1)[1])
                     for line in p.stdout.splitlines())
        # 0-2, and the one the shell's glob has open (its directory).
        self.assertNotIn("leak.pcap", p.stdout)
        self.assertNotIn("/etc/hostname", p.stdout)
        self.assertLessEqual(len([f for f in fds if f > 2]), 1, p.stdout)

    # --- Issue item 17 (review 18): resolv.conf ------------------------

    def run_with_etc(self, setup):
        """netstackd -- cat /etc/resolv.conf, where netstackd's /etc is an
        overlay (in a mount namespace of this run only) whose resolv.conf
        `setup` changed."""
        before = self.snapshot()
        upper = tempfile.mkdtemp(dir=self.tmp)
        inner = (
            f"mount -t tmpfs tmpfs {upper} && mkdir {upper}/u {upper}/w && "
            f"mount -t overlay overlay -o lowerdir=/etc,upperdir={upper}/u,"
            f"workdir={upper}/w /etc && {setup} && "
            f"exec \"$@\"")
        nd = self.args("--", "cat", "/etc/resolv.conf")
        # self.args is `ip netns exec H netstackd ...`: the namespace part
        # goes first.
        i = nd.index(self.netstackd)
        cmd = nd[:i] + ["unshare", "--mount", "--propagation", "private",
                        "sh", "-c", inner, "sh"] + nd[i:]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        self.assert_nothing_left(before)
        return p

    def test_missing_resolv_conf(self):
        for label, setup in (
                ("missing", "rm -f /etc/resolv.conf"),
                ("dangling", "rm -f /etc/resolv.conf && ln -s "
                             "/run/nst-nothing/stub-resolv.conf "
                             "/etc/resolv.conf")):
            p = self.run_with_etc(setup)
            print(f"{label}: exit {p.returncode}\n{p.stdout}{p.stderr}",
                  file=sys.stderr)
            self.assertEqual(p.returncode, 0, f"{label}: {p.stderr}")
            self.assertIn("nameserver 10.0.2.3", p.stdout, label)


if __name__ == "__main__":
    unittest.main()
