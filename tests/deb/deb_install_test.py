"""netstack's .deb as a user gets it (issue #36, part 3): tools/dev/
build-deb makes the package from this test's runfiles (the binaries and
libraries Bazel built: a bazel inside a bazel test would wait for the
outer one's lock), lintian finds no errors in it, and on a fresh Debian 12
it installs with apt, which pulls its Depends from the archive, and runs
`netstackd -- CMD` as an unprivileged user.

The fresh Debian 12: a debootstrap minbase from this machine's Debian
mirror, made once and kept as a tarball in /var/cache/netstack-deb/, and
extracted into a temporary directory for each run. tests/deb/in_root.sh
enters it with pivot_root in a private mount namespace and a PID
namespace of its own (so its processes and mounts end with it):

  1. in this machine's network namespace, which reaches the archive:
     `apt-get update` and `apt-get install --download-only ./netstack.deb
     curl` (the downloads are kept in /var/cache/netstack-deb/archives);
  2. in a network namespace of this test's, with only lo and no route
     (asserted): `apt-get install ./netstack.deb curl` from those
     downloads, a user made with useradd, and as that user `netstackd --
     true`, `netstackd -- cat /etc/resolv.conf` and `netstackd
     --host-loopback -- curl http://10.0.2.2:PORT/...`, which reaches an
     HTTP server of this test's on the namespace's 127.0.0.1.

Needs root, debootstrap (once, for the image), unshare, pivot_root, ip,
lintian, and the network to deb.debian.org for the downloads.
"""
import glob
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

from tests.interop import interop_util as iu

BUILD_DEB = iu.runfile("tools/dev/build-deb")
IN_ROOT = iu.runfile("tests/deb/in_root.sh")
CACHE = os.environ.get("NST_DEB_CACHE", "/var/cache/netstack-deb")
IMAGE = os.path.join(CACHE, "bookworm-minbase.tar")
ARCHIVES = os.path.join(CACHE, "archives")
# The source tree (build-deb reads docs and man pages there), through the
# runfiles' symlink.
SOURCE = os.path.dirname(os.path.realpath(iu.runfile("README.md")))
HOST_SOURCES = "/etc/apt/sources.list.d/debian.sources"
HTTP_PORT = 8087  # on the test namespace's 127.0.0.1
USER = "nstuser"


def log(msg):
    print(f"deb_install_test: {msg}", flush=True)


def debian_mirror():
    """This machine's configured Debian archive (the first URI of its
    Debian sources), as the CI machine may reach only that."""
    for path in (HOST_SOURCES, "/etc/apt/sources.list"):
        try:
            with open(path) as f:
                text = f.read()
        except FileNotFoundError:
            continue
        m = re.search(r"^(?:URIs:|deb)\s+(\S+/debian)\s", text, re.M)
        if m:
            return m.group(1)
    return "http://deb.debian.org/debian"


def ensure_image():
    """The Debian 12 minbase tarball, made with debootstrap when absent."""
    if os.path.exists(IMAGE):
        return IMAGE
    if not iu.have("debootstrap"):
        raise unittest.SkipTest(
            f"no {IMAGE} and no debootstrap (tools/dev/install-deps)")
    os.makedirs(CACHE, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="bootstrap-", dir=CACHE)
    try:
        root = os.path.join(tmp, "root")
        start = time.monotonic()
        mirror = debian_mirror()
        log(f"making {IMAGE} with debootstrap from {mirror}")
        r = subprocess.run(["debootstrap", "--variant=minbase", "bookworm",
                            root, mirror], capture_output=True, text=True,
                           timeout=1800)
        if r.returncode != 0:
            raise AssertionError(f"debootstrap failed:\n{r.stdout[-3000:]}"
                                 f"\n{r.stderr[-3000:]}")
        # The suites a fresh install has (bookworm-updates and -security
        # too), from this machine's sources when it names them.
        if os.path.exists(HOST_SOURCES):
            os.unlink(os.path.join(root, "etc/apt/sources.list"))
            shutil.copy(HOST_SOURCES,
                        os.path.join(root, "etc/apt/sources.list.d"))
        for d in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for name in os.listdir(os.path.join(root, d)):
                p = os.path.join(root, d, name)
                if os.path.isfile(p):
                    os.unlink(p)
        iu.run("tar", "--numeric-owner", "-C", root, "-cf",
               IMAGE + ".tmp", ".", timeout=600)
        os.rename(IMAGE + ".tmp", IMAGE)
        log(f"image made in {time.monotonic() - start:.0f} s")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return IMAGE


class DebInstallTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root")
        for tool in ("unshare", "pivot_root", "ip", "tar", "dpkg-deb",
                     "dpkg-shlibdeps", "lintian", "python3"):
            if not iu.have(tool):
                raise unittest.SkipTest(f"needs {tool}")
        cls.tmp = tempfile.mkdtemp(prefix="nst-deb-", dir="/var/tmp")
        cls.netns = None
        cls.server = None
        try:
            start = time.monotonic()
            r = iu.run(BUILD_DEB, "--prebuilt", iu.runfile(""),
                       "--no-lintian", os.path.join(cls.tmp, "out"),
                       check=False, timeout=300)
            if r.returncode != 0:
                raise AssertionError(f"build-deb failed:\n{r.stderr}")
            cls.deb = r.stdout.strip().splitlines()[-1]
            log(f"{cls.deb} built in {time.monotonic() - start:.1f} s")
        except BaseException:
            cls.cleanup()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.cleanup()

    @classmethod
    def cleanup(cls):
        if cls.server is not None:
            if cls.server.poll() is None:
                cls.server.kill()
            cls.server.wait()
            cls.server = None
        if cls.netns is not None:
            iu.run("ip", "netns", "del", cls.netns, check=False)
            cls.netns = None
        # Nothing is mounted under tmp in this mount namespace: in_root.sh
        # mounts only in its own.
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def field(self, name):
        return iu.run("dpkg-deb", "--field", self.deb, name).stdout.strip()

    def test_lintian_finds_no_errors(self):
        start = time.monotonic()
        r = iu.run("lintian", "--fail-on", "error", self.deb,
                   check=False, timeout=600)
        log(f"lintian ({time.monotonic() - start:.1f} s), "
            f"exit {r.returncode}:\n{r.stdout}{r.stderr}")
        errors = [l for l in r.stdout.splitlines() if l.startswith("E:")]
        self.assertEqual(errors, [])
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_control_fields(self):
        self.assertEqual(self.field("Package"), "netstack")
        self.assertEqual(self.field("Section"), "net")
        self.assertEqual(self.field("Architecture"), "amd64")
        self.assertRegex(self.field("Version"), r"^0\.\d{8}\.\d{6}\+g[0-9a-f]{12}")
        depends = [d.strip().split()[0]
                   for d in self.field("Depends").split(",")]
        # What the binaries link dynamically, from dpkg-shlibdeps.
        for pkg in ("libc6", "libstdc++6", "libabsl20220623",
                    "libpcap0.8", "libseccomp2", "libmnl0"):
            self.assertIn(pkg, depends)

    def test_files(self):
        listing = iu.run("dpkg-deb", "--contents", self.deb).stdout
        paths = {}
        for line in listing.splitlines():
            cols = line.split()
            path = cols[5].lstrip(".")
            paths[path] = (cols[0], cols[1], " ".join(cols[5:]))
        for f in ("/usr/bin/netstackd", "/usr/bin/tcp_benchmark",
                  "/usr/bin/splice_proxy", "/usr/bin/pcap_inspect"):
            self.assertEqual(paths[f][0], "-rwxr-xr-x", f)
            self.assertEqual(paths[f][1], "root/root", f)
        multi = "/usr/lib/x86_64-linux-gnu"
        for f in (f"{multi}/libnetstack.so.1",
                  f"{multi}/netstack/libslirp.so.0",
                  f"{multi}/pkgconfig/netstack.pc", "/usr/include/netstack.h",
                  "/usr/share/doc/netstack/copyright",
                  "/usr/share/doc/netstack/changelog.gz",
                  "/usr/share/doc/netstack/README.md.gz"):
            self.assertEqual(paths[f][0], "-rw-r--r--", f)
        self.assertIn("-> libnetstack.so.1", paths[f"{multi}/libnetstack.so"][2])
        self.assertIn("-> ../../../bin/netstackd",
                      paths["/usr/lib/netstack/bin/slirp4netns"][2])
        # Every man page of the source tree, gzipped in its section.
        pages = glob.glob(os.path.join(SOURCE, "docs/man/*.[1-8]"))
        self.assertNotEqual(pages, [], "no docs/man/*.[1-8]")
        for page in pages:
            name = os.path.basename(page)
            f = f"/usr/share/man/man{name[-1]}/{name}.gz"
            self.assertEqual(paths.get(f, ("none",))[0], "-rw-r--r--", f)
        # Debian's libslirp0 and slirp4netns stay the ones found by name.
        self.assertNotIn("/usr/bin/slirp4netns", paths)
        self.assertNotIn(f"{multi}/libslirp.so.0", paths)

    def in_root(self, root, script, netns=None, timeout=600):
        """Runs `sh -c script` as root of the tree at root (in_root.sh), in
        netns when given; returns (exit status, output)."""
        cmd = ["unshare", "--mount", "--propagation", "private", "--pid",
               "--fork", "--kill-child", IN_ROOT, root, "sh", "-c", script]
        if netns:
            cmd = ["nsenter", f"--net=/var/run/netns/{netns}"] + cmd
        env = dict(os.environ, NST_APT_ARCHIVES=ARCHIVES)
        r = subprocess.run(cmd, capture_output=True, text=True, env=env,
                           timeout=timeout)
        return r.returncode, r.stdout + r.stderr

    def test_install_on_fresh_debian(self):
        cls = type(self)
        image = ensure_image()
        os.makedirs(os.path.join(ARCHIVES, "partial"), exist_ok=True)
        root = os.path.join(self.tmp, "root")
        os.mkdir(root)
        start = time.monotonic()
        iu.run("tar", "--numeric-owner", "-C", root, "-xpf", image,
               timeout=600)
        pkg = "/root/" + os.path.basename(self.deb)
        shutil.copy(self.deb, root + pkg)
        t_extract = time.monotonic() - start

        # Not installed yet: the fresh system has no netstackd.
        rc, out = self.in_root(root, "command -v netstackd")
        self.assertNotEqual(rc, 0, out)

        # 1: the archive's index and the Depends, in this machine's
        # network namespace (the archive is the only place it reaches).
        start = time.monotonic()
        rc, out = self.in_root(
            root, "apt-get update -q && "
            "apt-get install -y -q --no-install-recommends --download-only "
            f"{pkg} curl")
        t_download = time.monotonic() - start
        self.assertEqual(rc, 0, out)

        # 2: everything else in a namespace with only lo and no route.
        cls.netns = f"nst-deb-{os.getpid()}"
        iu.run("ip", "netns", "add", cls.netns)
        iu.run("ip", "-n", cls.netns, "link", "set", "lo", "up")
        for family in ("-4", "-6"):
            self.assertEqual(iu.run("ip", "-n", cls.netns, family, "route",
                                    "show", "default").stdout.strip(), "")
        links = iu.run("ip", "-n", cls.netns, "-o", "link").stdout
        self.assertEqual([l.split(":")[1].strip() for l in links.splitlines()],
                         ["lo"])
        cls.server = subprocess.Popen(
            ["ip", "netns", "exec", cls.netns, "python3", "-m", "http.server",
             "--bind", "127.0.0.1", "--directory", os.path.join(root, "etc"),
             str(HTTP_PORT)], stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        self.assertTrue(iu.wait_for(lambda: iu.run(
            "ip", "netns", "exec", cls.netns, "python3", "-c",
            f"import socket; socket.create_connection(('127.0.0.1', {HTTP_PORT}))",
            check=False).returncode == 0, timeout=10), "no HTTP server")

        start = time.monotonic()
        rc, out = self.in_root(root, (
            # Not --no-download: apt 2.6 then fails on a local .deb
            # ("Pathname to install is not absolute"). Nothing can be
            # downloaded here anyway, and apt says what it would need.
            f"apt-get install -y -q --no-install-recommends {pkg} curl"
            f" && useradd --create-home {USER}"
            " && echo INSTALLED $(command -v netstackd)"), netns=cls.netns)
        t_install = time.monotonic() - start
        self.assertEqual(rc, 0, out)
        self.assertIn("INSTALLED /usr/bin/netstackd", out)
        install_out = out
        log(f"apt-get install:\n{out[-1500:]}")

        # As the user: `netstackd -- true`, the guest's resolv.conf, and a
        # request through the guest's network to the HTTP server on the
        # namespace's 127.0.0.1 (the gateway 10.0.2.2 with --host-loopback).
        run_as = f"runuser -u {USER} --"
        start = time.monotonic()
        rc, out = self.in_root(root, (
            f"cd /home/{USER} && "
            f"echo USER=$({run_as} id -un) UID=$({run_as} id -u); "
            f"{run_as} netstackd -- true; echo TRUE_EXIT=$?; "
            # slirp4netns's command line by its name, off PATH.
            f"{run_as} /usr/lib/netstack/bin/slirp4netns --version; "
            "echo S4N_EXIT=$?; "
            "command -v slirp4netns || echo NO_SLIRP4NETNS_ON_PATH; "
            f"{run_as} netstackd -- cat /etc/resolv.conf; echo RESOLV_EXIT=$?; "
            f"{run_as} netstackd --host-loopback -- curl -sS --max-time 10 "
            f"-w 'HTTP %{{http_code}}\\n' "
            f"http://10.0.2.2:{HTTP_PORT}/debian_version; "
            "echo HTTP_EXIT=$?"), netns=cls.netns, timeout=120)
        t_run = time.monotonic() - start
        log(f"netstackd as {USER}:\n{out}")
        self.assertEqual(rc, 0, out)
        self.assertRegex(out, f"USER={USER} UID=[1-9][0-9]*")
        self.assertIn("TRUE_EXIT=0", out)
        self.assertIn("S4N_EXIT=0", out)
        self.assertRegex(out, r"(?m)^slirp4netns version \S+\+netstack$")
        self.assertIn("NO_SLIRP4NETNS_ON_PATH", out)
        self.assertIn("RESOLV_EXIT=0", out)
        self.assertRegex(out, r"(?m)^nameserver 10\.0\.2\.3$")
        self.assertIn("HTTP_EXIT=0", out)
        self.assertRegex(out, r"(?m)^HTTP 200$")
        with open(os.path.join(root, "etc/debian_version")) as f:
            version = f.read().strip()
        self.assertRegex(version, r"^12\.")
        self.assertRegex(out, f"(?m)^{re.escape(version)}$")
        # apt installed what Depends names, from the archive's files
        # downloaded in step 1 (without them netstackd above cannot load).
        self.assertRegex(install_out, r"Need to get 0 B")
        for lib in ("libabsl20220623", "libpcap0.8", "libmnl0"):
            self.assertRegex(install_out, f"Setting up {re.escape(lib)}[: ]")
        log(f"times: extract {t_extract:.1f} s, update+download "
            f"{t_download:.1f} s, install {t_install:.1f} s, netstackd runs "
            f"{t_run:.1f} s")


if __name__ == "__main__":
    unittest.main()
