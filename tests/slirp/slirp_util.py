"""What the libslirp interop tests share (issue #31 part 4): which
libslirp.so.0 is under test, proof that a process really loaded it, the
"host" namespace with no route off this machine, and a clean way to start
and stop the clients' process trees.

The library under test comes from NETSTACK_LIBSLIRP_DIR:
  - unset or empty: the system's libslirp (Debian's libslirp0, the
    baseline); programs run with the environment as it is;
  - a directory holding libslirp.so.0, or the library file itself (any
    name: a file not called libslirp.so.0 gets a symlink of that name in a
    temporary directory); programs run with LD_LIBRARY_PATH pointing there;
  - a relative path is a Bazel runfile (a py_test's `data` plus `env`), or
    relative to the working directory outside Bazel.
NETSTACK_LIBSLIRP_LABEL names a library from a directory in the figures
(default "netstack"); the system's is "debian".

Pointing a library at a program proves nothing by itself: the dynamic
loader may still take another copy (a RUNPATH, ld.so.cache, a missing
version node it silently skips with "no version information"). So every
test asserts, from /proc/PID/maps of the client's own process, that the
one libslirp mapped there is the expected file (device and inode compared,
not only the name).
"""
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

from tests.backend.backend_topology import H4, H6, BackendTopology
from tests.interop import interop_util as iu

ENV_DIR = "NETSTACK_LIBSLIRP_DIR"
ENV_LABEL = "NETSTACK_LIBSLIRP_LABEL"
SONAME = "libslirp.so.0"
NOBODY_UID = 65534
# setpriv to uid/gid 65534 with no supplementary groups: the unprivileged
# user of the tests. Its capabilities go with the uid change.
NOBODY = ["setpriv", f"--reuid={NOBODY_UID}", f"--regid={NOBODY_UID}",
          "--clear-groups"]
# An interpreter every user may run: the test's own may live under /root.
SYSTEM_PYTHON = "/usr/bin/python3"


def system_libslirp():
    """The path the dynamic loader resolves libslirp.so.0 to with no
    LD_LIBRARY_PATH (ld.so.cache), e.g. /lib/x86_64-linux-gnu/..."""
    out = iu.run("ldconfig", "-p").stdout
    for line in out.splitlines():
        m = re.match(r"\s*(\S+) \((.*)\) => (\S+)", line)
        if m and m.group(1) == SONAME and "x86-64" in m.group(2):
            return m.group(3)
    raise RuntimeError(f"ld.so.cache has no {SONAME}: is libslirp0 "
                       "installed?")


def _resolve(path):
    if os.path.isabs(path):
        return path
    if iu.RUNFILES:
        candidate = os.path.join(iu.RUNFILES, iu.WORKSPACE, path)
        if os.path.exists(candidate):
            return candidate
    return os.path.abspath(path)


class Libslirp:
    """The libslirp.so.0 under test (see the module's doc)."""

    def __init__(self, setting=None):
        if setting is None:
            setting = os.environ.get(ENV_DIR, "")
        self._tmp = None
        if not setting:
            self.dir = None
            self.path = os.path.realpath(system_libslirp())
            self.label = "debian"
            return
        p = _resolve(setting)
        if os.path.isdir(p):
            lib = os.path.join(p, SONAME)
            if not os.path.exists(lib):
                raise RuntimeError(f"{ENV_DIR}={setting}: no {SONAME} in {p}")
            self.dir = p
        elif os.path.isfile(p):
            if os.path.basename(p) == SONAME:
                self.dir = os.path.dirname(p)
            else:
                # 0755 and under /tmp: the unprivileged clients load it too.
                self._tmp = tempfile.mkdtemp(prefix="nst-libslirp-",
                                             dir="/tmp")
                os.chmod(self._tmp, 0o755)
                os.symlink(os.path.realpath(p),
                           os.path.join(self._tmp, SONAME))
                self.dir = self._tmp
        else:
            raise RuntimeError(f"{ENV_DIR}={setting}: {p} does not exist")
        self.path = os.path.realpath(os.path.join(self.dir, SONAME))
        # The name the figures carry (bench_line): ours unless told.
        self.label = os.environ.get(ENV_LABEL) or "netstack"
        # The dynamic loader of an unprivileged client must be able to
        # read it: Bazel's runfiles live under /root.
        self.world_readable = _world_readable(self.path)

    def readable_by_all(self, directory):
        """This library, or, when uid 65534 cannot read it (Bazel's
        runfiles live under /root), a new Libslirp for a copy of it in
        `directory`/lib (0755 all the way: the caller's directory must be
        too). The copy keeps this one's label; this one is closed."""
        if self.dir is None or self.world_readable:
            return self
        libdir = os.path.join(directory, "lib")
        os.makedirs(libdir)
        os.chmod(libdir, 0o755)
        dst = os.path.join(libdir, SONAME)
        shutil.copy(self.path, dst)
        os.chmod(dst, 0o755)
        copy = Libslirp(libdir)
        copy.label = self.label
        self.close()
        return copy

    def close(self):
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def describe(self):
        return f"{self.label} ({self.path})"

    def env(self, base=None, preload=True):
        """The environment to run a client in: `base` (default: ours) with
        LD_LIBRARY_PATH leading to the library under test. For the system
        library, any LD_LIBRARY_PATH that holds another libslirp.so.0 is
        dropped, so the baseline is what an unchanged system loads."""
        env = dict(os.environ if base is None else base)
        old = env.get("LD_LIBRARY_PATH", "")
        if self.dir is None:
            kept = [d for d in old.split(":")
                    if d and not os.path.exists(os.path.join(d, SONAME))]
            if kept:
                env["LD_LIBRARY_PATH"] = ":".join(kept)
            else:
                env.pop("LD_LIBRARY_PATH", None)
        else:
            env["LD_LIBRARY_PATH"] = ":".join(
                [self.dir] + [d for d in old.split(":") if d])
            if preload:
                env.update(sanitizer_env(self.path, env))
        return env

    def client_wrapper(self, directory, program):
        """`program` itself when this library needs nothing preloaded;
        else a script in `directory` (which must be 0755) that execs it
        with the sanitizer environment. For a client started by another
        program (rootlesskit's slirp4netns): the ASan runtime then goes
        into the client alone, not into its parent and the parent's other
        helpers."""
        extra = sanitizer_env(self.path, {}) if self.dir else {}
        if not extra:
            return program
        path = os.path.join(directory, os.path.basename(program))
        with open(path, "w") as f:
            f.write("#!/bin/sh\n")
            for k, v in extra.items():
                f.write(f"export {k}='{v}'\n")
            f.write(f'exec {program} "$@"\n')
        os.chmod(path, 0o755)
        return path

    def identity(self):
        """(major, minor, inode) of the expected file, as /proc/PID/maps
        shows a mapping."""
        st = os.stat(self.path)
        return os.major(st.st_dev), os.minor(st.st_dev), st.st_ino

    def assert_loaded(self, pid):
        """Raises AssertionError unless process `pid` has exactly one
        libslirp mapped and it is this library's file. Returns the mapped
        path."""
        maps = libslirp_mappings(pid)
        if not maps:
            raise AssertionError(f"process {pid} ({_comm(pid)}) maps no "
                                 f"libslirp; wanted {self.describe()}")
        files = {(dev, ino): path for path, dev, ino in maps}
        if len(files) != 1:
            raise AssertionError(f"process {pid} maps several libslirp "
                                 f"files: {sorted(files.values())}")
        ((dev, ino), path), = files.items()
        want = self.identity()
        if (dev[0], dev[1], ino) != want:
            raise AssertionError(
                f"process {pid} ({_comm(pid)}) loaded {path} (dev "
                f"{dev[0]}:{dev[1]} inode {ino}), not {self.describe()} "
                f"(dev {want[0]}:{want[1]} inode {want[2]})")
        return path


def serve_in_h(procs, host, www, tmp, name, port, probe, aaaa=False):
    """H's servers for a client test: an HTTP server for `www` on `port`
    (both families) and dnsmasq on H4:53 answering `name` with H4 (and H6
    when `aaaa`). Waits until dnsmasq answers and `probe` (a file in www)
    is served. Returns the path of a resolv.conf naming dnsmasq, for the
    client's mount namespace: libslirp forwards the guest's DNS to the
    resolv.conf nameserver, and the machine's names one H cannot reach."""
    h = host.h
    procs.start(host.in_ns(h, sys.executable, "-m", "http.server", "--bind",
                           "::", "--directory", www, str(port)))
    addresses = [f"--address=/{name}/{H4}"]
    if aaaa:
        addresses.append(f"--address=/{name}/{H6}")
    procs.start(host.in_ns(
        h, "dnsmasq", "--keep-in-foreground", "--no-resolv", "--no-hosts",
        "--no-poll", "--bind-interfaces", f"--listen-address={H4}",
        "--port=53", *addresses, f"--pid-file={tmp}/dnsmasq.pid",
        "--user=root"))
    ok = iu.wait_for(lambda: iu.run(*host.in_ns(
        h, "dig", f"@{H4}", "+short", "+time=1", "+tries=1", name, "A"),
        check=False).stdout.strip() == H4, 10)
    assert ok, "dnsmasq does not answer in H"
    ok = iu.wait_for(lambda: iu.run(*host.in_ns(
        h, "curl", "-sf", "-o", "/dev/null", f"http://{H4}:{port}/{probe}"),
        check=False).returncode == 0, 10)
    assert ok, "HTTP server not serving in H"
    resolv = os.path.join(tmp, "resolv.conf")
    with open(resolv, "w") as f:
        f.write(f"nameserver {H4}\n")
    return resolv


def _needed(path):
    """The DT_NEEDED names of an ELF file."""
    out = subprocess.run(["readelf", "-d", path], capture_output=True,
                         text=True, check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def sanitizer_env(lib, env):
    """What a client needs to load `lib` when it was built with ASan
    (`bazel test --config=asan`): the ASan runtime must be the first
    library of the process, which only LD_PRELOAD can arrange in a program
    we did not build; and no leak check at exit, which is the client's
    (QEMU's, slirp4netns's) and which slirp4netns's seccomp filter would
    kill (LSan stops the world with ptrace). Errors in our library still
    abort the client, and the test with it. Nothing for a plain build."""
    asan = [n for n in _needed(lib) if n.startswith("libasan.so")]
    if not asan:
        return {}
    path = subprocess.run(["gcc", f"-print-file-name={asan[0]}"],
                          capture_output=True, text=True,
                          check=True).stdout.strip()
    if not os.path.isabs(path):
        raise RuntimeError(f"{lib} needs {asan[0]}, which gcc cannot find")
    preload = [p for p in env.get("LD_PRELOAD", "").split(":") if p]
    return {
        "LD_PRELOAD": ":".join([os.path.realpath(path)] + preload),
        "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
    }


def _world_readable(path):
    """Whether uid 65534 can read `path`: every directory on the way
    searchable by others, the file readable by others."""
    p = os.path.realpath(path)
    if not os.stat(p).st_mode & 0o004:
        return False
    d = os.path.dirname(p)
    while True:
        if not os.stat(d).st_mode & 0o001:
            return False
        if d == "/":
            return True
        d = os.path.dirname(d)


def libslirp_mappings(pid):
    """[(path, (major, minor), inode)] of every mapping of a file whose
    name starts with "libslirp" in /proc/PID/maps."""
    out = []
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) < 6:
                continue
            path = parts[5].strip()
            if not os.path.basename(path).startswith("libslirp"):
                continue
            major, minor = (int(x, 16) for x in parts[3].split(":"))
            out.append((path, (major, minor), int(parts[4])))
    return out


def _comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def _children(pid):
    found = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return found


def assert_nothing_left(procs, host, tmp):
    """A test class's last check, after its teardown: none of its
    processes (`procs`, a Processes) or namespaces (`host`, a Host) are
    left, nothing is mounted under `tmp`, and `tmp` itself is gone."""
    left = procs.leftovers()
    assert not left, f"processes left: {left}"
    left = host.leftover_namespaces()
    assert not left, f"namespaces left: {left}"
    with open("/proc/self/mountinfo") as f:
        mounts = [l for l in f if tmp in l]
    assert not mounts, f"mounts left: {mounts}"
    assert not os.path.exists(tmp), f"{tmp} is left"


def descendants(pid):
    """`pid` and every process below it, breadth first."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop(0)
        out.append(p)
        todo += _children(p)
    return out


def _serving(pid):
    """Whether a process is past a wrapper's exec and is not a feature
    probe (rootlesskit runs `slirp4netns --help` before the real one)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return False
    return (b"--help" not in argv and b"-h" not in argv and
            os.path.basename(exe) not in ("sh", "dash", "bash"))


def find_process(root, comm, timeout=10):
    """The pid of the first process named `comm` at or below `root` (which
    may exec into it) that serves (not a `--help` probe, not a wrapper
    script before its exec), waiting up to `timeout` seconds; None if none
    appears."""
    deadline = time.monotonic() + timeout
    while True:
        for p in descendants(root):
            if _comm(p) == comm[:15] and _serving(p):
                return p
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)


class Processes:
    """Process trees a test starts, each in a session (and so a process
    group) of its own, so that stop() ends everything it forked too: the
    `ip netns exec`, `unshare` and `setpriv` wrappers exec, but the clients
    fork helpers."""

    def __init__(self):
        self.procs = []

    def start(self, cmd, **kw):
        kw.setdefault("stdin", subprocess.DEVNULL)
        kw.setdefault("stdout", subprocess.DEVNULL)
        kw.setdefault("stderr", subprocess.DEVNULL)
        p = subprocess.Popen(cmd, start_new_session=True, **kw)
        self.procs.append(p)
        return p

    def stop(self, p, sig=signal.SIGKILL, timeout=10):
        """Signals p's process group (only what p started) and reaps p."""
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        # What p forked and left in its group (its own exit does not end
        # them).
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def stop_all(self):
        for p in reversed(self.procs):
            self.stop(p)

    def leftovers(self):
        """Processes still alive in any of our process groups."""
        groups = {p.pid for p in self.procs}
        alive = []
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            # fields[0] is the state, [2] the process group.
            if int(fields[2]) in groups and fields[0] != "Z":
                alive.append(f"{d} {_comm(int(d))}")
        return alive


class Host(BackendTopology):
    """The "host" the clients run in: H (lo and a veth whose peer lies
    alone in the sink namespace S, addresses H4/H6 on it, no default
    route) from BackendTopology. ICMP echo sockets are open to every group
    in H, as libslirp needs them for the guest's pings."""

    def __init__(self, prefix):
        super().__init__()
        tag = f"{prefix}-{os.getpid()}"
        self.h, self.s = f"{tag}-h", f"{tag}-s"

    def setup(self):
        self.setup_host()
        iu.run("ip", "netns", "exec", self.s, "sysctl", "-qw",
               "net.ipv6.conf.all.disable_ipv6=1")
        iu.run("ip", "netns", "exec", self.h, "sysctl", "-qw",
               "net.ipv4.ping_group_range=0 2147483647")

    def snmp(self, ns=None):
        """{"Icmp.InEchos": n, ...} from /proc/net/snmp in `ns` (H)."""
        out = iu.run("ip", "netns", "exec", ns or self.h, "cat",
                     "/proc/net/snmp").stdout.splitlines()
        res = {}
        for names, values in zip(out[::2], out[1::2]):
            proto = names.split(":")[0]
            for k, v in zip(names.split()[1:], values.split()[1:]):
                res[f"{proto}.{k}"] = int(v)
        return res

    def leftover_namespaces(self):
        have = iu.run("ip", "netns", "list").stdout
        return [n for n in (self.h, self.s) if re.search(
            rf"^{re.escape(n)}\b", have, re.M)]


SUBID_FILES = ("/etc/subuid", "/etc/subgid")


def add_nobody_subids(saved, start=200000, count=65536):
    """Gives uid 65534 (nobody) a subordinate id range in /etc/subuid and
    /etc/subgid, as rootless tools need, unless the machine has one for it
    already. `saved` (a dict) gets each file's bytes before (None: it did
    not exist), file by file, so that restore_subids(saved) undoes what
    was done even when this stops half way."""
    for path in SUBID_FILES:
        try:
            with open(path, "rb") as f:
                saved[path] = f.read()
        except FileNotFoundError:
            saved[path] = None   # removed again after
        lines = (saved[path] or b"").decode().splitlines()
        if any(l.split(":")[0] in ("nobody", str(NOBODY_UID)) for l in lines):
            continue  # the machine has a range for nobody already
        with open(path, "ab") as f:
            if saved[path] and not saved[path].endswith(b"\n"):
                f.write(b"\n")
            f.write(f"nobody:{start}:{count}\n".encode())


def restore_subids(saved):
    """Puts back what add_nobody_subids changed, and empties `saved`."""
    for path, data in saved.items():
        if data is None:
            os.unlink(path)
            continue
        with open(path, "wb") as f:
            f.write(data)
    saved.clear()


def private_tun(directory):
    """A /dev/net/tun node (10:200) at mode 0666 in `directory`, to
    bind-mount over /dev/net/tun in a mount namespace of the unprivileged
    client's own: the machine's node is 0600, and widening it would touch
    every process here. Returns its path."""
    path = os.path.join(directory, "tun")
    os.mknod(path, 0o020666, os.makedev(10, 200))
    os.chmod(path, 0o666)
    return path


def in_mount_ns(binds, cmd):
    """A command line that runs `cmd` in a new mount namespace after the
    bind mounts `binds` ([(source, target)]): the mounts end with the
    namespace, when its last process exits."""
    script = " && ".join(f"mount --bind {src} {dst}" for src, dst in binds)
    return ["unshare", "-m", "--propagation", "private", "sh", "-c",
            f"{script} && exec \"$@\"", "sh", *cmd]


def api_request(path, request, timeout=10):
    """One slirp4netns API request (one JSON object per connection, the
    write side shut after it, as rootlesskit does); the decoded reply."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall(json.dumps(request).encode() + b"\n")
        s.shutdown(socket.SHUT_WR)
        data = b""
        while True:
            b = s.recv(4096)
            if not b:
                break
            data += b
    return json.loads(data)


def wait_readable_byte(fd, timeout):
    """Reads the ready byte slirp4netns writes to its ready-fd; b"" when
    the pipe closed (the process died) or nothing came in time."""
    r, _, _ = select.select([fd], [], [], timeout)
    if not r:
        return b""
    return os.read(fd, 16)


def bench_line(tool, lib, **figures):
    """One parseable line of figures for docs/BENCHMARKS.md:
    "SLIRP_BENCH tool=qemu libslirp=debian key=value ..."."""
    parts = [f"tool={tool}", f"libslirp={lib.label}"]
    for k, v in figures.items():
        parts.append(f"{k}={'-' if v is None else (f'{v:.2f}' if isinstance(v, float) else v)}")
    return "SLIRP_BENCH " + " ".join(parts)


def curl(prefix, url, timeout, *extra, progress=None):
    """Downloads `url` with curl run under the command prefix `prefix`
    (a namespace), hashing the body as it arrives; returns an
    iu.TransferResult. `extra` goes to curl; `progress`, a dict, gets
    "received" updated as bytes arrive (for a transfer watched from
    another thread)."""
    r = iu.TransferResult()
    p = subprocess.Popen([*prefix, "curl", "-sS", "-g", "-m", str(timeout),
                          *extra, url], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    t0 = time.monotonic()
    while True:
        b = p.stdout.read1(1 << 20)
        if not b:
            break
        r.received_sha.update(b)
        r.received += len(b)
        if progress is not None:
            progress["received"] = r.received
    r.returncode = p.wait()
    r.seconds = time.monotonic() - t0
    r.stderr = p.stderr.read().decode(errors="replace")
    p.stdout.close()
    p.stderr.close()
    return r


ENV_SLIRP4NETNS = "NETSTACK_SLIRP4NETNS"
DEBIAN_SLIRP4NETNS = "/usr/bin/slirp4netns"


class Slirp4netns:
    """The slirp4netns program under test (issue #32), from
    NETSTACK_SLIRP4NETNS: unset or empty, Debian's /usr/bin/slirp4netns;
    else netstackd (a runfile path or an absolute one), copied into a
    0755 temporary directory under /tmp (uid 65534 cannot read Bazel's
    runfiles under /root) beside a symlink named slirp4netns, the name
    netstackd answers to. `path` is what callers run (the symlink);
    `exe` is the file /proc/PID/exe of a process of it names."""

    def __init__(self):
        setting = os.environ.get(ENV_SLIRP4NETNS, "")
        self._tmp = None
        if not setting:
            self.path = self.exe = DEBIAN_SLIRP4NETNS
            self.netstackd = None
            self.label = "debian"
            return
        src = _resolve(setting)
        if not os.path.isfile(src):
            raise RuntimeError(f"{ENV_SLIRP4NETNS}={setting}: {src} is not "
                               "a file")
        self._tmp = tempfile.mkdtemp(prefix="nst-s4nn-", dir="/tmp")
        os.chmod(self._tmp, 0o755)
        self.exe = self.netstackd = os.path.join(self._tmp, "netstackd")
        shutil.copy(src, self.exe)
        os.chmod(self.exe, 0o755)
        self.path = os.path.join(self._tmp, "slirp4netns")
        os.symlink("netstackd", self.path)
        self.label = "netstackd"

    @property
    def is_debian(self):
        return self.netstackd is None

    def assert_is(self, pid):
        """Raises AssertionError unless process `pid` runs this program's
        file (/proc/PID/exe; device and inode compared)."""
        exe = os.readlink(f"/proc/{pid}/exe")
        a, b = os.stat(f"/proc/{pid}/exe"), os.stat(self.exe)
        if (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino):
            raise AssertionError(f"process {pid} runs {exe}, not {self.exe}")
        return exe

    def close(self):
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
