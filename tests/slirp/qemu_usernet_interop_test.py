#!/usr/bin/env python3
"""Debian's QEMU 7.2, unmodified, on the libslirp.so.0 under test: its
`-netdev user` (issue #31 part 4 item 1; slirp_util.py:
NETSTACK_LIBSLIRP_DIR unset is Debian's libslirp0, the baseline).

QEMU (TCG, 1 vCPU, 256 MiB) boots the tests/vm guest (Debian's cloud
kernel, a busybox initramfs whose /init is tests/vm/guest_init.sh) with
  -netdev user,id=n0,hostfwd=tcp:127.0.0.1:FWD_PORT-:80
  -monitor unix:SOCK,server=on,wait=off
and no other network (-nodefaults). The guest takes a DHCP lease (busybox
udhcpc), its IPv6 address by SLAAC on QEMU's default prefix fec0::/64,
resolves a name through 10.0.2.3, fetches a small file over IPv4 and IPv6
and then 16 MiB from an HTTP server in H (sha256 compared), and serves the
16 MiB file on port 80 (busybox httpd), which the host fetches through the
hostfwd (sha256 compared). It reports on the serial console ("NST: ..."
lines); the test checks every value itself. With a connection from H held
open through the hostfwd, HMP `info usernet` must list the forward and
that connection.

QEMU runs in the "host" H (lo and a veth into an empty sink namespace, no
default route: asserted first), in a mount namespace of its own where
resolv.conf names the test's dnsmasq in H (libslirp forwards 10.0.2.3 to
resolv.conf's nameserver; the machine's names a server H cannot reach).
The test asserts from /proc/PID/maps that QEMU mapped the library under
test.

Figures, printed as one parseable line (slirp_util.bench_line) for
docs/BENCHMARKS.md: QEMU start to the DHCP lease, guest link up to the
lease, download MB/s (H -> guest, timed in the guest) and upload MB/s
(guest -> H through hostfwd, timed at H). Needs root, qemu-system-x86,
dnsmasq, dig, curl, apt once (the guest's kernel; tests/vm/vm_image.py).
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

from tests.backend.backend_topology import H4, H6
from tests.interop import interop_util as iu
from tests.slirp import slirp_util as su
from tests.vm import vm_image
from tests.vm.vm_console import Console, fields

HERE = os.path.dirname(os.path.abspath(__file__))
QEMU = "qemu-system-x86_64"
NAME = "vm.netstack.test"
HTTP_PORT = 8080
FWD_PORT = 18081
SIZE = 16 << 20
BOOT_TIMEOUT = 120   # QEMU start to the guest serving, under TCG
# QEMU's user-mode network plan (net/slirp.c defaults).
GUEST4, GATEWAY4, DNS4 = "10.0.2.15", "10.0.2.2", "10.0.2.3"
PREFIX6 = "fec0::"
# Holds one TCP connection to argv[1]:argv[2] open until stdin closes.
HOLD = """
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
print("connected", s.getsockname()[1], flush=True)
sys.stdin.read()
"""


def guest_file(name):
    """tests/vm's guest files: runfiles under Bazel, else the tree."""
    return iu.runfile(os.path.join("tests", "vm", name))


def hmp(path, command, timeout=10):
    """One HMP command over QEMU's -monitor UNIX socket; its output."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)

        def until_prompt():
            data = b""
            while not data.endswith(b"(qemu) "):
                b = s.recv(4096)
                if not b:
                    break
                data += b
            return data.decode(errors="replace")
        until_prompt()  # the banner
        s.sendall(command.encode() + b"\n")
        out = until_prompt()
    # The echo of the command (with terminal escapes) comes first.
    out = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", out)
    lines = out.replace("\r", "").split("\n")
    return "\n".join(l for l in lines[1:] if l != "(qemu) ")


class QemuUsernetTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root")
        for tool in (QEMU, "dnsmasq", "dig", "curl", "unshare"):
            if not iu.have(tool):
                raise unittest.SkipTest(
                    f"needs {tool} (tools/dev/install-deps)")
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        cls.procs = su.Processes()
        cls.host = su.Host("nstqu")
        cls.lib = None
        cls.tmp = tempfile.mkdtemp(prefix="nst-qemu-", dir="/tmp")
        cls.out_dir = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR", cls.tmp)
        try:
            cls._setup()
        except BaseException:
            cls._teardown()
            raise

    @classmethod
    def _setup(cls):
        tmp = cls.tmp
        cls.lib = su.Libslirp()
        print(f"libslirp under test: {cls.lib.describe()}", flush=True)
        cache = vm_image.fetch()

        def read(path):
            with open(path) as f:
                return f.read()
        cls.initrd = vm_image.build_initramfs(
            os.path.join(tmp, "initrd.gz"), read(guest_file("guest_init.sh")),
            {"/etc/udhcpc.sh": read(guest_file("udhcpc.sh"))})
        cls.kernel = os.path.join(cache, "vmlinuz")
        host = cls.host
        host.setup()
        www = os.path.join(tmp, "www")
        os.makedirs(www)
        with open(os.path.join(www, "hello.txt"), "w") as f:
            f.write("hello-from-h\n")
        cls.dl_sha = iu.write_random_file(os.path.join(www, "dl.bin"), SIZE,
                                          seed=31)
        resolv = su.serve_in_h(cls.procs, host, www, tmp, NAME, HTTP_PORT,
                               "hello.txt")
        cls._boot(resolv)

    @classmethod
    def _boot(cls, resolv):
        host = cls.host
        cls.monitor = os.path.join(cls.tmp, "monitor.sock")
        append = ("console=ttyS0 quiet panic=-1 "
                  f"nst_name={NAME} nst_http={H4}:{HTTP_PORT} "
                  f"nst_http6=[{H6}]:{HTTP_PORT}")
        host.assert_isolated()  # no default route in H: nothing leaves
        cmd = host.in_ns(host.h, *su.in_mount_ns(
            [(resolv, "/etc/resolv.conf")], [
                QEMU, "-nodefaults", "-no-user-config", "-machine", "q35",
                "-accel", "tcg", "-cpu", "max", "-smp", "1", "-m", "256",
                "-display", "none", "-serial", "stdio", "-no-reboot",
                "-monitor", f"unix:{cls.monitor},server=on,wait=off",
                "-kernel", cls.kernel, "-initrd", cls.initrd,
                "-append", append,
                "-netdev", f"user,id=n0,hostfwd=tcp:127.0.0.1:{FWD_PORT}-:80",
                "-device", "virtio-net-pci,netdev=n0,romfile=,"
                           "mac=52:54:00:12:34:56"]))
        cls.t0 = time.monotonic()
        cls.qemu = cls.procs.start(cmd, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT,
                                   env=cls.lib.env())
        cls.console = Console(cls.qemu, cls.t0,
                              os.path.join(cls.out_dir, "console-qemu.log"))
        cls.qemu_pid = su.find_process(cls.qemu.pid, QEMU)
        assert cls.qemu_pid, f"no QEMU process: {cls.console.text()}"
        # Every step of the guest's has its own timeout: it always gets
        # to "serving" unless it hangs or dies.
        cls.serving = cls.console.wait_for("serving", BOOT_TIMEOUT)
        cls.steps = {step: cls.console.find(step) for step in
                     ("link", "lease", "dns", "fetch", "slaac", "fetch6",
                      "download")}

    @classmethod
    def _teardown(cls):
        cls.procs.stop_all()
        if hasattr(cls, "console"):
            cls.console.thread.join(timeout=5)
        cls.host.close()
        if cls.lib:
            cls.lib.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def tearDownClass(cls):
        cls._teardown()
        su.assert_nothing_left(cls.procs, cls.host, cls.tmp)

    def why(self):
        return f"\n--- console:\n{self.console.text()}"

    def step(self, name):
        r = self.steps[name]
        self.assertIsNotNone(r, f"the guest did not report {name}"
                                f"{self.why()}")
        self.assertFalse(r[1], f"the guest's {name} failed: {r[2]}"
                               f"{self.why()}")
        return fields(r[2])

    # --- the checks --------------------------------------------------------

    def test_1_loads_the_library_under_test(self):
        path = self.lib.assert_loaded(self.qemu_pid)
        print(f"QEMU {self.qemu_pid} mapped {path}", flush=True)

    def test_2_guest_finished(self):
        self.assertIsNotNone(self.serving, f"the guest did not finish"
                                           f"{self.why()}")

    def test_3_dhcp_lease(self):
        lease = self.step("lease")
        self.assertEqual(lease.get("ip"), GUEST4, self.why())
        self.assertEqual(lease.get("router"), GATEWAY4, self.why())
        self.assertEqual(lease.get("dns"), DNS4, self.why())

    def test_4_slaac_on_the_default_prefix(self):
        slaac = self.step("slaac")
        self.assertTrue(slaac["addr"].startswith(PREFIX6)
                        and slaac["addr"].endswith("/64"), self.why())
        self.assertTrue(slaac["via"].startswith("fe80::"), self.why())

    def test_5_dns_through_10_0_2_3(self):
        dns = self.step("dns")
        self.assertEqual(dns["addr"], H4, self.why())
        self.assertEqual(dns["server"], DNS4, self.why())

    def test_6_fetches(self):
        self.assertEqual(self.step("fetch")["text"], "hello-from-h",
                         self.why())
        self.assertEqual(self.step("fetch6")["text"], "hello-from-h",
                         self.why())

    def test_7_download_and_upload(self):
        dl = self.step("download")
        self.assertEqual(dl.get("rc"), "0", self.why())
        self.assertEqual(dl.get("bytes"), str(SIZE), self.why())
        self.assertEqual(dl.get("sha256"), self.dl_sha, self.why())
        self.assertIsNotNone(self.serving, self.why())
        r = su.curl(self.host.in_ns(self.host.h),
                    f"http://127.0.0.1:{FWD_PORT}/up.bin", 60)
        why = f"rc {r.returncode}, {r.received} bytes, {r.stderr}{self.why()}"
        self.assertEqual(r.returncode, 0, why)
        self.assertEqual(r.received, SIZE, why)
        self.assertEqual(r.received_sha.hexdigest(), self.dl_sha, why)
        secs = float(dl["end"]) - float(dl["start"])
        link = self.steps["link"]
        lease = self.steps["lease"]
        print(su.bench_line(
            "qemu", self.lib,
            boot_to_lease_s=lease[0],
            link_to_lease_s=(float(fields(lease[2])["up"]) -
                             float(fields(link[2])["up"])
                             if link and not link[1] else None),
            boot_to_serving_s=self.serving[0],
            download_MBps=SIZE / 1e6 / secs if secs > 0 else None,
            upload_MBps=SIZE / 1e6 / r.seconds), flush=True)

    def test_8_info_usernet_lists_connections(self):
        self.assertIsNotNone(self.serving, self.why())
        # libslirp lists a connection accepted by a forward under the
        # forward's own address and port, with the guest's end.
        fwd = (rf"\s+\d+\s+127\.0\.0\.1\s+{FWD_PORT}\s+"
               rf"{re.escape(GUEST4)}\s+80\s")
        established = re.compile(rf"TCP\[ESTABLISHED\]{fwd}")
        out = ""

        def usernet():
            nonlocal out
            out = hmp(self.monitor, "info usernet")
            return out
        # None before (the upload's connection, if it ran, has gone).
        self.assertTrue(iu.wait_for(
            lambda: not established.search(usernet()), 10),
            f"a connection is listed before one is made:\n{out}")
        self.assertRegex(out, rf"TCP\[HOST_FORWARD\]{fwd}")
        holder = self.procs.start(
            self.host.in_ns(self.host.h, su.SYSTEM_PYTHON, "-c", HOLD,
                            "127.0.0.1", str(FWD_PORT)),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            line = holder.stdout.readline().decode().split()
            self.assertEqual(line[:1], ["connected"], self.why())
            # libslirp connects to the guest once it sees the host's
            # connection: wait until that side is established too.
            ok = iu.wait_for(lambda: established.search(usernet()), 10)
            print(f"info usernet with a connection held:\n{out}", flush=True)
            self.assertTrue(ok, f"the held connection is not listed:\n{out}")
            self.assertEqual(len(established.findall(out)), 1, out)
        finally:
            holder.stdin.close()
            self.procs.stop(holder)
        # And gone once the host closed it.
        self.assertTrue(iu.wait_for(
            lambda: not established.search(usernet()), 10),
            f"the closed connection is still listed:\n{out}")

if __name__ == "__main__":
    unittest.main()
