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
import socket
import subprocess
import sys
import tempfile
import termios
import time
import unittest

from tests.backend.backend_topology import BackendTopology
from tests.backend.sandbox_util import (NOBODY, SYSTEM_PYTHON as PY, TunMode,
                                        namespaces_of, netstackd_copy)
from tests.interop import interop_util as iu


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
            cls.netstackd = netstackd_copy(cls.tmp)
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
        cmd = self.topo.sandbox_args(*args, wrap=wrap, runas=None)
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
        return {"netns": namespaces_of((self.tmp,)), "mounts": points}

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
        with TunMode():
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
        with TunMode():
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
                   stdin_tty=True, argv=None, during=None):
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

        p = subprocess.Popen(argv or self.args("--", *cmd, wrap=wrap),
                             stdin=slave if stdin_tty else subprocess.DEVNULL,
                             stdout=slave, stderr=slave,
                             preexec_fn=(child_setup if stdin_tty
                                         else child_setup_no_stdin))
        out = b""
        sent = False
        start = time.monotonic()
        deadline = start + timeout
        try:
            while p.poll() is None and time.monotonic() < deadline:
                if during is not None and time.monotonic() - start > during[0]:
                    during[1](p)
                    during = None
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
            with TunMode():
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

    # --- The second review (2026-12-06) --------------------------------

    def test_root_cmd_is_not_root_to_the_kernel(self):
        """The second review's finding 1: root's CMD mapped to uid 0 had no
        capability outside its namespaces, but the kernel's uid checks took
        it for root (/proc/sys by uid alone, root's device nodes and
        files). Now its root is nobody outside (--runas)."""
        probe = (
            "import os\n"
            "for path, mode in (('/proc/sys/kernel/core_pattern', os.O_WRONLY),"
            " ('/proc/sys/kernel/hostname', os.O_WRONLY),"
            " ('/etc/shadow', os.O_RDONLY)):\n"
            "    try:\n"
            "        os.close(os.open(path, mode))\n"
            "        print('OPENED', path)\n"
            "    except OSError as e:\n"
            "        print('refused', path, e.strerror)\n"
            "print('uid', os.getuid())\n")
        p = self.run_cmd(PY, "-c", probe)
        print(p.stdout, file=sys.stderr)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn("OPENED", p.stdout)
        self.assertIn("uid 0", p.stdout, "CMD is root in its namespace")
        self.assertIn("refused /proc/sys/kernel/core_pattern", p.stdout)

    def test_a_background_writer_does_not_keep_the_sandbox(self):
        """The second review's finding 2: with a pty, the init drained it
        until 20 ms passed without output, so a background process of
        CMD's that kept writing kept the init, and itself, alive, even
        after netstackd was killed, and the terminal raw."""
        ticker = os.path.join(self.tmp, "ticker.py")
        with open(ticker, "w") as f:
            f.write("import signal, sys, time\n"
                    "signal.signal(signal.SIGHUP, signal.SIG_IGN)\n"
                    "while True:\n"
                    "    sys.stdout.write('t'); sys.stdout.flush()\n"
                    "    time.sleep(0.005)\n")
        rc, out, _ = self.run_on_pty(
            ["sh", "-c", f"setsid {PY} {ticker} & sleep 1; exit 3"],
            timeout=15)
        self.assertEqual(rc, 3, out[-300:])

    def test_init_does_not_spin_when_cmd_lets_go_of_its_terminal(self):
        """The second review's finding 7: once nothing held the pty, the
        init polled its master for nothing and woke at once, every time:
        a core at 100% for a CMD that daemonizes."""
        ticks = []

        def measure(p):
            kids = set()
            for tid in os.listdir(f"/proc/{p.pid}/task"):
                with open(f"/proc/{p.pid}/task/{tid}/children") as f:
                    kids.update(int(k) for k in f.read().split())

            def cpu():
                total = 0
                for k in kids:
                    with open(f"/proc/{k}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                    total += int(fields[11]) + int(fields[12])
                return total

            first = cpu()
            time.sleep(1.0)
            ticks.append(cpu() - first)

        rc, out, _ = self.run_on_pty(
            ["sh", "-c", "exec </dev/null >/dev/null 2>&1; sleep 3"],
            during=(0.8, measure))
        self.assertEqual(rc, 0, out)
        self.assertEqual(len(ticks), 1, "not measured")
        hz = os.sysconf("SC_CLK_TCK")
        # A spinning init uses the whole second (hz ticks).
        self.assertLess(ticks[0], hz // 10,
                        f"the init used {ticks[0]} of {hz} ticks in 1 s")

    def test_a_background_cmd_does_not_read_the_users_keys(self):
        """The second review's finding 3: run in the background of an
        interactive shell, CMD (in a session of its own, so out of job
        control's reach) read what the user typed to the shell. Now CMD's
        terminal fds are its own pty, and only the foreground job's keys
        are relayed to it."""
        wrapper = os.path.join(self.tmp, "bg_shell.py")
        steal = os.path.join(self.tmp, "steal.py")
        with open(steal, "w") as f:
            f.write("import os, select, sys\n"
                    "print('up', flush=True)\n"
                    "r, _, _ = select.select([0], [], [], 3)\n"
                    "print('CMD GOT', os.read(0, 100) if r else b'nothing',"
                    " flush=True)\n")
        with open(wrapper, "w") as f:
            # A shell's part: netstackd in a background process group of
            # the terminal's session; the shell (this) keeps the
            # foreground and reads what the user types.
            f.write("import os, select, sys\n"
                    "pid = os.fork()\n"
                    "if pid == 0:\n"
                    "    os.setpgid(0, 0)\n"
                    "    os.execvp(sys.argv[1], sys.argv[1:])\n"
                    "r, _, _ = select.select([0], [], [], 6)\n"
                    "print('SHELL GOT', os.read(0, 100) if r else b'nothing',"
                    " flush=True)\n"
                    "_, status = os.waitpid(pid, 0)\n"
                    "sys.exit(os.waitstatus_to_exitcode(status))\n")
        argv = [PY, wrapper] + self.args("--", PY, steal)
        rc, out, _ = self.run_on_pty(None, argv=argv, send=b"typed-line\n",
                                     after=b"up")
        print(out, file=sys.stderr)
        self.assertEqual(rc, 0, out)
        self.assertIn("SHELL GOT b'typed-line", out)
        self.assertIn("CMD GOT b'nothing'", out)

    def test_cmd_can_neither_reach_nor_replace_the_forward_api(self):
        """The second review's finding 6: CMD (the same uid as an
        unprivileged netstackd) removed the API's socket and bound its own
        there, and answered the operator's requests. Now the socket is
        covered in CMD's mount namespace."""
        for label, wrap in (("root", ()), ("uid 65534", NOBODY)):
            apidir = tempfile.mkdtemp(dir=self.tmp)
            os.chmod(apidir, 0o777)
            api = os.path.join(apidir, "api.sock")
            script = (
                f"{PY} -c \"import socket; s = socket.socket(socket.AF_UNIX);"
                f" s.connect('{api}')\" 2>/dev/null && echo CONNECTED; "
                f"rm -f {api} 2>/dev/null && echo REMOVED; "
                f"{PY} -c \"import socket; s = socket.socket(socket.AF_UNIX);"
                f" s.bind('{api}')\" 2>/dev/null && echo BOUND; "
                "echo tried")
            with TunMode():
                before = self.snapshot()
                p = subprocess.Popen(
                    self.args("--forward-api", api, "--", "sh", "-c",
                              script + "; sleep 2", wrap=wrap),
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                try:
                    line = p.stdout.readline()
                    while line and line.strip() != "tried":
                        self.assertNotIn(line.strip(),
                                         ("CONNECTED", "REMOVED", "BOUND"),
                                         f"{label}: CMD {line}")
                        line = p.stdout.readline()
                    if line.strip() != "tried":
                        self.fail(f"{label}: {p.stderr.read()}")
                    # The operator's API is still netstackd's.
                    s = socket.socket(socket.AF_UNIX)
                    s.settimeout(5)
                    s.connect(api)
                    s.sendall(b'{"op":"list"}\n')
                    answer = s.recv(4096)
                    s.close()
                    self.assertIn(b'"ok":true', answer, label)
                    rc = p.wait(timeout=10)
                finally:
                    if p.poll() is None:
                        p.kill()
                        p.wait()
                    p.stdout.close()
                    p.stderr.close()
                self.assertEqual(rc, 0, label)
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

    def test_no_proc_of_its_own_refuses_the_start(self):
        """Review finding 1's third part: where a user namespace may not
        mount a proc of its own (the host's /proc has a mount over part of
        it, as in some containers: the kernel's mnt_too_revealing), CMD
        would keep the host's /proc, netstackd in it. netstackd used to
        start CMD anyway with a --verbose note; now it refuses, and says
        why. Run as uid 65534, whose CMD's user namespace is the one that
        cannot mount."""
        before = self.snapshot()
        nd = self.args("--", "true", wrap=NOBODY)
        i = nd.index(NOBODY[0])
        cmd = nd[:i] + ["unshare", "--mount", "--propagation", "private",
                        "sh", "-c", "mount -t tmpfs tmpfs /proc/sys && "
                        "exec \"$@\"", "sh"] + nd[i:]
        with TunMode():
            p = subprocess.run(cmd, capture_output=True, text=True,
                               timeout=60)
        self.assert_nothing_left(before)
        print(f"exit {p.returncode}: {p.stderr}", file=sys.stderr)
        self.assertEqual(p.returncode, 126, p.stderr)
        self.assertIn("mount a /proc of CMD's PID namespace", p.stderr)

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
