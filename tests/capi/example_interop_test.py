"""libnetstack as an embedder gets it (issue #31, part 2): install it with
tools/dev/install-libs into a temporary prefix, build netstack/capi/
example.c with `cc example.c $(pkg-config --cflags --libs netstack)`
against that install, and let the example give a guest namespace its
network.

  G (the guest) --TAP nsttap (opened by the example, inside G)-- example
  (in H) -- host sockets in H

H is BackendTopology's: lo and a veth into an empty sink namespace, no
default route (asserted before the example starts). In H: dnsmasq on
127.0.0.1 answers web.test with H's veth address, and an HTTP server
there serves a 4 MiB file. G's resolv.conf (ip netns exec's
/etc/netns/G/resolv.conf) names 10.0.2.3, the library's DNS forwarder,
whose upstream the example is given (127.0.0.1). So `curl
http://web.test:PORT/blob` in G resolves the name through the library
and fetches through it; the sha256 must match. A host client then
reaches a server in G through the example's forward.

install-libs runs with --prebuilt (this test's runfiles: the library
Bazel built), since a bazel inside a bazel test would wait for the outer
one's lock; the files, the symlink, the .pc and the compile are as an
embedder has them. Needs root, cc, pkg-config, curl, dnsmasq.
"""
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest

from tests.backend.backend_topology import BackendTopology, H4
from tests.interop import interop_util as iu

INSTALL_LIBS = iu.runfile("tools/dev/install-libs")
EXAMPLE = iu.runfile("netstack/capi/example.c")
BLOB_BYTES = 4 << 20
HTTP_PORT = 8081
FORWARD_PORT = 18080  # on H's 127.0.0.1, to G's port 80
UDP_FORWARD_PORT = 18053  # on H's ::1 and 127.0.0.1, to G's UDP port 7
# A UDP echo server for G: every datagram back to its sender.
UDP_ECHO = (
    "import socket\n"
    "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
    "s.bind(('10.0.2.100', 7))\n"
    "while True:\n"
    "    d, a = s.recvfrom(65535)\n"
    "    s.sendto(d, a)\n")


class ExampleTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root")
        for tool in ("cc", "pkg-config", "curl", "dnsmasq"):
            if not iu.have(tool):
                raise unittest.SkipTest(f"needs {tool}")
        cls.topo = BackendTopology()
        cls.tmp = tempfile.mkdtemp(prefix="nst-capi-")
        cls.etc_netns = None
        cls.example = None
        try:
            cls.build()
            cls.setup_namespaces()
            cls.start_example()
        except BaseException:
            cls.cleanup()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.cleanup()

    @classmethod
    def cleanup(cls):
        if cls.example is not None and cls.example.poll() is None:
            cls.example.kill()
            cls.example.wait()
        cls.topo.close()
        if cls.etc_netns:
            shutil.rmtree(cls.etc_netns, ignore_errors=True)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def build(cls):
        """install-libs into PREFIX, then the example with pkg-config."""
        cls.prefix = os.path.join(cls.tmp, "prefix")
        runfiles_root = os.path.dirname(os.path.dirname(os.path.dirname(
            INSTALL_LIBS)))  # .../netstack (the workspace's runfiles)
        iu.run(INSTALL_LIBS, "--prebuilt", runfiles_root, cls.prefix)
        env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(
            cls.prefix, "lib", "pkgconfig"))
        flags = subprocess.run(
            ["pkg-config", "--cflags", "--libs", "netstack"], env=env,
            check=True, capture_output=True, text=True).stdout.split()
        cls.pkg_flags = flags
        cls.binary = os.path.join(cls.tmp, "example")
        shutil.copy(EXAMPLE, os.path.join(cls.tmp, "example.c"))
        # Under --config=asan the library needs the sanitizers' runtime
        # loaded first: the example is then built with them too (and runs
        # under them).
        sanitize = []
        lib = os.path.join(cls.prefix, "lib", "libnetstack.so.1")
        if "libasan" in iu.run("readelf", "-d", lib).stdout:
            sanitize = ["-fsanitize=address,undefined",
                        "-fno-omit-frame-pointer"]
        subprocess.run(["cc", "-Wall", "-Werror", *sanitize, "example.c",
                        *flags, "-o", cls.binary], cwd=cls.tmp, check=True,
                       capture_output=True, text=True)

    @classmethod
    def setup_namespaces(cls):
        t = cls.topo
        t.setup_host()
        t.add_ns(t.g)
        # G resolves through the library's DNS address.
        cls.etc_netns = os.path.join("/etc/netns", t.g)
        os.makedirs(cls.etc_netns)
        with open(os.path.join(cls.etc_netns, "resolv.conf"), "w") as f:
            f.write("nameserver 10.0.2.3\n")
        # The upstream, on H's loopback.
        t.spawn(t.h, "dnsmasq", "--no-daemon", "--no-resolv", "--no-hosts",
                "--listen-address=127.0.0.1", "--bind-interfaces",
                "--port=53", f"--address=/web.test/{H4}",
                f"--pid-file={cls.tmp}/dnsmasq.pid")
        # The web server in H, and the file it serves.
        cls.www = os.path.join(cls.tmp, "www")
        os.makedirs(cls.www)
        cls.blob = os.urandom(BLOB_BYTES)
        with open(os.path.join(cls.www, "blob"), "wb") as f:
            f.write(cls.blob)
        t.spawn(t.h, sys.executable, "-m", "http.server", "--bind", H4,
                "--directory", cls.www, str(HTTP_PORT))
        ok = iu.wait_for(lambda: all(
            w in iu.run(*t.in_ns(t.h, "ss", "-ltnuH")).stdout
            for w in (f"{H4}:{HTTP_PORT} ", "127.0.0.1:53 ")), 10)
        assert ok, "dnsmasq or the web server did not start in H"

    @classmethod
    def start_example(cls):
        t = cls.topo
        t.assert_isolated()
        cls.example_out = os.path.join(cls.tmp, "example.out")
        env = dict(os.environ,
                   LD_LIBRARY_PATH=os.path.join(cls.prefix, "lib"))
        with open(cls.example_out, "w") as out:
            cls.example = subprocess.Popen(
                t.in_ns(t.h, cls.binary, f"/var/run/netns/{t.g}", "nsttap",
                        "127.0.0.1", f"127.0.0.1/{FORWARD_PORT}:80",
                        f"udp:{UDP_FORWARD_PORT}:7"),
                stdout=out, stderr=subprocess.STDOUT, env=env)
        ok = iu.wait_for(lambda: cls.example.poll() is not None or
                         "nsttap" in t.links(t.g), 10)
        assert ok and cls.example.poll() is None, cls.output()
        # The guest's side: what DHCP would give it (lease .100), by hand.
        iu.run("ip", "-n", t.g, "link", "set", "nsttap", "mtu", "65520")
        t.configure_guest()

    @classmethod
    def output(cls):
        with open(cls.example_out) as f:
            return f.read()

    def guest(self, *cmd, timeout=60):
        return iu.run(*self.topo.in_ns(self.topo.g, *cmd), timeout=timeout)

    def test_0_installed_layout(self):
        p = self.prefix
        self.assertEqual(os.readlink(os.path.join(p, "lib", "libnetstack.so")),
                         "libnetstack.so.1")
        self.assertTrue(os.path.isfile(os.path.join(p, "include", "netstack.h")))
        with open(os.path.join(p, "lib", "pkgconfig", "netstack.pc")) as f:
            pc = f.read()
        self.assertIn(f"prefix={p}\n", pc)
        self.assertIn("Version: 1.1.0\n", pc)
        self.assertIn(f"-I{p}/include", self.pkg_flags)
        self.assertIn(f"-L{p}/lib", self.pkg_flags)
        self.assertIn("-lnetstack", self.pkg_flags)
        # The example was linked against the installed library's SONAME.
        needed = iu.run("readelf", "-d", self.binary).stdout
        self.assertIn("Shared library: [libnetstack.so.1]", needed)

    def test_1_guest_resolves_and_fetches(self):
        out = self.guest("getent", "hosts", "web.test").stdout
        self.assertEqual(out.split()[0], H4, out)
        p = subprocess.run(self.topo.in_ns(
            self.topo.g, "curl", "-sS", "--fail", "--max-time", "60",
            f"http://web.test:{HTTP_PORT}/blob"), capture_output=True,
            timeout=90, check=True)
        self.assertEqual(len(p.stdout), BLOB_BYTES)
        self.assertEqual(hashlib.sha256(p.stdout).hexdigest(),
                         hashlib.sha256(self.blob).hexdigest())

    def test_2_tcp_forward(self):
        t = self.topo
        server = t.spawn(t.g, sys.executable, "-m", "http.server", "--bind",
                         "10.0.2.100", "--directory", self.www, "80")
        self.assertTrue(iu.wait_for(lambda: "10.0.2.100:80 " in iu.run(
            *t.in_ns(t.g, "ss", "-ltnH")).stdout, 10))
        p = subprocess.run(t.in_ns(
            t.h, "curl", "-sS", "--fail", "--max-time", "60",
            f"http://127.0.0.1:{FORWARD_PORT}/blob"), capture_output=True,
            timeout=90, check=True)
        self.assertEqual(hashlib.sha256(p.stdout).hexdigest(),
                         hashlib.sha256(self.blob).hexdigest())
        server.kill()
        server.wait()

    def test_2_udp_forward_both_families(self):
        t = self.topo
        echo = t.spawn(t.g, sys.executable, "-c", UDP_ECHO)
        self.assertTrue(iu.wait_for(lambda: "10.0.2.100:7 " in iu.run(
            *t.in_ns(t.g, "ss", "-lunH")).stdout, 10))
        client = (
            "import socket, sys\n"
            "fam, addr = (socket.AF_INET6, '::1') if sys.argv[1] == '6' "
            "else (socket.AF_INET, '127.0.0.1')\n"
            "s = socket.socket(fam, socket.SOCK_DGRAM)\n"
            "s.settimeout(2)\n"
            "for i in range(10):\n"
            "    s.sendto(b'ping %d' % i, (addr, int(sys.argv[2])))\n"
            "    try:\n"
            "        print(s.recv(100).decode())\n"
            "        break\n"
            "    except socket.timeout:\n"
            "        pass\n")
        try:
            for family in ("4", "6"):
                out = iu.run(*t.in_ns(t.h, sys.executable, "-c", client,
                                      family, str(UDP_FORWARD_PORT)),
                             timeout=60).stdout
                self.assertRegex(out, r"^ping \d+$", family)
        finally:
            echo.kill()
            echo.wait()

    def test_3_stops_on_sigterm_and_prints_counters(self):
        self.example.send_signal(signal.SIGTERM)
        self.assertEqual(self.example.wait(timeout=10), 0, self.output())
        out = self.output()
        counters = iu.parse_counters(out)
        self.assertGreater(counters.get("backend.tcp_flows_opened", 0), 0,
                           out[-2000:])
        self.assertGreater(counters.get("backend.dns.answers.udp", 0), 0,
                           [l for l in out.splitlines() if "dns" in l])
        self.assertGreater(counters.get("link.rx_frames", 0), 0)


if __name__ == "__main__":
    unittest.main()
