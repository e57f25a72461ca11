"""netstackd's sandbox runner (netstackd -- CMD) and its attach modes
(--netns-pid, --ready-fd, --exit-fd), against real programs.

netstackd runs in H (BackendTopology: H has only lo and a veth into an
empty sink namespace, and no default route; asserted before each start),
so the runner's host sockets stay inside H. H runs an HTTP server on its
veth address and dnsmasq on its loopback (netstackd's --dns-upstream),
which alone knows the name sandbox.test.

Each run checks, after netstackd exits, that it left nothing behind: no
network namespace with a process in it that was not there before, no
resolv.conf file of ours in /tmp, no new mount in H's view, no process
from the run. The unprivileged runs use uid 65534 and set /dev/net/tun to
0666 for their time (it is 0600 on these machines; restored after).
Needs root, curl, dnsmasq, setpriv, unshare, nsenter.
"""
import glob
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

from tests.backend.backend_topology import H4, H6, BackendTopology
from tests.backend.sandbox_util import (NOBODY, TunMode, namespaces_of,
                                        netstackd_copy)
from tests.interop import interop_util as iu

DNSMASQ = "127.0.0.53"
PORT = 8080
USERNS_OFF = [sys.executable, os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "userns_off.py")]


class SandboxRunnerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root")
        for tool in ("curl", "dnsmasq", "setpriv", "unshare", "nsenter"):
            if not iu.have(tool):
                raise unittest.SkipTest(f"needs {tool}")
        cls.topo = BackendTopology()
        cls.tmp = tempfile.mkdtemp(prefix="nst-sandbox-")
        os.chmod(cls.tmp, 0o755)
        try:
            cls.topo.setup()
            h = cls.topo.h
            www = os.path.join(cls.tmp, "www")
            os.mkdir(www)
            cls.payload = os.urandom(3 << 20)
            with open(os.path.join(www, "file"), "wb") as f:
                f.write(cls.payload)
            cls.sha = hashlib.sha256(cls.payload).hexdigest()
            cls.topo.spawn(h, sys.executable, "-m", "http.server",
                           "--bind", "::", "--directory", www, str(PORT))
            cls.topo.spawn(h, "dnsmasq", "--keep-in-foreground", "--no-resolv",
                           "--no-hosts", "--no-poll", "--bind-interfaces",
                           f"--listen-address={DNSMASQ}", "--port=53",
                           f"--address=/sandbox.test/{H4}",
                           f"--address=/sandbox.test/{H6}",
                           f"--pid-file={cls.tmp}/dnsmasq.pid", "--user=root")
            ok = iu.wait_for(lambda: iu.run(*cls.topo.in_ns(
                h, "curl", "-s", "-o", "/dev/null", f"http://{H4}:{PORT}/file"),
                check=False).returncode == 0, timeout=10)
            assert ok, "H's HTTP server did not come up"
            cls.netstackd = netstackd_copy(cls.tmp)
        except BaseException:
            cls.topo.close()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.topo.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def args(self, *args, wrap=()):
        cmd = self.topo.sandbox_args(*args, dns_upstream=DNSMASQ, wrap=wrap,
                                      runas=None)
        # The unprivileged copy, whoever runs it.
        return [self.netstackd if a == iu.NETSTACKD else a for a in cmd]

    def snapshot(self):
        return {
            "netns": namespaces_of((self.tmp, f"nstsandbox{os.getpid()}")),
            "resolv": set(glob.glob("/tmp/netstackd-resolv.*")),
            "mounts": iu.run(*self.topo.in_ns(self.topo.h, "cat",
                                              "/proc/self/mountinfo")).stdout,
            "h_links": self.topo.links(self.topo.h),
        }

    def mount_points(self, mountinfo):
        """The mount points of a mountinfo text, with their counts, less
        /run/netns/NAME of namespaces other tests on the machine make and
        delete meanwhile (ours carry the test's pid)."""
        points = {}
        for line in mountinfo.splitlines():
            point = line.split()[4]
            if (point.startswith("/run/netns/") and
                    f"-{os.getpid()}-" not in point):
                continue
            points[point] = points.get(point, 0) + 1
        return points

    def assert_nothing_left(self, before, marker):
        # When netstackd ends abruptly (the execve test: it becomes
        # /bin/true), the init learns it from its parent-death signal,
        # puts the terminal back and exits; the kernel then ends CMD. That
        # takes the init a moment to be scheduled.
        iu.wait_for(lambda: not (self.snapshot()["netns"] - before["netns"]),
                    timeout=5)
        after = self.snapshot()
        self.assertEqual(after["netns"] - before["netns"], set(),
                         "network namespaces left with processes in them")
        self.assertEqual(after["resolv"], before["resolv"],
                         "resolv.conf files left in /tmp")
        self.assertEqual(self.mount_points(after["mounts"]),
                         self.mount_points(before["mounts"]),
                         "mounts left in H's mount namespace")
        self.assertEqual(after["h_links"], before["h_links"])
        left = iu.run("pgrep", "-f", marker, check=False).stdout.split()
        self.assertEqual(left, [], f"processes left: {left}")

    def run_sandbox(self, script, *flags, wrap=(), timeout=60):
        marker = f"nstsandbox{os.getpid()}x{time.monotonic_ns()}"
        before = self.snapshot()
        cmd = self.args(*flags, "--", "sh", "-c", script, marker, wrap=wrap)
        t0 = time.monotonic()
        p = subprocess.run(cmd, capture_output=True, text=True,
                           timeout=timeout)
        elapsed = time.monotonic() - t0
        print(f"  {' '.join(flags) or '(no flags)'}: exit {p.returncode} "
              f"in {elapsed * 1000:.0f} ms", file=sys.stderr)
        self.assert_nothing_left(before, marker)
        return p

    def reach_host(self, wrap=()):
        # By name through the DNS address (resolv.conf), both families, and
        # the exit status back.
        script = (
            "set -e; cat /etc/resolv.conf; "
            f"curl -4 -sS --max-time 20 http://sandbox.test:{PORT}/file | "
            "sha256sum; "
            f"curl -6 -sS --max-time 20 http://sandbox.test:{PORT}/file | "
            "sha256sum; id -u; exit 7")
        p = self.run_sandbox(script, wrap=wrap)
        self.assertEqual(p.returncode, 7, p.stderr)
        self.assertIn("nameserver 10.0.2.3", p.stdout)
        self.assertEqual(p.stdout.count(self.sha), 2, p.stdout + p.stderr)
        self.assertEqual(p.stdout.strip().splitlines()[-1], "0",
                         "CMD is root in its namespace")
        # Quiet by default: nothing from netstackd on a clean run.
        self.assertEqual(p.stderr, "", p.stderr)

    def test_root_reaches_http_and_dns_by_name(self):
        self.reach_host()

    def test_unprivileged_user_reaches_http_and_dns_by_name(self):
        with TunMode():
            self.reach_host(wrap=NOBODY)

    def test_unprivileged_with_tun_0600_says_what_is_wrong(self):
        with TunMode(0o600):
            p = self.run_sandbox("exit 0", wrap=NOBODY)
        self.assertEqual(p.returncode, 1)
        self.assertIn("open /dev/net/tun: Permission denied (its mode is 0600)",
                      p.stderr)

    def test_unprivileged_where_user_namespaces_are_off_says_so(self):
        # uid 65534 in a user namespace whose max_user_namespaces is 0.
        with TunMode():
            p = self.run_sandbox("exit 0", wrap=USERNS_OFF)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("user.max_user_namespaces = 0", p.stderr)
        self.assertIn("run netstackd as root, or allow user namespaces",
                      p.stderr)

    def test_the_system_call_filter_stops_a_forbidden_call(self):
        # --sandbox-test=execve: execve(/bin/true) once the sandbox is on.
        p = self.run_sandbox("exec sleep 30", "--sandbox-test=execve")
        self.assertEqual(p.returncode, 159, p.stderr)
        self.assertIn("netstackd: system call 59 (execve) is not allowed "
                      "after setup", p.stderr)
        # kill(2) may signal CMD only.
        p = self.run_sandbox("exec sleep 30", "--sandbox-test=kill")
        self.assertEqual(p.returncode, 159, p.stderr)
        self.assertIn("netstackd: system call 62 (kill) is not allowed "
                      "after setup", p.stderr)
        # The control: without the filter the call goes through, and
        # netstackd becomes /bin/true (status 0).
        p = self.run_sandbox("exit 3", "--sandbox=off",
                             "--sandbox-test=execve")
        self.assertEqual(p.returncode, 0, p.stderr)

    def thread_states(self, pid):
        """Per thread of process `pid`: its status fields that matter here,
        what its root directory holds, and its mount namespace."""
        states = {}
        for tid in os.listdir(f"/proc/{pid}/task"):
            task = f"/proc/{pid}/task/{tid}"
            with open(f"{task}/status") as f:
                fields = dict(line.rstrip("\n").split(":\t", 1)
                              for line in f if ":\t" in line)
            states[tid] = {
                "CapEff": fields["CapEff"], "CapPrm": fields["CapPrm"],
                "CapBnd": fields["CapBnd"], "CapInh": fields["CapInh"],
                "NoNewPrivs": fields["NoNewPrivs"],
                "Seccomp": fields["Seccomp"],
                "root": sorted(os.listdir(f"{task}/root")),
                "mnt": os.readlink(f"{task}/ns/mnt"),
            }
        return states

    def test_every_thread_is_confined(self):
        """After setup, each of netstackd's threads (the main loop and the
        guest-socket thread of the spliced forwards) has no capability
        left, no_new_privs, the filter, and a root directory that is an
        empty tmpfs in a mount namespace of its own (docs/SECURITY.md). A
        sanitizer build keeps /proc in it for the leak check."""
        # --config=asan runs set ASAN_OPTIONS for every test.
        want_root = ["proc"] if "ASAN_OPTIONS" in os.environ else []
        zero = "0000000000000000"
        with TunMode():  # for uid 65534, as above
            self.check_confined(want_root, zero)

    def check_confined(self, want_root, zero):
        for label, wrap in (("root", ()), ("uid 65534", NOBODY)):
            marker = f"nstsandbox{os.getpid()}conf{len(label)}"
            before = self.snapshot()
            p = subprocess.Popen(
                self.args("-t", "18080:80", "--", "sh", "-c",
                          "echo up; exec sleep 30", marker, wrap=wrap),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                if p.stdout.readline().strip() != "up":
                    p.wait(timeout=10)
                    self.fail(f"{label}: CMD did not start: exit "
                              f"{p.returncode}: {p.stderr.read()}")
                filtered = iu.wait_for(
                    lambda: all(s["Seccomp"] == "2" for s in
                                self.thread_states(p.pid).values()),
                    timeout=10)
                states = self.thread_states(p.pid)
                self.assertTrue(filtered, f"{label}: {states}")
                self.assertGreaterEqual(len(states), 2,
                                        f"{label}: the guest-socket thread")
                own_mnt = os.readlink("/proc/self/ns/mnt")
                for tid, s in states.items():
                    what = f"{label}, thread {tid}: {s}"
                    for cap in ("CapEff", "CapPrm", "CapBnd", "CapInh"):
                        self.assertEqual(s[cap], zero, what)
                    self.assertEqual(s["NoNewPrivs"], "1", what)
                    self.assertEqual(s["root"], want_root, what)
                    self.assertNotEqual(s["mnt"], own_mnt, what)
                self.assertEqual(len({s["mnt"] for s in states.values()}), 1,
                                 f"{label}: one mount namespace: {states}")
                os.kill(p.pid, signal.SIGTERM)
                rc = p.wait(timeout=10)
                err = p.stderr.read()
            finally:
                if p.poll() is None:
                    p.kill()
                    p.wait()
                p.stdout.close()
                p.stderr.close()
            self.assertEqual(rc, 128 + signal.SIGTERM, f"{label}: {err}")
            self.assert_nothing_left(before, marker)

    def test_no_dns_config_leaves_resolv_conf(self):
        with open("/etc/resolv.conf") as f:
            host = f.read()
        p = self.run_sandbox("cat /etc/resolv.conf", "--no-dns-config")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, host)

    def test_signals_go_to_cmd_and_its_status_comes_back(self):
        for sig, script, want in (
                (signal.SIGTERM, "trap 'exit 42' TERM; echo up; "
                                 "while :; do sleep 0.05; done", 42),
                (signal.SIGHUP, "trap 'exit 43' HUP; echo up; "
                                "while :; do sleep 0.05; done", 43),
                (signal.SIGINT, "echo up; exec sleep 60", 128 + 2)):
            marker = f"nstsandbox{os.getpid()}sig{int(sig)}"
            before = self.snapshot()
            p = subprocess.Popen(
                self.args("--", "sh", "-c", script, marker),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                self.assertEqual(p.stdout.readline().strip(), "up")
                # netstackd is `ip netns exec`'s child, which execs it: the
                # Popen pid is netstackd's.
                os.kill(p.pid, sig)
                rc = p.wait(timeout=10)
                err = p.stderr.read()
            finally:
                if p.poll() is None:
                    p.kill()
                    p.wait()
                p.stdout.close()
                p.stderr.close()
            self.assertEqual(rc, want, f"{sig!r}: {err}")
            self.assert_nothing_left(before, marker)

    def proc_has_submounts(self):
        """Whether this view of /proc has mounts over parts of it (a
        container's masks). A user namespace may then not mount a proc of
        its own (the kernel's mnt_too_revealing), and netstackd goes on
        with the /proc it has."""
        with open("/proc/self/mountinfo") as f:
            return any(line.split()[4].startswith("/proc/") for line in f)

    def test_background_children_go_with_cmd(self):
        """CMD leaves a child running in the background (SIGHUP ignored,
        its stdio on /dev/null) and ends, by exiting or by a signal passed
        on by netstackd. Once netstackd has exited, that child is gone:
        CMD's tree is in a PID namespace of its own whose init is
        netstackd's, and the kernel kills what is left in it when the
        init exits. CMD is pid 2 there and sees that namespace in its
        /proc (a proc of its own, mounted in its mount namespace)."""
        own_pidns = os.readlink("/proc/self/ns/pid")
        with TunMode():  # for uid 65534, as above
            for label, wrap in (("root", ()), ("uid 65534", NOBODY)):
                for end in ("exit", "SIGTERM"):
                    self.check_background_child(label, wrap, end, own_pidns)

    def check_background_child(self, label, wrap, end, own_pidns):
        what = f"{label}, CMD ends by {end}"
        marker = f"nstsandbox{os.getpid()}bg{len(label)}{end}"
        child = f"{marker}child"  # only the child's command line has it
        script = (
            "sh -c 'trap \"\" HUP; while :; do sleep 1; done' \"${0}child\" "
            "</dev/null >/dev/null 2>&1 & "
            "echo $$; readlink /proc/self/ns/pid; "
            "tr '\\0' ' ' </proc/1/cmdline; echo; echo up; " +
            ("read line; exit 3" if end == "exit" else "exec sleep 60"))
        before = self.snapshot()
        p = subprocess.Popen(
            self.args("--", "sh", "-c", script, marker, wrap=wrap),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        pids = []
        try:
            lines = [p.stdout.readline().strip() for _ in range(4)]
            if lines[-1] != "up":
                p.kill()
                p.wait()
                self.fail(f"{what}: CMD did not start: {lines} "
                          f"{p.stderr.read()}")
            # The child as this test sees it: its pid here, its PID
            # namespace.
            self.assertTrue(iu.wait_for(lambda: self.pids_of(child),
                                        timeout=5),
                            f"{what}: no background child")
            pids = self.pids_of(child)
            child_pidns = os.readlink(f"/proc/{pids[0]}/ns/pid")
            if end == "exit":
                p.stdin.write("\n")
                p.stdin.flush()
            else:
                os.kill(p.pid, signal.SIGTERM)
            rc = p.wait(timeout=10)
            err = p.stderr.read()
            left = [pid for pid in pids if os.path.exists(f"/proc/{pid}")]
            self.assertEqual(left, [], f"{what}: the background child is "
                             f"still running")
            self.assertEqual(self.pids_of(child), [], what)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            for f in (p.stdin, p.stdout, p.stderr):
                f.close()
            for pid in self.pids_of(child):  # after a failure only
                os.kill(pid, signal.SIGKILL)
        self.assertEqual(rc, 3 if end == "exit" else 128 + signal.SIGTERM,
                         f"{what}: {err}")
        self.assertNotEqual(child_pidns, own_pidns,
                            f"{what}: CMD's tree in a PID namespace of its "
                            f"own")
        self.assertEqual(lines[0], "2", f"{what}: CMD is pid 2 there")
        if label == "root" or not self.proc_has_submounts():
            self.assertEqual(lines[1], child_pidns,
                             f"{what}: CMD's /proc is its namespace's")
            self.assertIn("netstackd", lines[2],
                          f"{what}: pid 1 is netstackd's init")
        self.assert_nothing_left(before, marker)

    def pids_of(self, marker):
        return [int(pid) for pid in
                iu.run("pgrep", "-f", marker, check=False).stdout.split()]

    def test_bad_input(self):
        p = subprocess.run(self.args("--"), capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn('"--" must be followed by the command', p.stderr)
        p = self.run_sandbox("exec /nonexistent/cmd")
        self.assertEqual(p.returncode, 127)
        p = subprocess.run(self.args("--", "/nonexistent/cmd"),
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 127)
        self.assertIn("cannot run '/nonexistent/cmd': No such file or "
                      "directory", p.stderr)
        p = subprocess.run(self.args("--netns-pid", "999999999"),
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 1)
        self.assertIn("--netns-pid 999999999: no process 999999999", p.stderr)
        p = subprocess.run(self.args("--netns-pid", "1", "--", "true"),
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("-- CMD makes its own network namespace", p.stderr)

    def test_netns_pid_ready_fd_and_exit(self):
        """slirp4netns's way: a process made its namespace; netstackd
        attaches by its PID, says when the network is up, and quits when
        the process exits (and, with --exit-fd, when that fd closes)."""
        h = self.topo.h
        target = subprocess.Popen(self.topo.in_ns(h, "unshare", "-n",
                                                  "sleep", "60"))
        try:
            iu.wait_for(lambda: iu.run("readlink", f"/proc/{target.pid}/ns/net",
                                       check=False).stdout !=
                        iu.run("readlink", "/proc/self/ns/net").stdout,
                        timeout=5)
            # unshare execs sleep: target.pid is ip netns exec's, which
            # execs unshare, which execs sleep: the same pid throughout.
            ready_r, ready_w = os.pipe()
            exit_r, exit_w = os.pipe()
            nd = subprocess.Popen(
                self.args("--netns-pid", str(target.pid), "--ready-fd",
                          str(ready_w), "--exit-fd", str(exit_r)),
                pass_fds=(ready_w, exit_r), stderr=subprocess.PIPE, text=True)
            os.close(ready_w)
            os.close(exit_r)
            t0 = time.monotonic()
            self.assertEqual(os.read(ready_r, 1), b"1", "no ready byte")
            print(f"  --netns-pid ready in "
                  f"{(time.monotonic() - t0) * 1000:.0f} ms", file=sys.stderr)
            got = subprocess.run(
                ["nsenter", "-t", str(target.pid), "-n", "curl", "-sS",
                 "--max-time", "20", f"http://[{H6}]:{PORT}/file"],
                capture_output=True, timeout=30)
            self.assertEqual(hashlib.sha256(got.stdout).hexdigest(), self.sha)
            target.kill()
            target.wait()
            self.assertEqual(nd.wait(timeout=10), 0, nd.stderr.read())
            nd.stderr.close()
            os.close(ready_r)
            # --exit-fd: a second attach, ended by closing the pipe.
            target = subprocess.Popen(self.topo.in_ns(h, "unshare", "-n",
                                                      "sleep", "60"))
            time.sleep(0.3)
            exit_r, exit_w2 = os.pipe()
            nd = subprocess.Popen(
                self.args("--netns-pid", str(target.pid), "--exit-fd",
                          str(exit_r)),
                pass_fds=(exit_r,), stderr=subprocess.PIPE, text=True)
            os.close(exit_r)
            time.sleep(0.5)
            self.assertIsNone(nd.poll(), "netstackd quit early")
            os.close(exit_w2)
            os.close(exit_w)
            self.assertEqual(nd.wait(timeout=10), 0, nd.stderr.read())
            nd.stderr.close()
        finally:
            if target.poll() is None:
                target.kill()
                target.wait()

    def test_netns_name_quits_when_the_namespace_is_deleted(self):
        """--netns NAME: netstackd watches /run/netns/NAME once a second,
        through an fd of its directory since its own root is empty by
        then; `ip netns del` ends it, status 0."""
        name = f"nstsbx-{os.getpid()}-att"
        iu.run("ip", "netns", "add", name)
        nd = None
        try:
            ready_r, ready_w = os.pipe()
            nd = subprocess.Popen(self.args("--netns", name, "--ready-fd",
                                            str(ready_w)),
                                  pass_fds=(ready_w,), stderr=subprocess.PIPE,
                                  text=True)
            os.close(ready_w)
            self.assertEqual(os.read(ready_r, 1), b"1", "no ready byte")
            os.close(ready_r)
            got = iu.run("ip", "-n", name, "-4", "addr", "show", "tap0")
            self.assertIn("10.0.2.100/24", got.stdout)
            time.sleep(1.5)  # a check or two that finds it still there
            if nd.poll() is not None:
                self.fail(f"netstackd quit early: {nd.stderr.read()}")
            states = self.thread_states(nd.pid)
            self.assertEqual([s["root"] for s in states.values()],
                             [["proc"] if "ASAN_OPTIONS" in os.environ
                              else []] * len(states))
            t0 = time.monotonic()
            iu.run("ip", "netns", "del", name)
            rc = nd.wait(timeout=10)
            err = nd.stderr.read()
            self.assertEqual(rc, 0, err)
            self.assertIn(f"/run/netns/{name} is gone; quitting", err)
            # Its counters at exit name the link by the TAP's name in the
            # namespace (tap0), as docs/COUNTERS.md says (they said unix0).
            self.assertRegex(err, r"\blink\.tap0\.rx_frames \d+")
            self.assertNotIn("link.unix0.", err)
            print(f"  --netns {name}: quit "
                  f"{(time.monotonic() - t0) * 1000:.0f} ms after ip netns "
                  f"del", file=sys.stderr)
        finally:
            if nd is not None:
                if nd.poll() is None:
                    nd.kill()
                    nd.wait()
                nd.stderr.close()
            iu.run("ip", "netns", "del", name, check=False)


if __name__ == "__main__":
    unittest.main(verbosity=2)
