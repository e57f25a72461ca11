#!/usr/bin/env python3
"""Real clients configure themselves from the backend's guest services.

In a namespace this test makes, a TAP is attached to guest_config_driver
(a Stack plus netstack/backend's GuestConfigServices, nothing else), and
clients nobody here wrote take their configuration from it:
  - busybox udhcpc: 10.0.2.100/24, router 10.0.2.2, DNS 10.0.2.3, MTU and
    lease time, through DISCOVER/OFFER/REQUEST/ACK (replies unicast to
    chaddr, and with -B broadcast); a ping to the gateway over the
    configured address; the RELEASE it sends on SIGTERM frees the lease;
  - the kernel's SLAAC (accept_ra): an fd00::/64 address, a default route
    via our link-local address, and the RA's MTU (smaller than the link's,
    so it is visibly the RA's); a ping to fd00::2;
  - rdisc6 (ndisc6) shows the RA's RDNSS fd00::3 and prefix flags;
  - dhclient -6 -S (isc-dhcp-client, stateless) gets DNS fd00::3 from the
    DHCPv6 server.
The namespace holds only lo and the TAP, whose other end is our driver:
nothing can leave the machine. Everything is torn down even when a step
fails. Needs root. rdisc6 and dhclient are skipped (and say so) when not
installed; busybox is required (tools/dev/install-deps installs all).
"""
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

RUNFILES = os.environ.get("TEST_SRCDIR", "")
WORKSPACE = os.environ.get("TEST_WORKSPACE", "netstack")
DRIVER = os.path.join(RUNFILES, WORKSPACE,
                      "tests/backend/guest_config_driver")
TAP = "gctap"
LINK_MTU = 65000   # the kernel's side of the TAP
PLAN_MTU = 9000    # what the driver announces (DHCP option 26, RA MTU)


def run(*cmd, check=True, timeout=60):
    return subprocess.run(list(cmd), check=check, capture_output=True,
                          text=True, timeout=timeout)


class Guest:
    """A namespace with a TAP, and the driver on it; close() undoes all."""

    def __init__(self, test_name):
        self.ns = f"nst-gc-{os.getpid()}-{test_name}"[:40]
        self.proc = None
        self.tmp = tempfile.mkdtemp(prefix="nst-gc-")
        self.log_path = os.path.join(self.tmp, "driver.log")
        self.made_ns = False

    def nsexec(self, *cmd, **kw):
        return run("ip", "netns", "exec", self.ns, *cmd, **kw)

    def setup(self):
        run("ip", "netns", "add", self.ns)
        self.made_ns = True
        run("ip", "-n", self.ns, "link", "set", "lo", "up")
        run("ip", "-n", self.ns, "tuntap", "add", "dev", TAP, "mode", "tap")
        run("ip", "-n", self.ns, "link", "set", TAP, "mtu", str(LINK_MTU))
        for key, value in (("accept_ra", 1), ("autoconf", 1),
                           ("accept_ra_mtu", 1), ("forwarding", 0)):
            self.nsexec("sysctl", "-q", "-w",
                        f"net.ipv6.conf.{TAP}.{key}={value}")
        # Nothing leaves the machine: only lo and our TAP, no routes.
        links = re.findall(r"^\d+: ([^:@]+)", run(
            "ip", "-n", self.ns, "-o", "link").stdout, re.M)
        assert sorted(links) == sorted(["lo", TAP]), links
        assert run("ip", "-n", self.ns, "route").stdout.strip() == ""
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [DRIVER, f"--tap={TAP}", f"--netns={self.ns}",
             f"--mtu={PLAN_MTU}"], stdout=self.log, stderr=self.log)
        deadline = time.time() + 10
        while "running on" not in self.read_log():
            if self.proc.poll() is not None or time.time() > deadline:
                raise AssertionError(f"driver did not start: {self.read_log()}")
            time.sleep(0.05)
        run("ip", "-n", self.ns, "link", "set", TAP, "up")

    def wait_link_local(self):
        """Until the kernel's link-local address is out of DAD."""
        deadline = time.time() + 10
        while True:
            out = run("ip", "-n", self.ns, "-6", "addr", "show", TAP,
                      "scope", "link").stdout
            if "inet6 fe80::" in out and "tentative" not in out:
                return
            if time.time() > deadline:
                raise AssertionError(f"link-local address stays tentative: {out}")
            time.sleep(0.1)

    def read_log(self):
        with open(self.log_path) as f:
            return f.read()

    def counters(self):
        """The driver's counters (SIGUSR1), as a dict."""
        before = self.read_log().count("counters (SIGUSR1)")
        self.proc.send_signal(signal.SIGUSR1)
        deadline = time.time() + 5
        while self.read_log().count("counters (SIGUSR1)") == before:
            if time.time() > deadline:
                raise AssertionError("no counters: " + self.read_log())
            time.sleep(0.05)
        time.sleep(0.1)
        text = self.read_log().rsplit("counters (SIGUSR1):", 1)[1]
        out = {}
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1].isdigit():
                out[parts[0]] = int(parts[1])
        return out

    def close(self):
        try:
            if self.proc and self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        finally:
            if self.proc:
                self.log.close()
            if self.made_ns:
                run("ip", "netns", "del", self.ns, check=False)
            shutil.rmtree(self.tmp, ignore_errors=True)


class GuestConfigInterop(unittest.TestCase):
    def setUp(self):
        self.assertEqual(os.geteuid(), 0, "this test needs root")
        self.assertTrue(shutil.which("busybox"),
                        "busybox missing: run tools/dev/install-deps")
        self.guest = Guest(self._testMethodName.split("_")[-1])
        self.addCleanup(self.guest.close)
        self.guest.setup()

    def fail_with_log(self, msg):
        self.fail(f"{msg}\n--- driver log ---\n{self.guest.read_log()}")

    def test_udhcpc(self):
        g = self.guest
        env_dir = os.path.join(g.tmp, "env")
        os.mkdir(env_dir)
        script = os.path.join(g.tmp, "udhcpc.sh")
        with open(script, "w") as f:
            f.write(f"""#!/bin/sh
env > {env_dir}/$1
if [ "$1" = bound ]; then
  ip addr add $ip/$mask dev $interface
  ip route add default via $router dev $interface
fi
""")
        os.chmod(script, 0o755)
        # In the foreground of its own process, releasing on exit (-R).
        client = subprocess.Popen(
            ["ip", "netns", "exec", g.ns, "busybox", "udhcpc", "-i", TAP,
             "-f", "-R", "-t", "5", "-T", "1", "-s", script],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        def stop_client():
            if client.poll() is None:
                client.kill()
            client.communicate()
        self.addCleanup(stop_client)
        bound = os.path.join(env_dir, "bound")
        deadline = time.time() + 20
        while not os.path.exists(bound) or "router=" not in open(bound).read():
            if client.poll() is not None or time.time() > deadline:
                client.kill()
                self.fail_with_log(f"udhcpc got no lease: "
                                   f"{client.communicate()[0]}")
            time.sleep(0.05)
        time.sleep(0.2)  # the script's ip commands
        env = {}
        with open(os.path.join(env_dir, "bound")) as f:
            for line in f:
                k, _, v = line.rstrip("\n").partition("=")
                env[k] = v
        self.assertEqual(env["ip"], "10.0.2.100")
        self.assertEqual(env["mask"], "24")
        self.assertEqual(env["router"], "10.0.2.2")
        self.assertEqual(env["dns"].strip(), "10.0.2.3")
        self.assertEqual(env["serverid"], "10.0.2.2")
        self.assertEqual(env["mtu"], str(PLAN_MTU))
        self.assertEqual(env["lease"], "86400")
        addrs = run("ip", "-n", g.ns, "-4", "addr", "show", TAP).stdout
        self.assertIn("inet 10.0.2.100/24", addrs)
        self.assertIn("default via 10.0.2.2",
                      run("ip", "-n", g.ns, "route").stdout)
        ping = g.nsexec("ping", "-c", "2", "-W", "2", "10.0.2.2", check=False)
        self.assertEqual(ping.returncode, 0, ping.stdout + ping.stderr)
        c = g.counters()
        self.assertEqual(c.get("dhcp4.received.discover"), 1, c)
        self.assertEqual(c.get("dhcp4.sent.offer"), 1, c)
        self.assertEqual(c.get("dhcp4.received.request"), 1, c)
        self.assertEqual(c.get("dhcp4.sent.ack"), 1, c)
        self.assertFalse([k for k in c if k.startswith("dhcp4.drop.")], c)
        # On SIGTERM the real client sends a RELEASE, which frees the lease.
        client.send_signal(signal.SIGTERM)
        client.wait(timeout=10)
        deadline = time.time() + 5
        while g.counters().get("dhcp4.leases_released") != 1:
            if time.time() > deadline:
                self.fail_with_log("no RELEASE counted")
            time.sleep(0.1)
        self.assertEqual(g.counters().get("dhcp4.received.release"), 1)

    def test_udhcpcbroadcast(self):
        # -B sets the broadcast flag: OFFER and ACK go to 255.255.255.255.
        g = self.guest
        script = os.path.join(g.tmp, "noop.sh")
        with open(script, "w") as f:
            f.write(f"#!/bin/sh\nenv > {g.tmp}/env.$1\n")
        os.chmod(script, 0o755)
        proc = g.nsexec("busybox", "udhcpc", "-i", TAP, "-f", "-q", "-n",
                        "-B", "-t", "5", "-T", "1", "-s", script,
                        check=False, timeout=30)
        if proc.returncode != 0:
            self.fail_with_log(f"udhcpc -B failed: {proc.stdout}{proc.stderr}")
        with open(os.path.join(g.tmp, "env.bound")) as f:
            self.assertIn("ip=10.0.2.100\n", f.read())
        c = g.counters()
        self.assertEqual(c.get("dhcp4.sent.ack"), 1, c)

    def test_slaac(self):
        g = self.guest
        deadline = time.time() + 15
        addr = None
        while time.time() < deadline:
            out = run("ip", "-n", g.ns, "-6", "addr", "show", TAP).stdout
            m = re.search(r"inet6 (fd00::[0-9a-f:]+)/64 scope global "
                          r"(?!.*tentative)(.*)", out)
            if m:
                addr = m.group(1)
                break
            time.sleep(0.2)
        if addr is None:
            self.fail_with_log(f"no SLAAC address: {out}")
        routes = run("ip", "-n", g.ns, "-6", "route").stdout
        self.assertRegex(routes, r"default via fe80::[0-9a-f:]+ dev gctap "
                                 r"proto ra")
        mtu = g.nsexec("cat", f"/proc/sys/net/ipv6/conf/{TAP}/mtu").stdout
        self.assertEqual(mtu.strip(), str(PLAN_MTU))
        ping = g.nsexec("ping", "-6", "-c", "2", "-W", "2", "fd00::2",
                        check=False)
        self.assertEqual(ping.returncode, 0, ping.stdout + ping.stderr)
        c = g.counters()
        self.assertGreaterEqual(c.get("ra.rs_received", 0), 1, c)
        self.assertGreaterEqual(c.get("ra.ra_sent_solicited", 0) +
                                c.get("ra.ra_sent_unsolicited", 0), 1, c)

    def test_rdisc6(self):
        if not shutil.which("rdisc6"):
            self.skipTest("rdisc6 (ndisc6) not installed")
        g = self.guest
        g.wait_link_local()
        out = g.nsexec("rdisc6", "-1", "-w", "4000", TAP, check=False,
                       timeout=30)
        text = out.stdout + out.stderr
        self.assertIn("Recursive DNS server     : fd00::3", text, text)
        self.assertRegex(text, r"Prefix\s+: fd00::/64")
        self.assertRegex(text, r"On-link\s+:\s+Yes")
        self.assertRegex(text, r"Autonomous address conf.:\s+Yes")
        self.assertRegex(text, rf"MTU\s+:\s+{PLAN_MTU} bytes")
        self.assertRegex(text, r"Stateful other conf.\s+:\s+Yes")

    def test_dhclient6(self):
        if not shutil.which("dhclient"):
            self.skipTest("dhclient (isc-dhcp-client) not installed")
        g = self.guest
        g.wait_link_local()  # dhclient needs a usable one
        env_file = os.path.join(g.tmp, "dhclient6.env")
        script = os.path.join(g.tmp, "dhclient.sh")
        with open(script, "w") as f:
            f.write(f"#!/bin/sh\nenv >> {env_file}\necho ---- >> {env_file}\n")
        os.chmod(script, 0o755)
        proc = g.nsexec("timeout", "20", "dhclient", "-6", "-S", "-1", "-v",
                        "-sf", script, "-lf", os.path.join(g.tmp, "lease6"),
                        "-pf", os.path.join(g.tmp, "pid6"), TAP, check=False,
                        timeout=30)
        pidfile = os.path.join(g.tmp, "pid6")
        if os.path.exists(pidfile):  # it forks after success: stop it
            try:
                os.kill(int(open(pidfile).read().strip()), signal.SIGTERM)
            except (ValueError, ProcessLookupError):
                pass
        text = open(env_file).read() if os.path.exists(env_file) else ""
        if "new_dhcp6_name_servers=fd00::3" not in text:
            self.fail_with_log(f"dhclient got no DNS: {proc.stdout}"
                               f"{proc.stderr}\n{text}")
        c = g.counters()
        self.assertGreaterEqual(c.get("dhcp6.received.information_request", 0),
                                1, c)
        self.assertGreaterEqual(c.get("dhcp6.sent.reply", 0), 1, c)


if __name__ == "__main__":
    unittest.main()
