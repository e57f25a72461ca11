"""netstackd's DNS forwarder and the host's resolver, with real peers
(issue 30, items 16 and 18; review 2026-12-06, finding 17).

netstackd runs in H (BackendTopology: H has only lo and a veth into an
empty sink namespace, and no default route; asserted before each start),
as `netstackd --dns-upstream 10.255.255.53 -- CMD`. 10.255.255.53 is
nowhere at first: H has no route to it, as an offline laptop or a VPN not
yet up has none to its resolver. netstackd must start all the same and
answer the guest's queries SERVFAIL; once the test puts 10.255.255.53 on
H's lo and runs dnsmasq there, the same netstackd answers them. dnsmasq
also holds a TXT answer too large for a 512-byte UDP answer: over UDP it
comes back truncated (TC=1), over TCP whole, since a TCP query goes
upstream over TCP.

The guest (CMD, in the sandbox netstackd makes) is a Python script that
asks 10.0.2.3 by hand, so nothing retries or caches behind the test's
back. Needs root, dnsmasq, unshare.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

from tests.backend.backend_topology import BackendTopology
from tests.interop import interop_util as iu

UPSTREAM = "10.255.255.53"
BACK = "198.51.100.7"  # what dnsmasq answers for back.test
TXT = ["t%d" % i + "x" * 240 for i in range(8)]  # about 2 KB of TXT

# argv: the file to create once the first answers came, the file to wait
# for before asking again. Prints one line per answer; exits 0 when every
# answer is what it should be, else with a line that says which was not.
GUEST = textwrap.dedent(r"""
    import os, socket, struct, sys, time
    ready, go = sys.argv[1], sys.argv[2]

    def query(qid, name, qtype):
        q = struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0)
        for label in name.split("."):
            q += bytes([len(label)]) + label.encode()
        return q + b"\0" + struct.pack("!HH", qtype, 1)

    def udp(q):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(4)
        s.sendto(q, ("10.0.2.3", 53))
        return s.recv(65535)

    def tcp(q):
        s = socket.create_connection(("10.0.2.3", 53), timeout=4)
        s.sendall(struct.pack("!H", len(q)) + q)
        buf = b""
        while len(buf) < 2 or len(buf) < 2 + struct.unpack("!H", buf[:2])[0]:
            chunk = s.recv(65536)
            if not chunk:
                raise SystemExit("tcp: closed after %d bytes" % len(buf))
            buf += chunk
        return buf[2:]

    def ask(how, qid, name, qtype):
        q = query(qid, name, qtype)
        a = how(q)
        qid_, flags, qd, an = struct.unpack("!HHHH", a[:8])
        tc, rcode = (flags >> 9) & 1, flags & 0xf
        print(how.__name__, name, "id", hex(qid_), "rcode", rcode, "tc", tc,
              "answers", an, "bytes", len(a), flush=True)
        if qid_ != qid or qd != 1 or a[12:len(q)] != q[12:]:
            raise SystemExit("not the answer to our query")
        return rcode, tc, an, a

    # No upstream can be reached: SERVFAIL at once, over UDP and TCP.
    for how in (udp, tcp):
        if ask(how, 0x1111, "back.test", 1)[0] != 2:
            raise SystemExit(how.__name__ + ": not SERVFAIL")
    open(ready, "w").close()
    deadline = time.time() + 30
    while not os.path.exists(go):
        if time.time() > deadline:
            raise SystemExit("no go")
        time.sleep(0.05)
    # The resolver is there now.
    rcode, tc, an, a = ask(udp, 0x2222, "back.test", 1)
    if rcode != 0 or an != 1 or a[-4:] != socket.inet_aton("@BACK@"):
        raise SystemExit("udp: not answered")
    rcode, tc, an, a = ask(udp, 0x3333, "big.test", 16)
    if tc != 1:
        raise SystemExit("udp: the large answer was not truncated")
    rcode, tc, an, a = ask(tcp, 0x4444, "big.test", 16)
    if rcode != 0 or tc != 0 or an != @TXT@:
        raise SystemExit("tcp: the large answer did not come whole")
    print("guest: all answered", flush=True)
""").replace("@BACK@", BACK).replace("@TXT@", str(len(TXT)))


class DnsUpstreamTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root")
        for tool in ("dnsmasq", "unshare"):
            if not iu.have(tool):
                raise unittest.SkipTest(f"needs {tool}")
        cls.topo = BackendTopology()
        cls.tmp = tempfile.mkdtemp(prefix="nst-dnsup-")
        os.chmod(cls.tmp, 0o777)
        try:
            cls.topo.setup_host()
        except BaseException:
            cls.topo.close()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.topo.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def netstackd(self, *cmd):
        return self.topo.sandbox_args("--", *cmd, dns_upstream=UPSTREAM)

    def test_1_starts_while_no_upstream_can_be_reached(self):
        # It exited 1: "connect 10.255.255.53:53: Network is unreachable".
        routes = iu.run(*self.topo.in_ns(self.topo.h, "ip", "route", "get",
                                         UPSTREAM), check=False)
        self.assertNotEqual(routes.returncode, 0,
                            f"H has a route to {UPSTREAM}: {routes.stdout}")
        p = subprocess.run(self.netstackd("true"), capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stderr, "", p.stderr)

    def test_2_servfail_until_the_resolver_is_there_then_answers(self):
        ready = os.path.join(self.tmp, "ready")
        go = os.path.join(self.tmp, "go")
        script = os.path.join(self.tmp, "guest.py")
        with open(script, "w") as f:
            f.write(GUEST)
        os.chmod(script, 0o644)
        nd = subprocess.Popen(
            self.netstackd(sys.executable, script, ready, go),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            ok = iu.wait_for(lambda: os.path.exists(ready) or
                             nd.poll() is not None, timeout=30)
            self.assertTrue(ok and nd.poll() is None,
                            "the guest's first queries: " + self.out(nd))
            # The resolver comes up: its address on H's lo, dnsmasq on it.
            h = self.topo.h
            iu.run(*self.topo.in_ns(h, "ip", "addr", "add", f"{UPSTREAM}/32",
                                    "dev", "lo"))
            self.topo.spawn(
                h, "dnsmasq", "--keep-in-foreground", "--no-resolv",
                "--no-hosts", "--no-poll", "--bind-interfaces",
                f"--listen-address={UPSTREAM}", "--port=53",
                f"--address=/back.test/{BACK}",
                *[f"--txt-record=big.test,{t}" for t in TXT],
                f"--pid-file={self.tmp}/dnsmasq.pid", "--user=root")
            up = iu.wait_for(lambda: iu.run(*self.topo.in_ns(
                h, "ss", "-ltnH", "src", f"{UPSTREAM}:53")).stdout.strip() != "",
                timeout=10)
            self.assertTrue(up, "dnsmasq did not come up")
            open(go, "w").close()
            out, err = nd.communicate(timeout=60)
        finally:
            if nd.poll() is None:
                nd.kill()
                nd.communicate()
        print(out, err, sep="\n", file=sys.stderr)
        self.assertEqual(nd.returncode, 0, out + err)
        self.assertIn("guest: all answered", out)
        # Said once when no upstream could be reached, once when it could.
        lines = err.strip().splitlines()
        self.assertEqual(len(lines), 2, err)
        self.assertIn(f"no DNS upstream can be reached ({UPSTREAM}:53", lines[0])
        self.assertIn(f"DNS upstream {UPSTREAM}:53 reachable again", lines[1])

    @staticmethod
    def out(p):
        if p.poll() is None:
            return "(still running)"
        out, err = p.communicate()
        return out + err


if __name__ == "__main__":
    unittest.main(verbosity=2)
