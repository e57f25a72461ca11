#!/usr/bin/env python3
"""The tests/vm guest over vhost-user (issue #35), and over the stream path
with the same checks.

QEMU 7.2 (TCG, 1 vCPU, 256 MiB) boots the guest of vm_guest_interop_test
(vm_harness.py) twice, each time on netstackd --backend -t 8081:80 in H:
  1. `-netdev stream` to netstackd --unix SOCK;
  2. `-netdev vhost-user` to netstackd --vhost-user SOCK, with the guest's
     memory shared (memory-backend-memfd,share=on the size of -m, -numa
     node,memdev=) and vectors=0 on virtio-net-pci (MSI-X crashes QEMU
     7.2 under TCG). Skipped, saying so, while netstackd has no
     --vhost-user.
Each run: DHCP lease (10.0.2.100, router .2, DNS .3), a SLAAC address in
fd00::/64, a name only the test's dnsmasq knows resolved, a first fetch
over IPv4 and IPv6, a 16 MiB download with its sha256, busybox httpd in the
guest serving the copy back to H through -t (sha256), and netstackd's
counters for the lease, the forward and the bytes. Over vhost-user the
guest's `ethtool -k` must show TSO and checksum offload on (over a stream
QEMU has no vnet header to offer them, and they are off: checked too, so a
harness that cannot see offloads fails). Figures are printed side by
side, with netstackd's CPU seconds per GB moved.

netstackd runs in H, which has no default route (assert_isolated); QEMU
runs there too, with -nodefaults. Namespaces, QEMU, netstackd, the
servers and the temporary directories go whatever happens. Needs root,
qemu-system-x86, dnsmasq, dig, curl, ethtool, apt once (vm_image.py).
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
from tests.vm.vm_harness import (DNSMASQ, FWD_PORT, HTTP_PORT, QEMU,
                                 check_netstackd_guest)


def netstackd_has_vhost_user():
    r = subprocess.run([iu.NETSTACKD, "--help"], capture_output=True,
                       text=True)
    return "--vhost-user" in r.stdout + r.stderr


class VmVhostUserTest(unittest.TestCase):
    results = {}   # attachment -> figures, printed side by side at the end

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root")
        for tool in (QEMU, "dnsmasq", "dig", "curl", vh.ETHTOOL):
            if not iu.have(tool) and not os.path.exists(tool):
                raise unittest.SkipTest(f"needs {tool} (tools/dev/install-deps)")
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        base = os.environ.get("TEST_TMPDIR") or None
        cls.tmp = tempfile.mkdtemp(prefix="nst-vu-", dir=base)
        # UNIX socket paths hold at most 107 bytes: TEST_TMPDIR's are
        # longer.
        cls.sockdir = tempfile.mkdtemp(prefix="nst-vu-", dir="/tmp")
        cls.topo = vh.VmTopology()
        cls.out_dir = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR", cls.tmp)
        try:
            cls.kernel, cls.initrd = vh.build_guest(cls.tmp)
            cls.topo.setup()
            cls.dl_sha = vh.start_servers(cls.topo, cls.tmp)
        except BaseException:
            cls._teardown()
            raise

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

    def run_netstackd(self, attachment, flag):
        topo = self.topo
        sock = os.path.join(self.sockdir, f"{attachment}.sock")
        topo.assert_isolated()  # no default route in H: nothing leaves
        nd = iu.Netstackd(["--backend", flag, sock, "--dns-upstream",
                           DNSMASQ, "-t", f"{FWD_PORT}:80"])
        nd.args = topo.in_ns(topo.h, *nd.args)
        nd.start()
        try:
            res = vh.run_guest(topo, self.kernel, self.initrd,
                               f"netstackd-{attachment}", attachment, sock,
                               f"{H4}:{HTTP_PORT}", f"[{H6}]:{HTTP_PORT}",
                               nd.log, self.out_dir, self.dl_sha,
                               backend_pid=nd.proc.pid)
            res["why"] = res["why"]()
            counters = nd.counters()
            alive = nd.proc.poll() is None
        finally:
            nd.stop()
            log = nd.log()
            nd.close()
        self.results[f"netstackd {attachment}"] = res
        self.assertTrue(alive, f"netstackd died{res['why']}{log}")
        self.check(res, counters, res["why"] + log)
        return res, counters

    def check(self, res, counters, why):
        check_netstackd_guest(self, res, counters, why)
        self.assertIsNotNone(res["offload"], f"no ethtool -k report{why}")

    def test_1_stream(self):
        res, _ = self.run_netstackd("stream", "--unix")
        # No vnet header on a stream socket: QEMU offers no offloads.
        self.assertEqual(res["offload"].get("tso"), "off", res["why"])

    def test_2_vhost_user(self):
        if not netstackd_has_vhost_user():
            self.skipTest("netstackd has no --vhost-user yet (issue #35)")
        res, counters = self.run_netstackd("vhost-user", "--vhost-user")
        off = res["offload"]
        self.assertEqual(off.get("tso"), "on", res["why"])
        self.assertEqual(off.get("txcsum"), "on", res["why"])
        self.assertEqual(off.get("rxcsum"), "on", res["why"])
        print("netstackd vhost-user counters: " + " ".join(
            f"{k}={v}" for k, v in sorted(counters.items())
            if k.startswith("link.")), flush=True)


if __name__ == "__main__":
    unittest.main()
