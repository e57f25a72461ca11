"""The egress policy tests' world (issue #33).

  G: the guest, a network namespace netstackd serves (`netstackd --netns G`
     makes tap0 there with 10.0.2.100/24, fd00::100/64 and default routes).
     Its resolv.conf (/etc/netns/G/resolv.conf, which `ip netns exec`
     mounts) names 10.0.2.3, netstackd's DNS forwarder.
  H: BackendTopology's host namespace (lo and a veth into an empty sink
     namespace, no default route; asserted before each netstackd start).
     netstackd runs here. H's veth carries the addresses of NAMES below and
     a few more, policy_servers.py serves them all, and dnsmasq on
     127.0.0.1 (netstackd's --dns-upstream) answers NAMES. It also listens
     on RESOLVER and RESOLVER6 (the stand-ins for a public resolver the
     guest should not reach around the forwarder).

close() removes the namespaces, the resolv.conf and every process, also
after a failure. Needs root, dnsmasq.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from tests.backend.backend_topology import BackendTopology
from tests.interop import interop_util as iu

HERE = os.path.dirname(os.path.abspath(__file__))
SERVERS = os.path.join(HERE, "policy_servers.py")
PROBE = os.path.join(HERE, "guest_probe.py")

PIN_TTL = 2  # pin.test's TTL (seconds); the pin lasts it plus 60 s grace
# name -> (IPv4 addresses, IPv6 addresses) that dnsmasq answers.
NAMES = {
    "allowed.test": (["198.51.100.10"], ["2001:db8:1::10"]),
    "keep.test": (["198.51.100.11"], ["2001:db8:1::11"]),
    "denied.test": (["198.51.100.20"], ["2001:db8:1::20"]),
    "unlisted.test": (["198.51.100.21"], ["2001:db8:1::21"]),
    "mixed.test": (["198.51.100.22"], []),
    "wild.test": (["198.51.100.30"], ["2001:db8:1::30"]),
    "sub.wild.test": (["198.51.100.31"], ["2001:db8:1::31"]),
    "a.b.wild.test": (["198.51.100.32"], []),
    "ports.test": (["198.51.100.40"], ["2001:db8:1::40"]),
    # Rebinding: an allowed name that answers loopback and private
    # addresses beside a public one.
    "rebind.test": (["127.0.0.1", "10.1.2.3", "198.51.100.50"],
                    ["::1", "fd12::3", "2001:db8:1::50"]),
    "target.test": (["198.51.100.60"], ["2001:db8:1::60"]),
    "pin.test": (["198.51.100.80"], []),
}
CNAMES = {"cname.test": "target.test"}
RESOLVER = "198.51.100.70"
RESOLVER6 = "2001:db8:1::70"
METADATA = ("169.254.169.254", "fd00:ec2::254")
# NAT64 forms of a denied address and of the metadata address, put on H so
# that, unrefused, they would be reached (the open-mode control).
NAT64_DENIED = "64:ff9b::c633:6414"    # 198.51.100.20
NAT64_METADATA = "64:ff9b::a9fe:a9fe"  # 169.254.169.254
EXTRA_ADDRESSES = ["10.1.2.3", "fd12::3", RESOLVER, RESOLVER6, *METADATA, NAT64_DENIED,
                   NAT64_METADATA]


def host_addresses():
    v4, v6 = set(), set()
    for a4, a6 in NAMES.values():
        v4.update(a for a in a4 if not a.startswith("127."))
        v6.update(a for a in a6 if a != "::1")
    for a in EXTRA_ADDRESSES:
        (v6 if ":" in a else v4).add(a)
    return sorted(v4), sorted(v6)


class PolicyEnv:
    def __init__(self):
        self.topo = BackendTopology()
        self.g = f"nstpol-{os.getpid()}-g"
        self.tmp = tempfile.mkdtemp(prefix="nst-policy-")
        os.chmod(self.tmp, 0o755)
        self.etc = f"/etc/netns/{self.g}"
        self.nd = None
        self.nd_log = None
        self.made_etc_netns = not os.path.exists("/etc/netns")

    def setup(self):
        topo, h = self.topo, self.topo.h
        topo.setup_host()
        v4, v6 = host_addresses()
        for a in v4:
            iu.run("ip", "-n", h, "addr", "add", f"{a}/32", "dev", "hveth")
        for a in v6:
            iu.run("ip", "-n", h, "addr", "add", f"{a}/128", "dev", "hveth",
                   "nodad")
        # netstackd's ICMP echo goes out on a ping socket.
        iu.run(*topo.in_ns(h, "sysctl", "-q", "-w",
                           "net.ipv4.ping_group_range=0 2147483647"))
        topo.add_ns(self.g)
        os.makedirs(self.etc, exist_ok=True)
        with open(os.path.join(self.etc, "resolv.conf"), "w") as f:
            f.write("nameserver 10.0.2.3\noptions timeout:2 attempts:1\n")
        dnsmasq = ["dnsmasq", "--keep-in-foreground", "--no-resolv",
                   "--no-hosts", "--no-poll", "--bind-interfaces",
                   "--listen-address=127.0.0.1",
                   f"--listen-address={RESOLVER}",
                   f"--listen-address={RESOLVER6}", "--port=53",
                   "--local-ttl=30", f"--pid-file={self.tmp}/dnsmasq.pid",
                   "--user=root"]
        for name, (a4, a6) in NAMES.items():
            ttl = PIN_TTL if name == "pin.test" else 30
            for a in a4 + a6:
                dnsmasq.append(f"--host-record={name},{a},{ttl}")
        for name, target in CNAMES.items():
            dnsmasq.append(f"--cname={name},{target},30")
        topo.spawn(h, *dnsmasq)
        topo.spawn(h, sys.executable, SERVERS, *v4, *v6)
        ok = iu.wait_for(lambda: self.h_ok(), timeout=10)
        assert ok, "dnsmasq or the servers did not come up in H"

    def h_ok(self):
        h = self.topo.h
        dig = iu.run(*self.topo.in_ns(h, "dig", "+short", "+time=1",
                                      "+tries=1", "@127.0.0.1",
                                      "allowed.test"), check=False)
        curl = iu.run(*self.topo.in_ns(h, "curl", "-s", "--max-time", "2",
                                       "http://198.51.100.10/"), check=False)
        return (dig.stdout.strip() == "198.51.100.10"
                and curl.stdout.strip() == "ok 198.51.100.10")

    def start(self, *flags, api=None, flow_log=None):
        """netstackd --netns G in H with `flags`; returns once G's network
        is up (--ready-fd)."""
        assert self.nd is None
        self.topo.assert_isolated()
        args = [iu.NETSTACKD, "--netns", self.g, "--dns-upstream",
                "127.0.0.1", *flags]
        if api:
            args += ["--forward-api", api]
        if flow_log:
            args += ["--flow-log", flow_log]
        r, w = os.pipe()
        self.nd_log = os.path.join(self.tmp, f"netstackd-{time.time():.3f}.log")
        with open(self.nd_log, "w") as log:
            self.nd = subprocess.Popen(
                self.topo.in_ns(self.topo.h, *args, "--ready-fd", str(w)),
                pass_fds=(w,), stdout=log, stderr=log)
        os.close(w)
        ready = os.read(r, 1)
        os.close(r)
        assert ready == b"1", f"netstackd did not come up: {self.log()}"
        # The guest's IPv6 default route needs fd00::2 resolved (DAD).
        iu.wait_for(lambda: self.g_run("ping", "-6", "-c1", "-W1",
                                       "fd00::2").returncode == 0, 10)
        return self.nd

    def stop(self):
        if self.nd is not None:
            if self.nd.poll() is None:
                self.nd.terminate()
                try:
                    self.nd.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.nd.kill()
                    self.nd.wait()
            self.nd = None

    def log(self):
        if not self.nd_log or not os.path.exists(self.nd_log):
            return ""
        with open(self.nd_log) as f:
            return f.read()

    def counters(self):
        """netstackd's counters (SIGUSR1), parsed."""
        before = self.log().count("counters (SIGUSR1):")
        self.nd.send_signal(10)
        iu.wait_for(lambda: self.log().count("counters (SIGUSR1):") > before,
                    5, 0.02)
        time.sleep(0.05)
        block = self.log().split("counters (SIGUSR1):\n")[before + 1]
        return iu.parse_counters(block.split("\nnetstackd:")[0])

    def g_cmd(self, *cmd):
        return self.topo.in_ns(self.g, *cmd)

    def g_run(self, *cmd, timeout=30):
        return iu.run(*self.g_cmd(*cmd), check=False, timeout=timeout)

    def probe(self, *args, timeout=30):
        p = self.g_run(sys.executable, PROBE, *map(str, args),
                       timeout=timeout)
        assert p.returncode == 0, f"guest_probe {args}: {p.stdout}{p.stderr}"
        return json.loads(p.stdout.strip().splitlines()[-1])

    def curl(self, url, *extra):
        """curl from G: (exit code, body, seconds from start to the end of
        the connect attempt or the transfer, as curl measures)."""
        p = self.g_run("curl", "-s", "-g", "--max-time", "5", "-o", "-",
                       "-w", "\n%{time_total}", *extra, url)
        body, _, t = p.stdout.rpartition("\n")
        return p.returncode, body.strip(), float(t or "nan")

    def dig(self, name, qtype="A", server="10.0.2.3", *extra):
        """dig from G: (status, [answer records' data], query ms)."""
        p = self.g_run("dig", "+time=2", "+tries=1", f"@{server}", name, qtype,
                       *extra)
        status, answers, ms = None, [], None
        section = None
        for line in p.stdout.splitlines():
            if "status:" in line:
                status = line.split("status:")[1].split(",")[0].strip()
            elif line.startswith(";; ANSWER SECTION"):
                section = "answer"
            elif line.startswith(";;") or not line.strip():
                section = None
                if line.startswith(";; Query time:"):
                    ms = int(line.split(":")[1].split()[0])
            elif section == "answer" and not line.startswith(";"):
                parts = line.split()
                answers.append((parts[3], parts[4]))
        return status, answers, ms, p.stdout + p.stderr

    def close(self):
        self.stop()
        self.topo.close()
        shutil.rmtree(self.etc, ignore_errors=True)
        if self.made_etc_netns:
            try:
                os.rmdir("/etc/netns")
            except OSError:
                pass  # someone else's files came meanwhile
        shutil.rmtree(self.tmp, ignore_errors=True)
