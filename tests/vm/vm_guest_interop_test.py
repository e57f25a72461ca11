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
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

from tests.backend.backend_topology import H4, H6
from tests.interop import interop_util as iu
from tests.vm import vm_harness as vh
from tests.vm.vm_harness import (DNSMASQ, FWD_PORT, HTTP_PORT, NAME, QEMU,
                                 SINK_GW4, SINK_GW6, VmTopology,
                                 check_netstackd_guest)


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
        cls.kernel, cls.initrd = vh.build_guest(cls.tmp)
        print(f"guest image: {time.monotonic() - t:.1f} s", flush=True)
        cls.topo.setup()
        cls.dl_sha = vh.start_servers(cls.topo, cls.tmp)

    @classmethod
    def _teardown(cls):
        cls.topo.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)
        shutil.rmtree(cls.sockdir, ignore_errors=True)

    @classmethod
    def tearDownClass(cls):
        cls._teardown()
        if cls.results:
            print(vh.report(cls.results), flush=True)

    # --- one guest run -----------------------------------------------------

    def boot(self, label, sock, http, http6, backend_log):
        """Boots the guest on `sock` (-netdev stream) and returns what it
        and the host saw (vm_harness.run_guest)."""
        res = vh.run_guest(self.topo, self.kernel, self.initrd, label,
                           "stream", sock, http, http6, backend_log,
                           self.out_dir, self.dl_sha)
        res["why"] = res["why"]()
        self.assertTrue(res["served"], f"{label}: the guest did not "
                                       f"finish{res['why']}")
        self.assertIsNotNone(res["lease"],
                             f"{label}: no DHCP lease{res['why']}")
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
        check_netstackd_guest(self, res, counters, res["why"] + log)

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



if __name__ == "__main__":
    unittest.main()
