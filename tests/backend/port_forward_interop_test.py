"""netstackd's port forwards (-t) into a sandbox (netstackd -- CMD), on both
paths, against curl and Python clients in H.

netstackd runs in H (BackendTopology: only lo and a veth into an empty
sink namespace, no default route; asserted before each start), so its
listeners and the clients stay inside H. CMD is forward_guest_server.py:
HTTP on the guest's [::]:8080 and echo servers bound to the guest's
127.0.0.1:9000 and :9001, noting each client's address.

  spliced (the default for a namespace guest): v4, v6 and a UNIX socket
    reach the guest's loopback, the 127.0.0.1-only servers too, through a
    range; the bytes are counted as spliced and no backend flow is made.
  --forward-path=stack: the same HTTP through netstack's TCP to the
    guest's lease; the guest sees H's veth address as the client; the
    127.0.0.1-only server is not reachable that way (refused, counted).
  -u: datagrams of both families echoed through the guest's loopback,
    the largest one too; a client flow idle past --udp-timeout closes and
    the next datagram opens a new one; past --max-udp-flows a new client
    evicts the least recently active flow, counted.
  --forward-api: while a rate-limited download runs through one forward,
    a TCP and a UDP forward are added, used, listed and removed (the port
    refuses again), and the download ends intact.
  errors: a port in use and a bad spec, named, before CMD runs.
"""
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest

from tests.backend.backend_topology import H4, BackendTopology
from tests.interop import interop_util as iu

GUEST = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                     "forward_guest_server.py")
PAYLOAD = 8 << 20
ECHO = 1 << 20


class PortForwardTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root")
        for tool in ("curl", "unshare"):
            if not iu.have(tool):
                raise unittest.SkipTest(f"needs {tool}")
        cls.topo = BackendTopology()
        cls.tmp = tempfile.mkdtemp(prefix="nst-fwd-")
        try:
            cls.topo.setup()
            cls.file = os.path.join(cls.tmp, "file")
            data = os.urandom(PAYLOAD)
            with open(cls.file, "wb") as f:
                f.write(data)
            cls.sha = hashlib.sha256(data).hexdigest()
        except BaseException:
            cls.topo.close()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.topo.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def start(self, *flags):
        """netstackd FLAGS -- the guest servers; returns (process, the
        clients file, the stderr file) once the guest says ready."""
        clients = os.path.join(self.tmp, f"clients.{time.monotonic_ns()}")
        err = open(os.path.join(self.tmp, f"err.{time.monotonic_ns()}"), "w+")
        cmd = self.topo.sandbox_args("--verbose", *flags, "--", sys.executable,
                                     GUEST, self.file, clients)
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err,
                             text=True)
        line = p.stdout.readline().strip()
        if line != "ready":
            p.kill()
            p.wait()
            err.seek(0)
            self.fail(f"the guest did not start: {line!r} {err.read()}")
        self.addCleanup(self.stop, p, err)
        return p, clients, err

    def stop(self, p, err):
        """SIGTERM to netstackd (passed on to CMD); its status and what it
        printed (the counters, at exit). Safe to call twice."""
        if err.closed:
            return p.returncode, ""
        if p.poll() is None:
            p.terminate()
        try:
            rc = p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = p.wait()
        p.stdout.close()
        err.seek(0)
        text = err.read()
        err.close()
        return rc, text

    def h(self, *cmd, check=True):
        return iu.run(*self.topo.in_ns(self.topo.h, *cmd), check=check)

    def curl_sha(self, *args):
        p = subprocess.run(self.topo.in_ns(self.topo.h, "curl", "-sS",
                                           "--max-time", "30", *args),
                           capture_output=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertEqual(len(p.stdout), PAYLOAD, f"{args}: short body")
        return hashlib.sha256(p.stdout).hexdigest()

    def echo(self, addr, port):
        """ECHO random bytes through addr:port from H; what came back.
        (A helper in H: this process is in the root namespace.)"""
        script = (
            "import os,socket,sys,hashlib\n"
            f"d=os.urandom({ECHO})\n"
            f"s=socket.create_connection(({addr!r},{port}),timeout=20)\n"
            "s.sendall(d);s.shutdown(socket.SHUT_WR)\n"
            "b=bytearray()\n"
            "while True:\n"
            "  x=s.recv(65536)\n"
            "  if not x: break\n"
            "  b+=x\n"
            "print(len(b), hashlib.sha256(d).hexdigest()==hashlib.sha256(b).hexdigest())\n")
        p = subprocess.run(self.topo.in_ns(self.topo.h, sys.executable, "-c",
                                           script),
                           capture_output=True, text=True, timeout=60)
        return p.returncode, p.stdout.strip(), p.stderr.strip()

    @staticmethod
    def clients(path):
        with open(path) as f:
            return [tuple(line.split()) for line in f.read().splitlines()]

    def test_spliced_both_families_unix_and_a_range(self):
        sock = os.path.join(self.tmp, "fwd.sock")
        p, clients, err = self.start("-t", "18080:8080",
                                     "-t", "127.0.0.1/18081-18082:9000",
                                     "-t", f"unix:{sock}:8080")
        t0 = time.monotonic()
        for url in ("http://127.0.0.1:18080/file", "http://[::1]:18080/file",
                    f"http://{H4}:18080/file"):
            self.assertEqual(self.curl_sha(url), self.sha, url)
        self.assertEqual(self.curl_sha("--unix-socket", sock,
                                       "http://guest/file"), self.sha)
        for port in (18081, 18082):
            self.assertEqual(self.echo("127.0.0.1", port),
                             (0, f"{ECHO} True", ""), port)
        dt = time.monotonic() - t0
        # The range is bound to 127.0.0.1 only.
        rc, _, e = self.echo(H4, 18081)
        self.assertNotEqual(rc, 0)
        self.assertIn("Connection refused", e)
        got = self.clients(clients)
        # The guest's loopback, of the client's family (a UNIX client:
        # IPv4), on every connection.
        self.assertEqual(sorted(got), sorted([
            ("8080", "::ffff:127.0.0.1"), ("8080", "::1"),
            ("8080", "::ffff:127.0.0.1"), ("8080", "::ffff:127.0.0.1"),
            ("9000", "127.0.0.1"), ("9001", "127.0.0.1")]))
        rc, text = self.stop(p, err)
        self.assertEqual(rc, 0, text)
        c = iu.parse_counters(text)
        print(f"  spliced: 4 downloads of {PAYLOAD >> 20} MiB and 2 echoes "
              f"of {ECHO >> 20} MiB in {dt:.2f} s", file=sys.stderr)
        self.assertEqual(c["forward.1.accepted"], 3)
        self.assertEqual(c["forward.2.accepted"], 2)
        self.assertEqual(c["forward.3.accepted"], 1)
        for i in (1, 2, 3):
            self.assertEqual(c[f"forward.{i}.failed"], 0)
            self.assertEqual(c[f"forward.{i}.active"], 0)
            self.assertEqual(c[f"forward.{i}.accept_errors"], 0)
            self.assertEqual(c[f"forward.{i}.spliced_bytes"],
                             c[f"forward.{i}.bytes_to_guest"] +
                             c[f"forward.{i}.bytes_from_guest"])
        self.assertGreaterEqual(c["forward.1.bytes_from_guest"], 3 * PAYLOAD)
        self.assertGreaterEqual(c["forward.3.bytes_from_guest"], PAYLOAD)
        self.assertEqual(c["forward.2.bytes_to_guest"], 2 * ECHO)
        self.assertEqual(c["forward.2.bytes_from_guest"], 2 * ECHO)
        # Never through the userspace TCP.
        self.assertEqual(c["backend.tcp_inbound_opened"], 0)
        self.assertEqual(c["backend.tcp_flows_opened"], 0)
        self.assertFalse(os.path.exists(sock), "the UNIX socket was left")

    def test_through_the_stack_the_guest_sees_the_client(self):
        p, clients, err = self.start("--forward-path=stack",
                                     "-t", "18080:8080", "-t", "18081:9000")
        t0 = time.monotonic()
        for url in (f"http://{H4}:18080/file", "http://127.0.0.1:18080/file",
                    "http://[::1]:18080/file"):
            self.assertEqual(self.curl_sha(url), self.sha, url)
        dt = time.monotonic() - t0
        # The guest's 127.0.0.1-only server is not on its lease address.
        rc, out, e = self.echo("127.0.0.1", 18081)
        self.assertNotEqual(out, f"{ECHO} True")
        got = sorted(self.clients(clients))
        gateway4 = "10.0.2.2"  # the plan's default gateway
        self.assertEqual(got, sorted([("8080", f"::ffff:{H4}"),
                                      ("8080", f"::ffff:{gateway4}"),
                                      ("8080", f"::ffff:{gateway4}")]))
        rc, text = self.stop(p, err)
        self.assertEqual(rc, 0, text)
        c = iu.parse_counters(text)
        print(f"  stack: 3 downloads of {PAYLOAD >> 20} MiB in {dt:.2f} s",
              file=sys.stderr)
        self.assertEqual(c["forward.1.accepted"], 3)
        self.assertEqual(c["forward.2.accepted"], 1)
        # The forward counts its flows' bytes too (not spliced).
        self.assertGreaterEqual(c["forward.1.bytes_from_guest"], 3 * PAYLOAD)
        self.assertGreater(c["forward.1.bytes_to_guest"], 0)
        self.assertEqual(c["forward.1.active"], 0)
        self.assertEqual(c["forward.1.spliced_bytes"], 0)
        self.assertEqual(c["backend.tcp_inbound_opened"], 4)
        self.assertEqual(c["backend.tcp_inbound_established"], 3)
        self.assertEqual(c["backend.tcp_inbound_refused"], 1)
        self.assertEqual(c["backend.tcp_end.connect_refused"], 1)
        self.assertGreaterEqual(c["backend.tcp_bytes_guest_to_host"],
                                3 * PAYLOAD)
        self.assertEqual(c["backend.tcp_flows_open"], 0)

    def udp_clients(self, *clients, count=100, size=1400, big=False):
        """From H, each (addr, port) client sends `count` datagrams of
        `size` random bytes (and one of 65,000 if `big`), one at a time,
        and waits for its echo (2 s). Returns, per client, the number of
        echoes that matched."""
        script = (
            "import os,socket,sys,json\n"
            f"clients={list(clients)!r}\n"
            "out=[]\n"
            "for addr,port in clients:\n"
            "  fam=socket.AF_INET6 if ':' in addr else socket.AF_INET\n"
            "  s=socket.socket(fam,socket.SOCK_DGRAM);s.settimeout(2)\n"
            "  s.connect((addr,port));ok=0\n"
            f"  sizes=[{size}]*{count}+([65000] if {big} else [])\n"
            "  for n in sizes:\n"
            "    d=os.urandom(n);s.send(d)\n"
            "    try:\n"
            "      ok+=s.recv(65536)==d\n"
            "    except (socket.timeout, ConnectionRefusedError):\n"
            "      pass\n"
            "  out.append(ok)\n"
            "print(json.dumps(out))\n")
        p = subprocess.run(self.topo.in_ns(self.topo.h, sys.executable, "-c",
                                           script),
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)

        return json.loads(p.stdout)

    def test_udp_both_families_idle_timeout_and_the_flow_limit(self):
        p, clients, err = self.start("-u", "19100:9100", "--udp-timeout=1s")
        self.assertEqual(self.udp_clients(("127.0.0.1", 19100),
                                          ("::1", 19100), (H4, 19100),
                                          big=True), [101, 101, 101])
        # Each client socket above was one flow; idle past 1 s they close.
        time.sleep(2.5)
        self.assertEqual(self.udp_clients(("127.0.0.1", 19100), count=10),
                         [10])
        got = sorted(self.clients(clients))
        self.assertEqual(got, sorted([
            ("udp9100", "127.0.0.1"), ("udp9100", "127.0.0.1"),
            ("udp9100", "::1"), ("udp9100", "127.0.0.1")]))
        rc, text = self.stop(p, err)
        self.assertEqual(rc, 0, text)
        c = iu.parse_counters(text)
        self.assertEqual(c["forward.1.accepted"], 4)
        self.assertEqual(c["forward.1.udp_expired"], 3)
        self.assertEqual(c["forward.1.datagrams_to_guest"], 3 * 101 + 10)
        self.assertEqual(c["forward.1.datagrams_from_guest"], 3 * 101 + 10)
        self.assertEqual(c["forward.1.bytes_to_guest"],
                         3 * (100 * 1400 + 65000) + 10 * 1400)
        self.assertEqual(c["forward.1.bytes_from_guest"],
                         c["forward.1.bytes_to_guest"])
        self.assertEqual(c["forward.1.udp_dropped"], 0)
        self.assertEqual(c["forward.1.udp_refused_limit"], 0)
        self.assertEqual(c["forward.1.failed"], 0)
        # Never through the backend's guest-side UDP flows.
        self.assertEqual(c["backend.udp.opened"], 0)

        # Two client flows at most: the third client evicts the least
        # recently active (every flow is answered), and is echoed.
        p, clients, err = self.start("-u", "19100:9100",
                                     "--max-udp-flows=2")
        self.assertEqual(self.udp_clients(("127.0.0.1", 19100),
                                          ("::1", 19100), (H4, 19100),
                                          count=5), [5, 5, 5])
        rc, text = self.stop(p, err)
        self.assertEqual(rc, 0, text)
        c = iu.parse_counters(text)
        self.assertEqual(c["forward.1.accepted"], 3)
        self.assertEqual(c["forward.1.udp_refused_limit"], 0)
        self.assertEqual(c["forward.1.udp_evicted_replied"], 1)
        self.assertEqual(c["forward.1.datagrams_to_guest"], 15)

    def test_udp_through_the_stack_the_guest_sees_the_client(self):
        p, clients, err = self.start("--forward-path=stack", "--udp-timeout=1s",
                                     "-u", "19101:9101", "-u", "19100:9100")
        self.assertEqual(self.udp_clients(("127.0.0.1", 19101),
                                          ("::1", 19101), (H4, 19101),
                                          big=True), [101, 101, 101])
        time.sleep(2.5)
        self.assertEqual(self.udp_clients((H4, 19101), count=10), [10])
        # The guest's 127.0.0.1-only server is not on its lease address.
        self.assertEqual(self.udp_clients(("127.0.0.1", 19100), count=2), [0])
        got = sorted(set(self.clients(clients)))
        self.assertEqual(got, sorted([("udp9101", f"::ffff:{H4}"),
                                      ("udp9101", "::ffff:10.0.2.2")]))
        rc, text = self.stop(p, err)
        self.assertEqual(rc, 0, text)
        c = iu.parse_counters(text)
        self.assertEqual(c["forward.1.accepted"], 4)
        # The last one too, while the 127.0.0.1-only check waited.
        self.assertEqual(c["forward.1.udp_expired"], 4)
        self.assertEqual(c["forward.1.active"], 0)
        self.assertEqual(c["forward.1.datagrams_to_guest"], 3 * 101 + 10)
        self.assertEqual(c["forward.1.datagrams_from_guest"], 3 * 101 + 10)
        self.assertEqual(c["forward.1.bytes_from_guest"],
                         3 * (100 * 1400 + 65000) + 10 * 1400)
        self.assertEqual(c["forward.1.udp_dropped"], 0)
        self.assertEqual(c["forward.2.datagrams_to_guest"], 2)
        self.assertEqual(c["forward.2.datagrams_from_guest"], 0)
        # In the backend's flow table, in reverse.
        # 4 of forward 1's, and 2 of forward 2's (2 s apart, 1 s timeout).
        self.assertEqual(c["backend.udp.inbound.opened"], 6)
        self.assertEqual(c["backend.udp.datagrams_to_host"], 3 * 101 + 10)

    def api(self, path, request):
        """One request to the forward API; its answer."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(10)
            s.connect(path)
            s.sendall((json.dumps(request) + "\n").encode())
            line = s.makefile().readline()
        return json.loads(line)

    def test_forward_api_adds_and_removes_while_another_flows(self):
        path = os.path.join(self.tmp, "api.sock")
        p, clients, err = self.start("-t", "18080:8080", "--forward-api", path)
        # 8 MiB at 2 MiB/s: about 4 s on forward 1 while we work.
        dl = subprocess.Popen(self.topo.in_ns(
            self.topo.h, "curl", "-sS", "--max-time", "60", "--limit-rate",
            "2M", "http://127.0.0.1:18080/file"), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE)
        try:
            time.sleep(0.5)
            self.assertEqual(self.api(path, {"op": "add", "proto": "tcp",
                                             "spec": "127.0.0.1/18085:9000"}),
                             {"ok": True, "id": 2})
            self.assertEqual(self.api(path, {"op": "add", "proto": "udp",
                                             "spec": "19100-19101:9100"}),
                             {"ok": True, "id": 3})
            bad = self.api(path, {"op": "add", "proto": "tcp",
                                  "spec": "18080"})
            self.assertFalse(bad["ok"])
            self.assertIn("Address already in use", bad["error"])
            # After setup netstackd has no filesystem (docs/SECURITY.md):
            # a unix: forward could not bind its path, and says so.
            unix = os.path.join(self.tmp, "late.sock")
            bad = self.api(path, {"op": "add", "proto": "tcp",
                                  "spec": f"unix:{unix}:9000"})
            self.assertFalse(bad["ok"])
            self.assertIn("a unix: forward can only be given on the command "
                          "line", bad["error"])
            self.assertFalse(os.path.exists(unix))
            self.assertEqual(self.echo("127.0.0.1", 18085),
                             (0, f"{ECHO} True", ""))
            self.assertEqual(self.udp_clients(("::1", 19100), count=5), [5])
            listed = self.api(path, {"op": "list"})
            self.assertTrue(listed["ok"])
            by_id = {f["id"]: f for f in listed["forwards"]}
            self.assertEqual(sorted(by_id), [1, 2, 3])
            self.assertEqual(by_id[1]["counters"]["active"], 1)
            self.assertEqual(by_id[2]["counters"]["bytes_to_guest"], ECHO)
            self.assertEqual(by_id[2]["path"], "splice")
            self.assertEqual((by_id[3]["proto"], by_id[3]["listeners"],
                              by_id[3]["path"]), ("udp", 4, "socket"))
            self.assertEqual(by_id[3]["counters"]["datagrams_from_guest"], 5)
            self.assertEqual(self.api(path, {"op": "remove", "id": 2}),
                             {"ok": True})
            self.assertEqual(self.api(path, {"op": "remove", "id": 3}),
                             {"ok": True})
            rc, _, e = self.echo("127.0.0.1", 18085)
            self.assertNotEqual(rc, 0)
            self.assertIn("Connection refused", e)
            self.assertEqual(self.udp_clients(("::1", 19100), count=1), [0])
            self.assertEqual(self.api(path, {"op": "remove", "id": 2}),
                             {"ok": False, "error": "no forward 2"})
            counters = self.api(path, {"op": "counters"})["counters"]
            self.assertEqual(counters["forward.1.active"], 1,
                             "the download still runs")
            self.assertEqual(counters["forward_api.errors"], 3)
            out, e = dl.communicate(timeout=60)
        finally:
            if dl.poll() is None:
                dl.kill()
                dl.communicate()
        self.assertEqual(dl.returncode, 0, e.decode())
        self.assertEqual(hashlib.sha256(out).hexdigest(), self.sha)
        rc, text = self.stop(p, err)
        self.assertEqual(rc, 0, text)
        c = iu.parse_counters(text)
        self.assertEqual(c["forward.1.accepted"], 1)
        self.assertEqual(c["forward.1.spliced_bytes"],
                         c["forward.1.bytes_to_guest"] +
                         c["forward.1.bytes_from_guest"])
        self.assertFalse(os.path.exists(path), "the API socket was left")

    def test_a_forward_that_cannot_be_made_stops_netstackd(self):
        holder = subprocess.Popen(self.topo.in_ns(
            self.topo.h, sys.executable, "-c",
            "import socket,sys\n"
            "s=socket.socket();s.bind(('0.0.0.0',18090));s.listen()\n"
            "print('up',flush=True);sys.stdin.read()"),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            self.assertEqual(holder.stdout.readline().strip(), "up")
            marker = os.path.join(self.tmp, "cmd-ran")
            p = subprocess.run(self.topo.sandbox_args(
                "-t", "18091", "-t", "18090", "--", "touch", marker),
                capture_output=True, text=True, timeout=30)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn("-t 18090: listen on 0.0.0.0:18090: Address already "
                          "in use", p.stderr)
            self.assertFalse(os.path.exists(marker), "CMD ran")
        finally:
            holder.stdin.close()
            holder.wait(timeout=10)
            holder.stdout.close()
        for spec, why in (("80x", "bad host port '80x'"),
                          ("8000-8002:9000-9001", "the host range has 3 ports"),
                          ("localhost/80", "'localhost' is not an IP address")):
            p = subprocess.run(self.topo.sandbox_args("-t", spec, "--", "true"),
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(f"-t {spec}: {why}", p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
