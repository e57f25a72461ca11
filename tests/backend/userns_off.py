"""Runs argv[1:] as uid 65534 where user namespaces are off: inside a new
user namespace (uids and gids 0-65535 mapped to themselves, so nothing
changes on disk) whose user.max_user_namespaces is 0. The limit is per
user namespace, and the owner of one may lower it for its own children,
so this turns user namespaces off for argv[1:] alone, without touching
the machine's setting. Needs root. Exits with argv[1:]'s status."""
import ctypes
import os
import sys

CLONE_NEWUSER = 0x10000000

libc = ctypes.CDLL(None, use_errno=True)
to_child_r, to_child_w = os.pipe()
to_parent_r, to_parent_w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(to_child_w)
    os.close(to_parent_r)
    if libc.unshare(CLONE_NEWUSER) != 0:
        os.write(2, f"unshare: {os.strerror(ctypes.get_errno())}\n".encode())
        os._exit(125)
    os.write(to_parent_w, b"x")
    if os.read(to_child_r, 1) != b"x":
        os._exit(125)
    with open("/proc/sys/user/max_user_namespaces", "w") as f:
        f.write("0\n")
    os.setgroups([])
    os.setresgid(65534, 65534, 65534)
    os.setresuid(65534, 65534, 65534)
    os.execvp(sys.argv[1], sys.argv[1:])
os.close(to_child_r)
os.close(to_parent_w)
ok = os.read(to_parent_r, 1) == b"x"
if ok:
    for name in ("uid_map", "gid_map"):
        with open(f"/proc/{pid}/{name}", "w") as f:
            f.write("0 0 65536\n")
    os.write(to_child_w, b"x")
os.close(to_child_w)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status) if ok else 125)
