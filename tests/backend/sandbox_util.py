"""What the sandbox tests share (netstackd -- CMD, --netns-pid, as root and
as uid 65534): the unprivileged user, an interpreter it may run, a copy of
netstackd it may run, /dev/net/tun opened up for it, and the network
namespaces a test's processes hold."""
import os
import shutil

from tests.interop import interop_util as iu

# netstackd (or a client) as uid 65534.
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
# An interpreter every user may run: this test's own may live under /root,
# which uid 65534 (and a root netstackd's CMD, nobody by default) cannot
# enter.
SYSTEM_PYTHON = "/usr/bin/python3"


def netstackd_copy(tmp):
    """A copy of netstackd that uid 65534 may run (the runfiles are under
    /root), in `tmp` (which must be 0755)."""
    path = os.path.join(tmp, "netstackd")
    shutil.copy(iu.NETSTACKD, path)
    os.chmod(path, 0o755)
    return path


class TunMode:
    """/dev/net/tun at `mode` for a block (0666 for uid 65534's runs: it
    is 0600 on these machines), restored after, whatever happens."""

    def __init__(self, mode=0o666):
        self.mode = mode
        self.before = None

    def __enter__(self):
        self.before = os.stat("/dev/net/tun").st_mode & 0o7777
        os.chmod("/dev/net/tun", self.mode)
        return self

    def __exit__(self, *exc):
        os.chmod("/dev/net/tun", self.before)


def namespaces_of(tags):
    """The network namespaces that hold a process of this test's: one whose
    command line has one of `tags` (its netstackd copy, its CMD markers).
    Other tests on the machine make namespaces of their own at the same
    time; a machine-wide count would see theirs."""
    found = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().decode(errors="replace")
            ns = os.readlink(f"/proc/{pid}/ns/net")
        except OSError:
            continue  # gone meanwhile, or a kernel thread
        if any(t in cmdline for t in tags):
            found.add(ns)
    return found
