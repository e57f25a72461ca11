#!/usr/bin/env python3
"""The VM guest's kernel and initramfs (issue #14), built from Debian
packages only.

  - The kernel is Debian's linux-image-cloud-amd64 (6.1): its vmlinuz, and
    the modules virtio-net needs (MODULES, in load order), which the cloud
    kernel builds as modules.
  - The userland is busybox-static: one binary, its applets as symlinks.

Both .debs are fetched with `apt-get download` and unpacked with
`dpkg-deb -x`: nothing is installed (busybox-static conflicts with the
busybox package other tests use; a kernel package would run its
postinst). What the guest needs of them is kept in CACHE
(/var/cache/netstack-vm/guest, or $NETSTACK_VM_CACHE/guest), so only the
first run on a machine needs the Debian archive; delete the directory to
refetch. The initramfs itself (newc cpio, gzip; written here, so no cpio
package is needed) is rebuilt per run in a temporary directory: it holds
the guest's /init, which the caller passes in.

As a script: `vm_image.py DIR INIT [GUEST_PATH=FILE]...` fetches what is
missing and writes DIR/vmlinuz and DIR/initrd.gz with the file INIT as
/init and each FILE at GUEST_PATH (executable), e.g.
`/etc/udhcpc.sh=tests/vm/udhcpc.sh`. Needs root for the fetch (apt),
nothing else.
"""
import gzip
import os
import shutil
import subprocess
import sys
import tempfile

CACHE = os.path.join(os.environ.get("NETSTACK_VM_CACHE",
                                    "/var/cache/netstack-vm"), "guest")
KERNEL_META = "linux-image-cloud-amd64"
BUSYBOX = "busybox-static"
# virtio_net and what it depends on, in the order insmod must load them.
MODULES = ["virtio_ring", "virtio", "virtio_pci_modern_dev",
           "virtio_pci_legacy_dev", "virtio_pci", "failover", "net_failover",
           "virtio_net"]


def _run(*cmd, cwd=None):
    return subprocess.run(list(cmd), cwd=cwd, check=True, capture_output=True,
                          text=True, timeout=600)


def _kernel_package():
    """The versioned image the metapackage points at, e.g.
    linux-image-6.1.0-57-cloud-amd64."""
    out = _run("apt-cache", "depends", KERNEL_META).stdout
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("Depends: linux-image-"):
            return line.split()[1]
    raise RuntimeError(f"{KERNEL_META} depends on no linux-image: {out}")


def _download(tmp, packages):
    try:
        _run("apt-get", "download", *packages, cwd=tmp)
    except subprocess.CalledProcessError:
        # A fresh machine may have no package lists yet.
        _run("apt-get", "update", "-qq")
        _run("apt-get", "download", *packages, cwd=tmp)


def fetch(log=print):
    """CACHE with vmlinuz, busybox, modules/*.ko and VERSION; fetched and
    unpacked unless it is there already. Returns CACHE."""
    if os.path.exists(os.path.join(CACHE, "VERSION")):
        return CACHE
    os.makedirs(os.path.dirname(CACHE), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="fetch-", dir=os.path.dirname(CACHE))
    try:
        try:
            kernel = _kernel_package()
        except subprocess.CalledProcessError:
            _run("apt-get", "update", "-qq")
            kernel = _kernel_package()
        log(f"vm_image: fetching {kernel} and {BUSYBOX} into {CACHE}")
        # apt's _apt user must be able to write where it downloads.
        os.chmod(tmp, 0o755)
        _download(tmp, [kernel, BUSYBOX])
        debs = sorted(f for f in os.listdir(tmp) if f.endswith(".deb"))
        root = os.path.join(tmp, "root")
        for deb in debs:
            _run("dpkg-deb", "-x", os.path.join(tmp, deb), root)
        staged = os.path.join(tmp, "guest")
        os.makedirs(os.path.join(staged, "modules"))
        boot = os.path.join(root, "boot")
        (vmlinuz,) = [f for f in os.listdir(boot) if f.startswith("vmlinuz-")]
        shutil.copy(os.path.join(boot, vmlinuz),
                    os.path.join(staged, "vmlinuz"))
        shutil.copy(os.path.join(root, "bin", "busybox"),
                    os.path.join(staged, "busybox"))
        found = {}
        for d, _, files in os.walk(os.path.join(root, "lib", "modules")):
            for f in files:
                if f.endswith(".ko") and f[:-3] in MODULES:
                    found[f[:-3]] = os.path.join(d, f)
        missing = [m for m in MODULES if m not in found]
        if missing:
            raise RuntimeError(f"{kernel} has no module {missing}")
        for m, path in found.items():
            shutil.copy(path, os.path.join(staged, "modules", f"{m}.ko"))
        with open(os.path.join(staged, "VERSION"), "w") as f:
            f.write("\n".join([vmlinuz, *debs]) + "\n")
        try:
            os.rename(staged, CACHE)
        except OSError:
            if not os.path.exists(os.path.join(CACHE, "VERSION")):
                raise  # not a concurrent fetch that won the race
        return CACHE
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class Cpio:
    """A newc ("070701") archive, the format the kernel unpacks as an
    initramfs (Documentation/driver-api/early-userspace/buffer-format)."""

    def __init__(self):
        self.out = bytearray()
        self.ino = 1

    def _entry(self, name, mode, data=b"", rdev=(0, 0)):
        fields = [self.ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdev[0],
                  rdev[1], len(name) + 1, 0]
        self.ino += 1
        self.out += b"070701" + b"".join(b"%08x" % v for v in fields)
        self.out += name.encode() + b"\0"
        self.out += b"\0" * (-len(self.out) % 4)
        self.out += data
        self.out += b"\0" * (-len(self.out) % 4)

    def dir(self, name):
        self._entry(name, 0o040755)

    def file(self, name, data, mode=0o644):
        self._entry(name, 0o100000 | mode, data)

    def symlink(self, name, target):
        self._entry(name, 0o120777, target.encode())

    def chardev(self, name, major, minor):
        self._entry(name, 0o020600, rdev=(major, minor))

    def finish(self):
        self._entry("TRAILER!!!", 0)
        return bytes(self.out)


def host_binary(path):
    """{guest path: bytes} for the host's dynamically linked `path` and
    every library ldd names (at the same paths, the loader included), to
    pass to build_initramfs(binaries=): the guest runs Debian's own build
    (ethtool, iperf3) with the host's libc."""
    out = {path: None}
    for line in _run("ldd", path).stdout.splitlines():
        parts = line.split()
        if "=>" in parts:
            lib = parts[parts.index("=>") + 1]
            if lib.startswith("/"):
                out[lib] = None
        elif parts and parts[0].startswith("/"):
            out[parts[0]] = None   # the loader, e.g. /lib64/ld-linux-x86-64.so.2
    for p in out:
        with open(p, "rb") as f:
            out[p] = f.read()
    return out


def build_initramfs(path, init, files=None, binaries=None):
    """Writes a gzip'd initramfs to `path`: busybox (with a symlink per
    applet), the modules under /lib/modules, /dev/console (the kernel
    opens it for /init's stdio before anything is mounted), /init (the
    text `init`), `files` ({guest path: text}, executable) and `binaries`
    ({guest path: bytes}, executable; their directories are made, see
    host_binary)."""
    cache = fetch()
    with open(os.path.join(cache, "busybox"), "rb") as f:
        busybox = f.read()
    applets = _run(os.path.join(cache, "busybox"), "--list").stdout.split()
    a = Cpio()
    for d in ("bin", "dev", "etc", "lib", "lib/modules", "proc", "sys", "tmp",
              "www", "www/cgi-bin", "root"):
        a.dir(d)
    a.chardev("dev/console", 5, 1)
    a.file("bin/busybox", busybox, 0o755)
    for applet in applets:
        if applet != "busybox":
            a.symlink(f"bin/{applet}", "busybox")
    for m in MODULES:
        with open(os.path.join(cache, "modules", f"{m}.ko"), "rb") as f:
            a.file(f"lib/modules/{m}.ko", f.read())
    a.file("init", init.encode(), 0o755)
    for name, text in (files or {}).items():
        a.file(name.lstrip("/"), text.encode(), 0o755)
    made = {"bin", "dev", "etc", "lib", "lib/modules", "proc", "sys", "tmp",
            "www", "root"}
    for name, data in (binaries or {}).items():
        parts = name.strip("/").split("/")
        for i in range(1, len(parts)):
            d = "/".join(parts[:i])
            if d not in made:
                a.dir(d)
                made.add(d)
        a.file(name.lstrip("/"), data, 0o755)
    with open(path, "wb") as f:
        f.write(gzip.compress(a.finish(), compresslevel=1))
    return path


def main(argv):
    if len(argv) < 3 or not all("=" in a for a in argv[3:]):
        print(__doc__, file=sys.stderr)
        return 2
    out, init = argv[1], argv[2]
    os.makedirs(out, exist_ok=True)
    cache = fetch(log=lambda s: print(s, file=sys.stderr))

    def read(path):
        with open(path) as f:
            return f.read()
    files = {guest: read(host) for guest, host in
             (a.split("=", 1) for a in argv[3:])}
    build_initramfs(os.path.join(out, "initrd.gz"), read(init), files)
    shutil.copy(os.path.join(cache, "vmlinuz"), os.path.join(out, "vmlinuz"))
    print(os.path.join(out, "vmlinuz"), os.path.join(out, "initrd.gz"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
