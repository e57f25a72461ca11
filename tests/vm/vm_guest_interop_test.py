#!/usr/bin/env python3
"""A real VM guest (issue #14): Linux under QEMU, on netstackd and on passt.

QEMU (TCG, 1 vCPU, 256 MiB) boots Debian's cloud kernel with a busybox
initramfs (vm_image.py; /init is guest_init.sh). Its virtio-net is attached
with `-netdev stream` to a UNIX socket served by
  1. netstackd --backend --unix SOCK -t 8081:80, then
  2. passt -f -s SOCK -t 8081:80 (the same guest, the same checks).
The guest takes its IPv4 address by DHCP (busybox udhcpc) and its IPv6
address by SLAAC, resolves a name only the test's dnsmasq knows, fetches a
small file and then 16 MiB from an HTTP server in H (sha256 compared), and
serves the 16 MiB file with busybox httpd, which the host fetches through
the backend's -t forward (sha256 compared). It reports on the serial
console (lines "NST: ..."); the test checks every value itself.

Measured and printed, side by side: boot-to-network (QEMU start to the
DHCP lease, and to the first HTTP fetch), download MB/s (host -> guest, in
the guest) and upload MB/s (guest -> host through -t, at the host).

The topology is backend_topology.py's H and S (no G): H holds lo and a
veth whose peer is alone in the sink namespace S. netstackd runs in H with
no default route there (BackendTopology.assert_isolated). passt needs an
interface with a default route, so for it H gets default routes into S,
whose only other link is lo and which has no address or route at all:
assert_sink_default() checks exactly that before passt starts. QEMU runs
in H too, with -nodefaults (no default NIC, which would be QEMU's own
user-mode network) and the one -netdev. Namespaces, QEMU, netstackd,
passt, dnsmasq, the HTTP server and the temporary directory are removed
whatever happens. Needs root, qemu-system-x86, passt, dnsmasq, apt (once,
for the guest's kernel and busybox; see vm_image.py).
"""
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
from tests.interop import interop_util as iu
from tests.vm import vm_image
from tests.vm.vm_console import Console, fields

HERE = os.path.dirname(os.path.abspath(__file__))
DNSMASQ = "127.0.0.53"
NAME = "vm.netstack.test"
HTTP_PORT = 8080
FWD_PORT = 8081
SIZE = 16 << 20
# passt's view of H: the default routes' gateways, in S, where nobody
# holds them (S has no address).
SINK_GW4, SINK_GW6 = "198.51.100.254", "2001:db8:1::fe"
QEMU = "qemu-system-x86_64"
BOOT_TIMEOUT = 90   # QEMU start to the guest serving, under TCG


class VmTopology(BackendTopology):
    """H and S of BackendTopology; the guest is a VM, so there is no G."""

    def setup(self):
        self.setup_host()
        iu.run("ip", "netns", "exec", self.s, "sysctl", "-qw",
               "net.ipv6.conf.all.disable_ipv6=1")

    def add_sink_default(self):
        iu.run("ip", "-n", self.h, "route", "add", "default", "via",
               SINK_GW4, "dev", "hveth")
        iu.run("ip", "-n", self.h, "-6", "route", "add", "default", "via",
               SINK_GW6, "dev", "hveth")

    def assert_sink_default(self):
        """For passt: H's default routes lead only into S over hveth, and
        S is a dead end (lo and sveth, no address, no route, IPv6 off)."""
        links_h, links_s = self.links(self.h), self.links(self.s)
        assert links_h == ["hveth", "lo"], f"H has links {links_h}"
        assert links_s == ["lo", "sveth"], f"S has links {links_s}"
        for family in ("-4", "-6"):
            for line in iu.run("ip", "-n", self.h, family, "route", "show",
                               "default").stdout.splitlines():
                assert " dev hveth" in line, f"H routes elsewhere: {line}"
            addrs = iu.run("ip", "-n", self.s, family, "-o", "addr", "show",
                           "dev", "sveth").stdout.strip()
            assert addrs == "", f"S has addresses: {addrs}"
            routes = iu.run("ip", "-n", self.s, family, "route",
                            "show").stdout.strip()
            assert routes == "", f"S has routes: {routes}"


class VmGuestTest(unittest.TestCase):
    results = {}   # backend name -> figures, printed side by side at the end

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root")
        for tool in (QEMU, "passt", "dnsmasq", "dig", "curl"):
            if not iu.have(tool):
                raise unittest.SkipTest(f"needs {tool} (tools/dev/install-deps)")
        # Bazel's timeout is a SIGTERM: unwind, so that QEMU, passt and the
        # namespaces still go.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        base = os.environ.get("TEST_TMPDIR") or None
        cls.tmp = tempfile.mkdtemp(prefix="nst-vm-", dir=base)
        # UNIX socket paths hold at most 107 bytes: TEST_TMPDIR's are
        # longer.
        cls.sockdir = tempfile.mkdtemp(prefix="nst-vm-", dir="/tmp")
        cls.topo = VmTopology()
        cls.out_dir = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR", cls.tmp)
        try:
            cls._setup()
        except BaseException:
            cls._teardown()
            raise

    @classmethod
    def _setup(cls):
        t = time.monotonic()
        cache = vm_image.fetch()
        def read(path):
            with open(path) as f:
                return f.read()
        cls.initrd = vm_image.build_initramfs(
            os.path.join(cls.tmp, "initrd.gz"),
            read(os.path.join(HERE, "guest_init.sh")),
            {"/etc/udhcpc.sh": read(os.path.join(HERE, "udhcpc.sh"))})
        cls.kernel = os.path.join(cache, "vmlinuz")
        print(f"guest image: {time.monotonic() - t:.1f} s ("
              f"{read(os.path.join(cache, 'VERSION')).split()[0]}, "
              f"cached in {cache})", flush=True)
        topo = cls.topo
        topo.setup()
        h = topo.h
        www = os.path.join(cls.tmp, "www")
        os.makedirs(www)
        with open(os.path.join(www, "hello.txt"), "w") as f:
            f.write("hello-from-h\n")
        cls.dl_sha = iu.write_random_file(os.path.join(www, "dl.bin"), SIZE,
                                          seed=14)
        # Dual-stack (::, so also 127.0.0.1, where passt maps its gateway).
        topo.spawn(h, sys.executable, "-m", "http.server", "--bind", "::",
                   "--directory", www, str(HTTP_PORT))
        topo.spawn(h, "dnsmasq", "--keep-in-foreground", "--no-resolv",
                   "--no-hosts", "--no-poll", "--bind-interfaces",
                   f"--listen-address={DNSMASQ}", "--port=53",
                   f"--address=/{NAME}/{H4}",
                   f"--pid-file={cls.tmp}/dnsmasq.pid", "--user=root")
        ok = iu.wait_for(lambda: iu.run(*topo.in_ns(
            h, "dig", f"@{DNSMASQ}", "+short", "+time=1", "+tries=1", NAME,
            "A"), check=False).stdout.strip() == H4, 10)
        assert ok, "dnsmasq does not answer in H"
        ok = iu.wait_for(lambda: iu.run(*topo.in_ns(
            h, "curl", "-sf", f"http://127.0.0.1:{HTTP_PORT}/hello.txt"),
            check=False).returncode == 0, 10)
        assert ok, "HTTP server not serving in H"

    @classmethod
    def _teardown(cls):
        cls.topo.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)
        shutil.rmtree(cls.sockdir, ignore_errors=True)

    @classmethod
    def tearDownClass(cls):
        cls._teardown()
        if cls.results:
            print(report(cls.results), flush=True)

    # --- one guest run -----------------------------------------------------

    def boot(self, label, sock, http, http6, backend_log):
        """Boots the guest on `sock`, checks everything it reports and the
        upload through -t; returns the figures."""
        h = self.topo.h
        append = ("console=ttyS0 quiet panic=-1 "
                  f"nst_name={NAME} nst_http={http}"
                  + (f" nst_http6={http6}" if http6 else ""))
        cmd = self.topo.in_ns(
            h, QEMU, "-nodefaults", "-no-user-config", "-machine", "q35",
            "-accel", "tcg", "-cpu", "max", "-smp", "1", "-m", "256",
            "-display", "none", "-serial", "stdio", "-no-reboot",
            "-kernel", self.kernel, "-initrd", self.initrd, "-append", append,
            "-netdev", f"stream,id=n0,server=off,addr.type=unix,"
                       f"addr.path={sock}",
            "-device", "virtio-net-pci,netdev=n0,romfile=,"
                       "mac=52:54:00:12:34:56")
        console_path = os.path.join(self.out_dir, f"console-{label}.log")
        t0 = time.monotonic()
        qemu = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)
        self.topo.procs.append(qemu)
        con = Console(qemu, t0, console_path)
        try:
            return self._check_guest(label, con, backend_log)
        finally:
            qemu.kill()
            qemu.wait()
            con.thread.join(timeout=5)

    def _check_guest(self, label, con, backend_log):
        def why():
            return (f"\n--- {label} console:\n{con.text()}\n--- backend:\n"
                    f"{backend_log()}")
        # Every step of the guest's has its own timeout: it always gets to
        # "serving" unless it hangs or dies.
        self.assertIsNotNone(con.wait_for("serving", BOOT_TIMEOUT),
                             f"{label}: the guest did not finish{why()}")
        got = {step: con.find(step) for step in
               ("link", "lease", "slaac", "dns", "fetch", "fetch6",
                "download")}
        res = {}
        for step, r in got.items():
            res[step] = None if r is None or r[1] else fields(r[2])
        self.assertIsNotNone(res["lease"], f"{label}: no DHCP lease{why()}")
        res["boot_to_lease"] = got["lease"][0]
        if res["fetch"]:
            res["boot_to_fetch"] = got["fetch"][0]
        # The same from the guest's clock, from its link up: the part the
        # backend has a say in (the kernel's boot under TCG varies with
        # the host's load).
        if res["link"]:
            link_up = float(res["link"]["up"])
            res["link_to_lease"] = float(res["lease"]["up"]) - link_up
            if res["fetch"]:
                res["link_to_fetch"] = float(res["fetch"]["up"]) - link_up
            if res["slaac"]:
                res["link_to_slaac"] = float(res["slaac"]["up"]) - link_up
        dl = res["download"]
        if dl:
            res["download_ok"] = (dl.get("rc") == "0"
                                  and dl.get("bytes") == str(SIZE)
                                  and dl.get("sha256") == self.dl_sha)
            secs = float(dl["end"]) - float(dl["start"])
            res["download_mbps"] = SIZE / 1e6 / secs if secs > 0 else None
        # The upload: the host fetches the guest's copy through -t.
        r = iu.curl_download(self.topo.in_ns(self.topo.h),
                             f"http://127.0.0.1:{FWD_PORT}/up.bin", 60)
        res["upload_ok"] = (r.returncode == 0 and r.received == SIZE
                            and r.received_sha.hexdigest() == self.dl_sha)
        res["upload_mbps"] = SIZE / 1e6 / r.seconds if r.seconds else None
        res["upload_err"] = f"rc {r.returncode}, {r.received} bytes {r.stderr}"
        res["why"] = why()
        return res

    # --- the two backends ----------------------------------------------------

    def test_1_netstackd(self):
        topo = self.topo
        sock = os.path.join(self.sockdir, "netstackd.sock")
        topo.assert_isolated()  # no default route in H: nothing leaves
        nd = iu.Netstackd(["--backend", "--unix", sock, "--dns-upstream",
                           DNSMASQ, "-t", f"{FWD_PORT}:80"])
        nd.args = topo.in_ns(topo.h, *nd.args)
        nd.start()
        try:
            res = self.boot("netstackd", sock, f"{H4}:{HTTP_PORT}",
                            f"[{H6}]:{HTTP_PORT}", nd.log)
            counters = nd.counters()
        finally:
            nd.stop()
            log = nd.log()
            nd.close()
        self.results["netstackd"] = res
        print("netstackd's TCP losses: " + " ".join(
            f"{k}={v}" for k, v in sorted(counters.items())
            if k.startswith("tcp.") and any(
                w in k for w in ("retrans", "tlp", "loss_probe", "timeout"))),
            flush=True)
        why = res["why"] + log
        lease = res["lease"]
        self.assertEqual(lease.get("ip"), "10.0.2.100", why)
        self.assertEqual(lease.get("router"), "10.0.2.2", why)
        self.assertEqual(lease.get("dns"), "10.0.2.3", why)
        self.assertIsNotNone(res["slaac"], f"no SLAAC address{why}")
        self.assertTrue(res["slaac"]["addr"].startswith("fd00::"), why)
        self.assertTrue(res["slaac"]["via"].startswith("fe80::"), why)
        self.assertIsNotNone(res["dns"], f"{NAME} not resolved{why}")
        self.assertEqual(res["dns"]["addr"], H4, why)
        self.assertIsNotNone(res["fetch"], f"first fetch failed{why}")
        self.assertEqual(res["fetch"]["text"], "hello-from-h", why)
        self.assertIsNotNone(res["fetch6"], f"IPv6 fetch failed{why}")
        self.assertTrue(res.get("download_ok"), f"download{why}")
        self.assertTrue(res["upload_ok"], f"upload {res['upload_err']}{why}")
        self.assertGreaterEqual(
            counters.get("backend.dhcp4.leases_granted", 0), 1, counters)
        # The upload went through -t on the stack path to the guest's lease
        # (forward.N.bytes_* count only the splice path's relays, so the
        # bytes are the backend's: the download's guest -> host share is
        # its requests).
        self.assertGreaterEqual(counters.get("forward.1.accepted", 0), 1,
                                counters)
        self.assertEqual(counters.get("forward.1.failed", -1), 0, counters)
        self.assertGreaterEqual(
            counters.get("backend.tcp_inbound_established", 0), 1, counters)
        self.assertGreaterEqual(
            counters.get("backend.tcp_bytes_guest_to_host", 0), SIZE,
            counters)

    def test_2_passt(self):
        topo = self.topo
        topo.add_sink_default()
        topo.assert_sink_default()
        sock = os.path.join(self.sockdir, "passt.sock")
        # passt reads its DNS server from resolv.conf: a private one, in a
        # mount namespace of passt's own, names dnsmasq in H.
        resolv = os.path.join(self.tmp, "resolv.conf")
        with open(resolv, "w") as f:
            f.write(f"nameserver {DNSMASQ}\n")
        log_path = os.path.join(self.tmp, "passt.log")
        log = open(log_path, "w")
        passt = subprocess.Popen(topo.in_ns(
            topo.h, "unshare", "-m", "sh", "-c",
            f"mount --bind {resolv} /etc/resolv.conf && exec passt -f "
            f"-s {sock} --runas 0:0 -m 65520 -t {FWD_PORT}:80"),
            stdout=log, stderr=log)
        topo.procs.append(passt)
        log.close()

        def plog():
            # passt also logs to syslog, which H does not have.
            with open(log_path) as f:
                return "".join(l for l in f
                               if not l.startswith("Failed to send"))
        ok = iu.wait_for(lambda: os.path.exists(sock) or
                         passt.poll() is not None, 10)
        self.assertTrue(ok and passt.poll() is None, f"passt: {plog()}")
        # passt gives the guest H's own address, so H is reached through
        # the gateway address, which passt maps to H's loopback.
        try:
            res = self.boot("passt", sock, f"{SINK_GW4}:{HTTP_PORT}",
                            f"[{SINK_GW6}]:{HTTP_PORT}", plog)
        finally:
            passt.kill()
            passt.wait()
        self.results["passt"] = res
        why = res["why"]
        # passt's plan: H's addresses and gateway, its DNS server the
        # gateway address (passt forwards it to resolv.conf's, dnsmasq).
        lease = res["lease"]
        self.assertEqual(lease.get("ip"), H4, why)
        self.assertEqual(lease.get("router"), SINK_GW4, why)
        self.assertEqual(lease.get("dns"), SINK_GW4, why)
        self.assertIsNotNone(res["slaac"], f"no SLAAC address{why}")
        self.assertTrue(res["slaac"]["addr"].startswith("2001:db8:1:"), why)
        self.assertIsNotNone(res["dns"], f"{NAME} not resolved{why}")
        self.assertEqual(res["dns"]["addr"], H4, why)
        self.assertIsNotNone(res["fetch"], f"first fetch failed{why}")
        self.assertEqual(res["fetch"]["text"], "hello-from-h", why)
        self.assertIsNotNone(res["fetch6"], f"IPv6 fetch failed{why}")
        self.assertTrue(res.get("download_ok"), f"download{why}")
        self.assertTrue(res["upload_ok"], f"upload {res['upload_err']}{why}")


def report(results):
    def f(v, fmt):
        return "-" if v is None else fmt % v
    rows = [("", *results)]
    get = lambda k: [results[b].get(k) for b in results]
    rows.append(("QEMU start -> DHCP lease (s)",
                 *[f(v, "%.2f") for v in get("boot_to_lease")]))
    rows.append(("QEMU start -> first HTTP fetch (s)",
                 *[f(v, "%.2f") for v in get("boot_to_fetch")]))
    rows.append(("guest link up -> DHCP lease (s)",
                 *[f(v, "%.2f") for v in get("link_to_lease")]))
    rows.append(("guest link up -> first HTTP fetch (s)",
                 *[f(v, "%.2f") for v in get("link_to_fetch")]))
    rows.append(("guest link up -> SLAAC address (s)",
                 *[f(v, "%.2f") for v in get("link_to_slaac")]))
    rows.append(("download H -> guest (MB/s)",
                 *[f(v, "%.1f") for v in get("download_mbps")]))
    rows.append(("upload guest -> H via -t (MB/s)",
                 *[f(v, "%.1f") for v in get("upload_mbps")]))
    rows.append(("SLAAC address", *[(r.get("slaac") or {}).get("addr", "-")
                                   for r in results.values()]))
    rows.append(("DNS answer", *[(r.get("dns") or {}).get("addr", "-")
                                for r in results.values()]))
    rows.append(("MTU from DHCP", *[(r.get("lease") or {}).get("mtu", "-")
                                   for r in results.values()]))
    w = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return "VM guest results:\n" + "\n".join(
        "  ".join(str(c).ljust(w[i]) for i, c in enumerate(r)) for r in rows)


if __name__ == "__main__":
    unittest.main()
