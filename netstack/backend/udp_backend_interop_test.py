"""The backend's UDP flows, ping and DNS forwarder against real peers.

Namespaces made here, with a unique suffix, removed on any exit:
  H  "the host": lo, and one end of a veth pair whose other end lies in S.
     It runs udp_backend_driver and the servers: socat UDP echo on H's
     addresses, dnsmasq answering backend.test on H's loopback 127.0.0.53.
  S  the sink: only lo and the veth's other end; nothing behind it.
  G  the guest: the Linux kernel on the driver's TAP (10.0.2.100,
     fd00::100), default routes via the gateway 10.0.2.2 / fd00::2.

Until the backend core lands (the stack accepting packets to any
destination), the driver's stack carries H's addresses 10.77.0.1 and
fd77::1 as extra addresses, so that the guest's packets to them reach the
UDP layer and the echo hook; the flows still leave through real host
sockets in H.
"""

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

SUFFIX = f"{os.getpid() % 100000}"
NS_H = f"bkH{SUFFIX}"
NS_G = f"bkG{SUFFIX}"
NS_S = f"bkS{SUFFIX}"
VETH_H = "vh0"
VETH_S = "vs0"
TAP = "tapbk0"
H4, H6 = "10.77.0.1", "fd77::1"
DNS4, DNS6 = "10.0.2.3", "fd00::3"
ECHO_PORT = 7777
DNSMASQ_ADDR = "127.0.0.53"


def runfile(path):
  for base in (os.environ.get("RUNFILES_DIR"), os.environ.get("TEST_SRCDIR")):
    if base:
      p = os.path.join(base, "netstack", path)
      if os.path.exists(p):
        return p
  here = os.path.dirname(os.path.abspath(__file__))
  return os.path.join(here, os.path.basename(path))


def run(*cmd, check=True, timeout=60, input=None):
  r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                     input=input)
  if check and r.returncode != 0:
    raise AssertionError(f"{' '.join(cmd)}: rc {r.returncode}\n{r.stdout}\n"
                         f"{r.stderr}")
  return r


def ns(name, *cmd, **kw):
  return run("ip", "netns", "exec", name, *cmd, **kw)


def links(name):
  out = run("ip", "-n", name, "-o", "link", "show").stdout
  return sorted(line.split(":")[1].strip().split("@")[0]
                for line in out.splitlines() if line.strip())


# The guest's UDP echo client: every size, both families, byte-exact.
GUEST_CLIENT = r"""
import socket, sys, random
addr, port, fam = sys.argv[1], int(sys.argv[2]), sys.argv[3]
sizes = [int(x) for x in sys.argv[4].split(",")]
s = socket.socket(socket.AF_INET if fam == "4" else socket.AF_INET6,
                  socket.SOCK_DGRAM)
s.settimeout(3)
s.connect((addr, port))
bad = 0
retries = 0
for n in sizes:
  data = random.Random(n).randbytes(n)
  for attempt in range(3):
    s.send(data)
    try:
      got = s.recv(70000)
    except socket.timeout:
      retries += 1
      continue
    break
  else:
    print(f"size {n}: no answer"); bad += 1; continue
  if got != data:
    print(f"size {n}: got {len(got)} bytes, not equal"); bad += 1
print(f"sizes {len(sizes)} bad {bad} retries {retries}")
sys.exit(1 if bad else 0)
"""


# A hostile guest: runt UDP queries, a response sent as a query, and a TCP
# message shorter than a DNS header (the forwarder closes the connection).
HOSTILE_DNS = r"""
import socket, sys
dns = sys.argv[1]
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for m in (b"", b"\x01", b"\x00" * 11, b"\x12\x34\x81\x80" + b"\x00" * 8):
  u.sendto(m, (dns, 53))
u.settimeout(0.5)
try:
  print("unexpected answer", u.recv(100)); sys.exit(1)
except socket.timeout:
  pass
t = socket.create_connection((dns, 53), timeout=3)
t.sendall(b"\x00\x05hello")
t.settimeout(3)
try:
  got = t.recv(100)
except ConnectionResetError:
  got = b""
if got != b"":
  print("expected the connection closed, got", got); sys.exit(1)

def query(qid):
  q = qid.to_bytes(2, "big") + b"\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
  q += b"\x07backend\x04test\x00\x00\x01\x00\x01"
  return len(q).to_bytes(2, "big") + q

def read_msg(sock):
  buf = b""
  while len(buf) < 2 or len(buf) < 2 + int.from_bytes(buf[:2], "big"):
    chunk = sock.recv(4096)
    if not chunk:
      raise AssertionError(f"closed after {len(buf)} bytes")
    buf += chunk
  n = int.from_bytes(buf[:2], "big")
  return buf[2:2 + n], buf[2 + n:]

# A query dribbled one byte per segment, then two pipelined in one write:
# each answered, with its own id, over the same connection.
t = socket.create_connection((dns, 53), timeout=5)
t.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
import time
for b in query(0xbeef):
  t.send(bytes([b]))
  time.sleep(0.01)
msg, rest = read_msg(t)
assert msg[:2] == b"\xbe\xef" and msg[2] & 0x80, msg
t.sendall(query(0x0102) + query(0x0304))
got = []
buf = b""
for _ in range(2):
  while len(buf) < 2 or len(buf) < 2 + int.from_bytes(buf[:2], "big"):
    buf += t.recv(4096)
  n = int.from_bytes(buf[:2], "big")
  got.append(buf[2:4])
  buf = buf[2 + n:]
assert sorted(got) == [b"\x01\x02", b"\x03\x04"], got
t.close()
print("hostile ok")
"""


class UdpBackendInteropTest(unittest.TestCase):

  @classmethod
  def setUpClass(cls):
    if os.geteuid() != 0:
      raise unittest.SkipTest("needs root")
    for tool in ("ip", "socat", "dnsmasq", "dig", "ping"):
      if shutil.which(tool) is None:
        raise AssertionError(f"{tool} missing: run tools/dev/install-deps")
    cls.procs = []
    cls.tmp = tempfile.mkdtemp(prefix="udp_backend_")
    cls.driver = None
    try:
      cls._topology()
      cls._servers()
      cls._assert_isolated()
      cls._start_driver()
      cls._guest()
    except BaseException:
      cls._cleanup()
      raise

  @classmethod
  def tearDownClass(cls):
    cls._cleanup()

  @classmethod
  def _cleanup(cls):
    for p in getattr(cls, "procs", []):
      if p.poll() is None:
        p.kill()
        p.wait()
    for n in (NS_G, NS_H, NS_S):
      run("ip", "netns", "del", n, check=False)
    # dnsmasq's pid file and the driver's files: nothing left in /tmp.
    if getattr(cls, "tmp", None):
      shutil.rmtree(cls.tmp, ignore_errors=True)

  @classmethod
  def _topology(cls):
    for n in (NS_H, NS_G, NS_S):
      run("ip", "netns", "add", n)
    run("ip", "-n", NS_H, "link", "add", VETH_H, "type", "veth", "peer",
        "name", VETH_S, "netns", NS_S)
    run("ip", "-n", NS_H, "link", "set", "lo", "up")
    run("ip", "-n", NS_H, "link", "set", VETH_H, "up")
    run("ip", "-n", NS_S, "link", "set", VETH_S, "up")
    run("ip", "-n", NS_H, "addr", "add", f"{H4}/24", "dev", VETH_H)
    run("ip", "-n", NS_H, "addr", "add", f"{H6}/64", "dev", VETH_H, "nodad")
    run("ip", "-n", NS_G, "link", "set", "lo", "up")
    # Ping sockets for the driver (per namespace, H only).
    ns(NS_H, "sysctl", "-qw", "net.ipv4.ping_group_range=0 2147483647")

  @classmethod
  def _spawn(cls, *cmd, **kw):
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, **kw)
    cls.procs.append(p)
    return p

  @classmethod
  def _servers(cls):
    for fam, addr in (("4", H4), ("6", f"[{H6}]")):
      cls._spawn("ip", "netns", "exec", NS_H, "socat", "-b", "65536",
                 f"UDP{fam}-RECVFROM:{ECHO_PORT},bind={addr},fork", "PIPE")
    deadline = time.time() + 10
    while time.time() < deadline:
      out = ns(NS_H, "ss", "-Huln").stdout
      if f"{H4}:{ECHO_PORT}" in out and f"[{H6}]:{ECHO_PORT}" in out:
        break
      time.sleep(0.1)
    else:
      raise AssertionError(f"socat echo servers not listening in H: {out}")
    cls._spawn("ip", "netns", "exec", NS_H, "dnsmasq", "--keep-in-foreground",
               "--no-resolv", "--no-hosts", "--no-poll", "--bind-interfaces",
               f"--listen-address={DNSMASQ_ADDR}", "--port=53",
               "--address=/backend.test/10.77.0.9",
               "--address=/backend.test/fd77::9",
               f"--pid-file={cls.tmp}/dnsmasq.pid", "--user=root",
               "--log-facility=-")
    # Both listening before anything else happens.
    deadline = time.time() + 10
    while time.time() < deadline:
      r = ns(NS_H, "dig", f"@{DNSMASQ_ADDR}", "+short", "+time=1", "+tries=1",
             "backend.test", "A", check=False)
      if r.stdout.strip() == "10.77.0.9":
        break
      time.sleep(0.2)
    else:
      raise AssertionError("dnsmasq does not answer in H")

  @classmethod
  def _assert_isolated(cls):
    # H holds lo and its veth end only; that end's peer is the sink's one
    # interface besides lo; neither has a default route.
    assert links(NS_H) == sorted(["lo", VETH_H]), links(NS_H)
    assert links(NS_S) == sorted(["lo", VETH_S]), links(NS_S)
    peer = ns(NS_H, "cat", f"/sys/class/net/{VETH_H}/iflink").stdout.strip()
    sink = ns(NS_S, "cat", f"/sys/class/net/{VETH_S}/ifindex").stdout.strip()
    assert peer == sink, (peer, sink)
    for n in (NS_H, NS_S):
      for fam in ("-4", "-6"):
        routes = run("ip", fam, "-n", n, "route", "show", "default").stdout
        assert routes.strip() == "", (n, routes)

  @classmethod
  def _start_driver(cls):
    cmd = ["ip", "netns", "exec", NS_H, runfile("netstack/backend/udp_backend_driver"),
           "--tap", TAP, "--netns", NS_G, "--mtu", "1500",
           "--addr", "10.0.2.2/24", "--addr", "10.0.2.3/24",
           "--addr", "fd00::2/64", "--addr", "fd00::3/64",
           "--extra", H4, "--extra", H6,
           "--self", "10.0.2.2", "--self", "10.0.2.3",
           "--self", "fd00::2", "--self", "fd00::3",
           "--dns-listen", f"{DNS4}:53", "--dns-listen", f"[{DNS6}]:53",
           "--dns-upstream", DNSMASQ_ADDR]
    cls.driver = cls._spawn(*cmd)
    line = cls.driver.stdout.readline()
    if line.strip() != "ready":
      raise AssertionError(f"driver: {line} {cls.driver.stderr.read()}")

  @classmethod
  def _guest(cls):
    run("ip", "-n", NS_G, "link", "set", TAP, "up")
    run("ip", "-n", NS_G, "addr", "add", "10.0.2.100/24", "dev", TAP)
    run("ip", "-n", NS_G, "addr", "add", "fd00::100/64", "dev", TAP, "nodad")
    run("ip", "-n", NS_G, "route", "add", "default", "via", "10.0.2.2")
    run("ip", "-6", "-n", NS_G, "route", "add", "default", "via", "fd00::2")

  def counters(self):
    """Stops the driver and parses its `name value` lines."""
    d = type(self).driver
    if d.poll() is None:
      d.send_signal(signal.SIGTERM)
      out, err = d.communicate(timeout=10)
      type(self).counter_text = out
    out = type(self).counter_text
    c = {}
    for line in out.splitlines():
      parts = line.split()
      if len(parts) == 2 and parts[1].isdigit():
        c[parts[0]] = int(parts[1])
    return c

  def test_1_udp_echo_every_size_both_families(self):
    rng = random.Random(13)
    sizes = sorted({1, 2, 7, 8, 100, 512, 1024, 1400, 1452, 1472, 1473, 1480,
                    2000, 2952, 2953, 4096, 8192, 8972, 16384, 32768, 50000,
                    64000, 65000} | {rng.randint(1, 65000) for _ in range(40)})
    for fam, addr in (("4", H4), ("6", H6)):
      with self.subTest(family=fam):
        r = ns(NS_G, sys.executable, "-c", GUEST_CLIENT, addr, str(ECHO_PORT),
               fam, ",".join(map(str, sizes)), check=False, timeout=300)
        print(f"IPv{fam} echo: {r.stdout.strip()}", flush=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

  def test_2_ping_both_families(self):
    for args in (["ping", "-c", "3", "-W", "2", H4],
                 ["ping", "-6", "-c", "3", "-W", "2", H6]):
      with self.subTest(args=args):
        r = ns(NS_G, *args, check=False, timeout=30)
        print(r.stdout.strip().splitlines()[-2:], flush=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("3 received", r.stdout)

  def test_3_dns_udp_and_tcp_both_families(self):
    for server in (DNS4, DNS6):
      for proto in ("+notcp", "+tcp"):
        for qtype, want in (("A", "10.77.0.9"), ("AAAA", "fd77::9")):
          with self.subTest(server=server, proto=proto, qtype=qtype):
            r = ns(NS_G, "dig", f"@{server}", proto, "+short", "+time=2",
                   "+tries=2", "backend.test", qtype, check=False)
            self.assertEqual(r.stdout.strip(), want, r.stdout + r.stderr)

  def test_3b_hostile_dns_is_dropped_and_the_forwarder_goes_on(self):
    r = ns(NS_G, sys.executable, "-c", HOSTILE_DNS, DNS4, check=False,
           timeout=30)
    self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
    r = ns(NS_G, "dig", f"@{DNS4}", "+short", "+time=2", "+tries=1",
           "backend.test", "A", check=False)
    self.assertEqual(r.stdout.strip(), "10.77.0.9", r.stdout + r.stderr)

  def test_4_counters(self):
    c = self.counters()
    print("\n".join(f"{k} {v}" for k, v in sorted(c.items())
                    if k.startswith("backend.") and v), flush=True)
    self.assertEqual(c.get("backend.udp.opened"), 2)  # one flow per family
    self.assertEqual(c.get("backend.udp.to_host_dropped.full", 0), 0)
    self.assertGreaterEqual(c.get("backend.udp.bytes_to_guest", 0),
                            2 * 65000)
    self.assertEqual(c.get("backend.udp.bytes_to_host"),
                     c.get("backend.udp.bytes_to_guest"))
    self.assertGreaterEqual(c.get("backend.ping.replies", 0), 6)
    self.assertEqual(c.get("backend.ping.refused.forbidden", 0), 0)
    self.assertGreaterEqual(c.get("backend.dns.answers.udp", 0), 5)
    self.assertGreaterEqual(c.get("backend.dns.answers.tcp", 0), 7)
    self.assertEqual(c.get("backend.dns.timeouts", 0), 0)
    self.assertEqual(c.get("backend.dns.dropped.short"), 3)
    self.assertEqual(c.get("backend.dns.dropped.not_query"), 1)
    self.assertEqual(c.get("backend.dns.dropped.tcp_malformed"), 1)


if __name__ == "__main__":
  unittest.main(verbosity=2)
