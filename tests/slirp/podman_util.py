"""What tests/slirp's Podman test needs around Podman 4.3.1 rootless
(issue #32 must-show 2): a user of its own, Podman's configuration for
that user, a busybox image built here, and a way to run `podman` as that
user inside the "host" namespace H.

  - TestUser: the unprivileged user USER_NAME with subordinate ids, made
    by useradd and removed by userdel. A user left by a run that died is
    cleaned up (its processes killed, the user removed) before a new one
    is made.
  - write_config: containers.conf (runc, cgroupfs, the network command
    under test) and storage.conf (vfs, everything in the test's
    directory) in the user's ~/.config/containers.
  - write_rootfs: a tarball of Debian's busybox-static (tests/vm's cache,
    vm_image.fetch) with a link per applet, for `podman import`: no
    registry is involved.
  - podman_command: the command line that runs podman as the user in H,
    entered with `nsenter --net` (`ip netns exec` remounts /sys, and runc
    then finds no cgroups), in a private mount namespace where H's
    resolv.conf and a 0666 /dev/net/tun are bind-mounted (DESIGN.md).
"""
import io
import os
import pwd
import re
import signal
import subprocess
import tarfile
import time

from tests.interop import interop_util as iu
from tests.slirp import slirp_util as su

USER_NAME = "nstpodman"
# setpriv leaves the environment alone: the user's runs get only this one.
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

CONTAINERS_CONF = """[containers]
log_driver = "k8s-file"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
network_cmd_path = "{network_cmd}"
"""

STORAGE_CONF = """[storage]
driver = "vfs"
runroot = "{runroot}"
graphroot = "{graphroot}"
"""


def proc_status(pid):
    """(state, real uid) of a process, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            status = f.read()
    except OSError:
        return None
    state = re.search(r"^State:\s+(\S)", status, re.M).group(1)
    uid = int(re.search(r"^Uid:\s+(\d+)", status, re.M).group(1))
    return state, uid


def comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def cmdline(pid):
    """argv of a process as a list; [] once it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace")
                    for a in f.read().split(b"\0")[:-1]]
    except OSError:
        return []


class TestUser:
    """USER_NAME, with HOME at `home`, and its subordinate id ranges."""

    def __init__(self, home):
        self.name = USER_NAME
        self.home = home
        self.uid = self.gid = None
        self.subuid = self.subgid = None   # (start, count)

    @staticmethod
    def _subids(path, name):
        try:
            with open(path) as f:
                for line in f:
                    parts = line.strip().split(":")
                    if len(parts) == 3 and parts[0] == name:
                        return int(parts[1]), int(parts[2])
        except FileNotFoundError:
            pass
        return None

    def create(self):
        try:
            pwd.getpwnam(self.name)
            stale = True
        except KeyError:
            stale = False
        if stale:
            # Left by a run that died: its processes and the user go.
            self.uid = pwd.getpwnam(self.name).pw_uid
            self.subuid = self._subids("/etc/subuid", self.name)
            self.kill_processes()
            self.wait_gone(30)
            iu.run("userdel", "-f", self.name)
        # -N: the default group (users), no group of its own to remove.
        # useradd gives a new user subordinate ids (login.defs'
        # SUB_UID_COUNT); usermod adds them where it does not.
        iu.run("useradd", "-M", "-N", "-s", "/usr/sbin/nologin", "-d",
               self.home, "-c", "netstack podman test", self.name)
        pw = pwd.getpwnam(self.name)
        self.uid, self.gid = pw.pw_uid, pw.pw_gid
        for path, flag in (("/etc/subuid", "--add-subuids"),
                           ("/etc/subgid", "--add-subgids")):
            if not self._subids(path, self.name):
                iu.run("usermod", flag, "300000-365535", self.name)
        self.subuid = self._subids("/etc/subuid", self.name)
        self.subgid = self._subids("/etc/subgid", self.name)
        assert self.subuid and self.subgid, "no subordinate ids for the user"

    def owns(self, uid):
        """Whether `uid` is the user's or one of its subordinate uids (a
        container's non-root processes run as those)."""
        if uid == self.uid:
            return True
        if self.subuid:
            start, count = self.subuid
            return start <= uid < start + count
        return False

    def processes(self):
        """[(pid, state, comm)] of every process that runs as the user or
        one of its subordinate uids, zombies included."""
        found = []
        if self.uid is None:
            return found
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            st = proc_status(int(d))
            if st and self.owns(st[1]):
                found.append((int(d), st[0], comm(int(d))))
        return found

    def live_processes(self):
        return [p for p in self.processes() if p[1] != "Z"]

    def kill_processes(self):
        """SIGKILL to each of the user's processes, by pid (podman's pause
        process, conmon, the network command, rootlessport, containers)."""
        for pid, state, _ in self.processes():
            if state != "Z":
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def wait_gone(self, timeout):
        """Waits until the user has no process left, zombies included
        (this machine's init reaps orphans only now and then). Returns
        what is still there."""
        deadline = time.monotonic() + timeout
        while True:
            left = self.processes()
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.2)

    def remove(self):
        if self.uid is None:
            return
        # -f: zombies the machine's init has not reaped yet still carry
        # the uid; userdel would refuse for them.
        iu.run("userdel", "-f", self.name, check=False)

    def leftovers(self):
        """What of the user is still on the machine: its passwd entry and
        its subordinate id lines."""
        left = []
        try:
            pwd.getpwnam(self.name)
            left.append(f"passwd entry {self.name}")
        except KeyError:
            pass
        for path in ("/etc/subuid", "/etc/subgid"):
            if self._subids(path, self.name):
                left.append(f"{path} line for {self.name}")
        return left


def write_config(user, home, run_dir, network_cmd):
    """~/.config/containers/{containers,storage}.conf for `user` (HOME
    `home`, XDG_RUNTIME_DIR `run_dir`), owned by it."""
    conf = os.path.join(home, ".config", "containers")
    os.makedirs(conf)
    with open(os.path.join(conf, "containers.conf"), "w") as f:
        f.write(CONTAINERS_CONF.format(network_cmd=network_cmd))
    with open(os.path.join(conf, "storage.conf"), "w") as f:
        f.write(STORAGE_CONF.format(
            runroot=os.path.join(run_dir, "storage"),
            graphroot=os.path.join(home, "storage")))
    for d, _, files in os.walk(home):
        os.chown(d, user.uid, user.gid)
        for name in files:
            os.chown(os.path.join(d, name), user.uid, user.gid)


def write_rootfs(path, busybox, files):
    """A tarball at `path` (readable by all) of a root file system:
    `busybox` as /bin/busybox with a symlink per applet, /etc/passwd and
    /etc/group for root, and `files` ({path in the image: bytes}). Owned
    by 0:0 in the archive."""
    applets = subprocess.run([busybox, "--list"], capture_output=True,
                             text=True, check=True).stdout.split()

    def add(tar, name, data=None, mode=0o644, kind=tarfile.REGTYPE,
            link=""):
        info = tarfile.TarInfo(name)
        info.type, info.mode, info.linkname = kind, mode, link
        info.mtime = int(time.time())
        if data is not None:
            info.size = len(data)
        tar.addfile(info, io.BytesIO(data) if data is not None else None)

    with open(busybox, "rb") as f:
        bb = f.read()
    with tarfile.open(path, "w") as tar:
        for d in ("bin", "etc", "dev", "proc", "sys", "root", "www"):
            add(tar, d, mode=0o755, kind=tarfile.DIRTYPE)
        add(tar, "tmp", mode=0o1777, kind=tarfile.DIRTYPE)
        add(tar, "bin/busybox", bb, mode=0o755)
        for a in applets:
            if a != "busybox":
                add(tar, f"bin/{a}", kind=tarfile.SYMTYPE, link="busybox",
                    mode=0o777)
        add(tar, "etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n")
        add(tar, "etc/group", b"root:x:0:\n")
        for name, data in files.items():
            add(tar, name, data)
    os.chmod(path, 0o644)


def podman_command(netns, binds, user, *args):
    """The command line that runs `podman ARGS` as `user` in the network
    namespace /var/run/netns/`netns`, in a private mount namespace with
    the bind mounts `binds` ([(source, target)]). The environment is the
    caller's to give (podman_env)."""
    script = " && ".join(f"mount --bind {s} {t}" for s, t in binds)
    return ["nsenter", f"--net=/var/run/netns/{netns}", "unshare", "-m",
            "--propagation", "private", "sh", "-c",
            f"{script} && exec \"$@\"", "sh",
            "setpriv", f"--reuid={user.uid}", f"--regid={user.gid}",
            "--clear-groups", "podman", *args]


def podman_env(user, home, run_dir, tmp_dir, extra=None):
    """The user's whole environment for podman: HOME and XDG_RUNTIME_DIR
    in the test's directory, TMPDIR there too (podman import stages the
    tarball there, not in /var/tmp)."""
    env = {"PATH": PATH, "HOME": home, "XDG_RUNTIME_DIR": run_dir,
           "XDG_CONFIG_HOME": os.path.join(home, ".config"),
           "TMPDIR": tmp_dir, "USER": user.name, "LOGNAME": user.name,
           "LANG": "C.UTF-8"}
    env.update(extra or {})
    return env


def run(cmd, env, cwd, timeout=120):
    """Runs `cmd` in `cwd` (a directory the user may enter: Bazel's
    runfiles, the test's own cwd, lie under /root), in a session of its
    own; on a timeout, its whole process group is killed. Returns (returncode, stdout, stderr, seconds); the
    returncode is None after a timeout."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        found = hung_logs(p.pid)
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = p.communicate()
        err += f"\n[timed out after {timeout} s]{found}"
        rc = None
    return rc, out, err, time.monotonic() - t0


def hung_logs(pid):
    """What a hung podman shows: each process below `pid` with its command
    line, and the unlinked files they hold open (Podman gives the network
    command an unlinked log file and quotes it only when the command
    fails, not when it never says it is ready)."""
    parts, seen = [], set()
    for p in su.descendants(pid):
        parts.append(f"\n  {p} {' '.join(cmdline(p))[:300]}")
        try:
            fds = os.listdir(f"/proc/{p}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{p}/fd/{fd}")
                if not target.endswith(" (deleted)") or target in seen:
                    continue
                seen.add(target)
                with open(f"/proc/{p}/fd/{fd}", "rb") as f:
                    data = f.read(8192).decode(errors="replace")
            except OSError:
                continue
            if data:
                parts.append(f"\n--- {target} (open in {p}):\n{data}")
    return "".join(parts)


def readable_by_others(path):
    """Whether a user with no rights of owner or group can read `path`:
    every directory on the way searchable by others, the file readable."""
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


def ldd_unreadable(path, readable=readable_by_others):
    """The libraries `path` loads (ldd) that `readable` (a predicate on a
    path) says no to, e.g. an ASan runtime the user cannot read."""
    out = subprocess.run(["ldd", path], capture_output=True, text=True,
                         check=False).stdout
    bad = []
    for line in out.splitlines():
        m = re.search(r"=>\s+(/\S+)", line) or re.match(r"\s*(/\S+)", line)
        if m and not readable(m.group(1)):
            bad.append(m.group(1))
    return bad


def needs_asan(path):
    """Whether `path` was built with AddressSanitizer (it loads libasan:
    `bazel test --config=asan`)."""
    out = subprocess.run(["ldd", path], capture_output=True, text=True,
                         check=False).stdout
    return "libasan.so" in out
