"""One QEMU guest run for tests/vm and bench/vm_benchmark.py (issues #14,
#35): the topology, the guest image, the servers in H, QEMU's command
line for each attachment, and the figures of a run.

Attachments (`Attachment`):
  - "stream": `-netdev stream` to a UNIX socket (netstackd --unix, passt);
  - "vhost-user": `-chardev socket` + `-netdev vhost-user` to netstackd
    --vhost-user. QEMU 7.2 under TCG needs the guest's memory shared
    (`-object memory-backend-memfd,share=on` the size of `-m`, `-numa
    node,memdev=`) and `vectors=0` on the device: MSI-X crashes it
    (../shared/DESIGN.md, docs/VM.md).

The topology is backend_topology.py's H and S (no G): H holds lo and a
veth whose peer is alone in the sink namespace S. QEMU and the backend
run in H, QEMU with -nodefaults (no NIC of its own). The guest
(guest_init.sh) reports every step on the serial console; run_guest()
checks nothing itself but returns what the guest and the host saw, with
the backend's CPU seconds (/proc/PID/stat utime + stime) during the
download and during the upload when it is given the backend's pid.
"""
import os
import subprocess
import sys
import time

from tests.backend.backend_topology import H4, BackendTopology
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
MEM_MIB = 256
BOOT_TIMEOUT = 120   # QEMU start to the guest serving, under TCG
MAC = "52:54:00:12:34:56"
ETHTOOL = "/usr/sbin/ethtool"


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

    def del_sink_default(self):
        iu.run("ip", "-n", self.h, "route", "del", "default", check=False)
        iu.run("ip", "-n", self.h, "-6", "route", "del", "default",
               check=False)

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


def build_guest(tmp):
    """(kernel, initrd): Debian's cloud kernel, and an initramfs with
    guest_init.sh as /init, udhcpc.sh and the host's ethtool (for the
    offloads step)."""
    cache = vm_image.fetch()

    def read(path):
        with open(path) as f:
            return f.read()
    binaries = vm_image.host_binary(ETHTOOL) if os.path.exists(ETHTOOL) else {}
    initrd = vm_image.build_initramfs(
        os.path.join(tmp, "initrd.gz"),
        read(os.path.join(HERE, "guest_init.sh")),
        {"/etc/udhcpc.sh": read(os.path.join(HERE, "udhcpc.sh"))},
        binaries=binaries)
    return os.path.join(cache, "vmlinuz"), initrd


def start_servers(topo, tmp, size=SIZE):
    """In H: an HTTP server (dual-stack, port HTTP_PORT) with hello.txt and
    dl.bin (`size` random bytes) and dnsmasq on DNSMASQ answering NAME
    with H4. Returns dl.bin's sha256."""
    h = topo.h
    www = os.path.join(tmp, "www")
    os.makedirs(www)
    with open(os.path.join(www, "hello.txt"), "w") as f:
        f.write("hello-from-h\n")
    sha = iu.write_random_file(os.path.join(www, "dl.bin"), size, seed=14)
    # Dual-stack (::, so also 127.0.0.1, where passt maps its gateway).
    topo.spawn(h, sys.executable, "-m", "http.server", "--bind", "::",
               "--directory", www, str(HTTP_PORT))
    topo.spawn(h, "dnsmasq", "--keep-in-foreground", "--no-resolv",
               "--no-hosts", "--no-poll", "--bind-interfaces",
               f"--listen-address={DNSMASQ}", "--port=53",
               f"--address=/{NAME}/{H4}",
               f"--pid-file={tmp}/dnsmasq.pid", "--user=root")
    ok = iu.wait_for(lambda: iu.run(*topo.in_ns(
        h, "dig", f"@{DNSMASQ}", "+short", "+time=1", "+tries=1", NAME,
        "A"), check=False).stdout.strip() == H4, 10)
    assert ok, "dnsmasq does not answer in H"
    ok = iu.wait_for(lambda: iu.run(*topo.in_ns(
        h, "curl", "-sf", f"http://127.0.0.1:{HTTP_PORT}/hello.txt"),
        check=False).returncode == 0, 10)
    assert ok, "HTTP server not serving in H"
    return sha


def netdev_args(attachment, sock):
    """QEMU's memory and NIC arguments for `attachment` on `sock`."""
    device = f"virtio-net-pci,netdev=n0,romfile=,mac={MAC}"
    if attachment == "stream":
        return ["-netdev", f"stream,id=n0,server=off,addr.type=unix,"
                           f"addr.path={sock}",
                "-device", device]
    if attachment == "vhost-user":
        # The backend maps the guest's memory from the memfd QEMU sends,
        # so it must be shared and cover all of -m. vectors=0: no MSI-X
        # (QEMU 7.2 under TCG crashes with it and vhost-user).
        return ["-object", f"memory-backend-memfd,id=mem,size={MEM_MIB}M,"
                           "share=on",
                "-numa", "node,memdev=mem",
                "-chardev", f"socket,id=vu0,path={sock}",
                "-netdev", "vhost-user,id=n0,chardev=vu0",
                "-device", device + ",vectors=0"]
    raise ValueError(attachment)


def qemu_cmd(topo, kernel, initrd, attachment, sock, http, http6):
    append = ("console=ttyS0 quiet panic=-1 "
              f"nst_name={NAME} nst_http={http}"
              + (f" nst_http6={http6}" if http6 else ""))
    return topo.in_ns(
        topo.h, QEMU, "-nodefaults", "-no-user-config", "-machine", "q35",
        "-accel", "tcg", "-cpu", "max", "-smp", "1", "-m", str(MEM_MIB),
        "-display", "none", "-serial", "stdio", "-no-reboot",
        "-kernel", kernel, "-initrd", initrd, "-append", append,
        *netdev_args(attachment, sock))


def cpu_seconds(pid):
    """utime + stime of `pid` (fields 14 and 15 of /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


def run_guest(topo, kernel, initrd, label, attachment, sock, http, http6,
              backend_log, out_dir, dl_sha, size=SIZE, backend_pid=None):
    """Boots the guest on `sock`, waits for every step, fetches the
    guest's copy of dl.bin through -t FWD_PORT, and returns the figures
    (see check_guest). `backend_log` is a function returning the
    backend's log, for the failure text."""
    cmd = qemu_cmd(topo, kernel, initrd, attachment, sock, http, http6)
    console_path = os.path.join(out_dir, f"console-{label}.log")
    t0 = time.monotonic()
    qemu = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    topo.procs.append(qemu)
    con = Console(qemu, t0, console_path)
    try:
        return check_guest(topo, label, con, backend_log, dl_sha, size,
                           backend_pid)
    finally:
        qemu.kill()
        qemu.wait()
        con.thread.join(timeout=5)


def check_guest(topo, label, con, backend_log, dl_sha, size, backend_pid):
    def why():
        return (f"\n--- {label} console:\n{con.text()}\n--- backend:\n"
                f"{backend_log()}")
    cpu = (lambda: cpu_seconds(backend_pid)) if backend_pid else (lambda: 0.0)
    res = {"why": why}
    # Every step of the guest's has its own timeout: it always gets to
    # "serving" unless it hangs or dies. The backend's CPU time is read
    # when the download starts and ends (the guest's reports).
    if con.wait_for("dlstart", BOOT_TIMEOUT) is not None:
        c0 = cpu()
        if con.wait_for("download", 180) is not None:
            res["cpu_download"] = cpu() - c0
        res["served"] = con.wait_for("serving", 30) is not None
    else:
        res["served"] = con.wait_for("serving", BOOT_TIMEOUT) is not None
    got = {step: con.find(step) for step in
           ("link", "offload", "lease", "slaac", "dns", "fetch", "fetch6",
            "download")}
    for step, r in got.items():
        res[step] = None if r is None or r[1] else fields(r[2])
    if not res["served"] or res["lease"] is None:
        res["download_ok"] = res["upload_ok"] = False
        res["upload_err"] = "the guest did not serve"
        return res
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
                              and dl.get("bytes") == str(size)
                              and dl.get("sha256") == dl_sha)
        secs = float(dl["end"]) - float(dl["start"])
        res["download_mbps"] = size / 1e6 / secs if secs > 0 else None
    # The upload: the host fetches the guest's copy through -t.
    c0 = cpu()
    r = iu.curl_download(topo.in_ns(topo.h),
                         f"http://127.0.0.1:{FWD_PORT}/up.bin", 120)
    res["cpu_upload"] = cpu() - c0
    res["upload_ok"] = (r.returncode == 0 and r.received == size
                        and r.received_sha.hexdigest() == dl_sha)
    res["upload_mbps"] = size / 1e6 / r.seconds if r.seconds else None
    res["upload_err"] = f"rc {r.returncode}, {r.received} bytes {r.stderr}"
    if backend_pid and "cpu_download" in res:
        res["cpu_s_per_gb"] = ((res["cpu_download"] + res["cpu_upload"])
                               / (2 * size / 1e9))
    return res


def check_netstackd_guest(tc, res, counters, why):
    """The assertions every netstackd-served guest run makes, on the
    guest's report `res` and netstackd's `counters` (`tc`: the TestCase):
    lease, SLAAC, the name, both fetches, the download and the upload
    through -t, and the counters that say the backend carried them."""
    tc.assertTrue(res["served"], f"the guest did not finish{why}")
    lease = res["lease"]
    tc.assertIsNotNone(lease, f"no DHCP lease{why}")
    tc.assertEqual(lease.get("ip"), "10.0.2.100", why)
    tc.assertEqual(lease.get("router"), "10.0.2.2", why)
    tc.assertEqual(lease.get("dns"), "10.0.2.3", why)
    tc.assertIsNotNone(res["slaac"], f"no SLAAC address{why}")
    tc.assertTrue(res["slaac"]["addr"].startswith("fd00::"), why)
    tc.assertTrue(res["slaac"]["via"].startswith("fe80::"), why)
    tc.assertIsNotNone(res["dns"], f"{NAME} not resolved{why}")
    tc.assertEqual(res["dns"]["addr"], H4, why)
    tc.assertIsNotNone(res["fetch"], f"first fetch failed{why}")
    tc.assertEqual(res["fetch"]["text"], "hello-from-h", why)
    tc.assertIsNotNone(res["fetch6"], f"IPv6 fetch failed{why}")
    tc.assertTrue(res.get("download_ok"), f"download{why}")
    tc.assertTrue(res["upload_ok"], f"upload {res['upload_err']}{why}")
    tc.assertGreaterEqual(
        counters.get("backend.dhcp4.leases_granted", 0), 1, counters)
    # The upload went through -t on the stack path to the guest's lease
    # (forward.N.bytes_* count only the splice path's relays, so the bytes
    # are the backend's: the download's guest -> host share is its
    # requests).
    tc.assertGreaterEqual(counters.get("forward.1.accepted", 0), 1, counters)
    tc.assertEqual(counters.get("forward.1.failed", -1), 0, counters)
    tc.assertGreaterEqual(
        counters.get("backend.tcp_inbound_established", 0), 1, counters)
    tc.assertGreaterEqual(
        counters.get("backend.tcp_bytes_guest_to_host", 0), SIZE, counters)


def report(results):
    """The figures of each run side by side, a column per backend."""
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
    rows.append(("backend CPU s, download",
                 *[f(v, "%.2f") for v in get("cpu_download")]))
    rows.append(("backend CPU s, upload",
                 *[f(v, "%.2f") for v in get("cpu_upload")]))
    rows.append(("backend CPU s per GB moved",
                 *[f(v, "%.1f") for v in get("cpu_s_per_gb")]))
    rows.append(("guest TSO (ethtool -k)",
                 *[(r.get("offload") or {}).get("tso", "-")
                   for r in results.values()]))
    rows.append(("SLAAC address", *[(r.get("slaac") or {}).get("addr", "-")
                                   for r in results.values()]))
    rows.append(("DNS answer", *[(r.get("dns") or {}).get("addr", "-")
                                for r in results.values()]))
    rows.append(("MTU from DHCP", *[(r.get("lease") or {}).get("mtu", "-")
                                   for r in results.values()]))
    w = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return "VM guest results:\n" + "\n".join(
        "  ".join(str(c).ljust(w[i]) for i, c in enumerate(r)) for r in rows)
