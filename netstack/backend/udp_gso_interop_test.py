"""UDP through the backend with USO and GRO, against the Linux kernel.

Issue #34: a datagram of every size from 1 to 65,507 bytes, both ways,
through GSO/GRO and USO, and a mixed-size flow; content and order checked.

Namespaces made here, with a unique suffix, removed on any exit:
  H  "the host": lo only (with 10.78.0.1/32 and fd78::1/128), no route
     anywhere. It runs udp_backend_driver (the stack on a TAP with host
     GSO: virtio-net headers, TSO and USO offered) and an echo server.
  G  the guest: the Linux kernel on the driver's TAP (10.0.2.100,
     fd00::100; MTU 65520), default routes via the gateway.

The guest's client sends each size as ONE send with UDP_SEGMENT and two
segments of that size where the kernel takes it (the TAP hands the stack
one USO super-frame, which the backend sends on with UDP_SEGMENT), else as
a plain datagram (above the MTU, IP fragments). The echo server reads with
UDP_GRO (it gets the pair as one super-datagram) and echoes what it got in
one send with UDP_SEGMENT of the size it read, so the backend's host socket
(UDP_GRO) gets it whole and sends it to the guest whole too: ONE USO
super-frame (virtio-net UDP_L4) that the guest's kernel cuts. The guest
checks each datagram it gets back, its size, bytes and order.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

SUFFIX = f"{os.getpid() % 100000}"
NS_H = f"ugH{SUFFIX}"
NS_G = f"ugG{SUFFIX}"
TAP = "tapug0"
H4, H6 = "10.78.0.1", "fd78::1"
PORT = 7778
MTU = 65520


def runfile(path):
  for base in (os.environ.get("RUNFILES_DIR"), os.environ.get("TEST_SRCDIR")):
    if base:
      p = os.path.join(base, "netstack", path)
      if os.path.exists(p):
        return p
  here = os.path.dirname(os.path.abspath(__file__))
  return os.path.join(here, os.path.basename(path))


def run(*cmd, check=True, timeout=60):
  r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
  if check and r.returncode != 0:
    raise AssertionError(f"{' '.join(cmd)}: rc {r.returncode}\n{r.stdout}\n"
                         f"{r.stderr}")
  return r


def ns(name, *cmd, **kw):
  return run("ip", "netns", "exec", name, *cmd, **kw)


# H's echo server: UDP_GRO in, UDP_SEGMENT out (the size it read).
ECHO = r"""
import socket, struct, sys
fam, addr, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = socket.socket(socket.AF_INET if fam == "4" else socket.AF_INET6,
                  socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 20)
s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 << 20)
s.setsockopt(socket.SOL_UDP, 104, 1)  # UDP_GRO
s.bind((addr, port))
print("ready", flush=True)
while True:
  data, anc, _, peer = s.recvmsg(65535, 64)
  seg = 0
  for level, kind, value in anc:
    if level == socket.SOL_UDP and kind == 104:
      seg = struct.unpack("i", value[:4])[0]
  if seg and len(data) > seg:
    s.sendmsg([data], [(socket.SOL_UDP, 103, struct.pack("H", seg))], 0, peer)
  else:
    s.sendto(data, peer)
"""

# The guest: every size in [lo, hi], each sent as a UDP_SEGMENT pair when
# the kernel takes it, then a mixed-size flow sent back to back.
CLIENT = r"""
import random, socket, struct, sys
fam, addr, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
lo, hi, mtu = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
ip_hdr = 20 if fam == "4" else 40
s = socket.socket(socket.AF_INET if fam == "4" else socket.AF_INET6,
                  socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 20)
s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 << 20)
s.settimeout(2)
s.connect((addr, port))
bad = retries = pairs = 0

def data_for(n, k):
  return random.Random(n * 2 + k).randbytes(n)

for n in range(lo, hi + 1):
  # Two segments of n bytes in one send: the kernel allows it when a
  # segment fits the MTU and the pair fits one IP packet (and a 64 KiB
  # GSO frame).
  pair = n + 8 + ip_hdr <= mtu and ip_hdr + 8 + 2 * n <= 65535 - 14
  want = [data_for(n, 0), data_for(n, 1)] if pair else [data_for(n, 0)]
  for attempt in range(3):
    if pair:
      s.sendmsg([want[0] + want[1]],
                [(socket.SOL_UDP, 103, struct.pack("H", n))])
    else:
      s.send(want[0])
    got = []
    try:
      while len(got) < len(want):
        got.append(s.recv(70000))
    except socket.timeout:
      retries += 1
      if attempt < 2:
        # Whatever of this try still comes is not the next size's.
        s.settimeout(0.2)
        try:
          while True:
            s.recv(70000)
        except socket.timeout:
          pass
        s.settimeout(2)
        continue
    break
  pairs += pair
  if got != want:
    bad += 1
    if bad < 10:
      print(f"size {n}: sent {[len(w) for w in want]} got "
            f"{[len(g) for g in got]}", flush=True)

# A mixed-size flow: 400 datagrams of sizes 1..9000, back to back, then
# read back: every one, in order, byte for byte.
rng = random.Random(34)
sizes = [rng.randint(1, 9000) for _ in range(400)]
flow = [random.Random(1000 + i).randbytes(n) for i, n in enumerate(sizes)]
for d in flow:
  s.send(d)
back = []
try:
  while len(back) < len(flow):
    back.append(s.recv(70000))
except socket.timeout:
  pass
mixed_ok = back == flow
print(f"sizes {hi - lo + 1} pairs {pairs} bad {bad} retries {retries} "
      f"mixed {len(back)}/{len(flow)} {'in order' if mixed_ok else 'WRONG'}",
      flush=True)
sys.exit(0 if bad == 0 and mixed_ok else 1)
"""


class UdpGsoInteropTest(unittest.TestCase):

  @classmethod
  def setUpClass(cls):
    if os.geteuid() != 0:
      raise unittest.SkipTest("needs root")
    if shutil.which("ip") is None:
      raise AssertionError("ip missing")
    cls.procs = []
    cls.driver = None
    try:
      for n in (NS_H, NS_G):
        run("ip", "netns", "add", n)
      run("ip", "-n", NS_H, "link", "set", "lo", "up")
      run("ip", "-n", NS_H, "addr", "add", f"{H4}/32", "dev", "lo")
      run("ip", "-n", NS_H, "addr", "add", f"{H6}/128", "dev", "lo")
      run("ip", "-n", NS_G, "link", "set", "lo", "up")
      # H leads nowhere: lo only, no default route.
      links = run("ip", "-n", NS_H, "-o", "link", "show").stdout
      assert len(links.strip().splitlines()) == 1 and "lo:" in links, links
      for fam in ("-4", "-6"):
        assert run("ip", fam, "-n", NS_H, "route", "show",
                   "default").stdout.strip() == ""
      for fam, addr in (("4", H4), ("6", H6)):
        p = cls._spawn("ip", "netns", "exec", NS_H, sys.executable, "-c",
                       ECHO, fam, addr, str(PORT))
        assert p.stdout.readline().strip() == "ready"
      cls.driver = cls._spawn(
          "ip", "netns", "exec", NS_H,
          runfile("netstack/backend/udp_backend_driver"), "--tap", TAP,
          "--netns", NS_G, "--mtu", str(MTU), "--host-gso", "65535",
          "--addr", "10.0.2.2/24", "--addr", "fd00::2/64",
          "--extra", H4, "--extra", H6,
          "--self", "10.0.2.2", "--self", "fd00::2")
      line = cls.driver.stdout.readline()
      if line.strip() != "ready":
        raise AssertionError(f"driver: {line} {cls.driver.stderr.read()}")
      run("ip", "-n", NS_G, "link", "set", TAP, "up")
      run("ip", "-n", NS_G, "addr", "add", "10.0.2.100/24", "dev", TAP)
      run("ip", "-n", NS_G, "addr", "add", "fd00::100/64", "dev", TAP,
          "nodad")
      run("ip", "-n", NS_G, "route", "add", "default", "via", "10.0.2.2")
      run("ip", "-6", "-n", NS_G, "route", "add", "default", "via",
          "fd00::2")
    except BaseException:
      cls._cleanup()
      raise

  @classmethod
  def tearDownClass(cls):
    cls._cleanup()

  @classmethod
  def _spawn(cls, *cmd):
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    cls.procs.append(p)
    return p

  @classmethod
  def _cleanup(cls):
    for p in getattr(cls, "procs", []):
      if p.poll() is None:
        p.kill()
        p.wait()
    for n in (NS_G, NS_H):
      run("ip", "netns", "del", n, check=False)

  def counters(self):
    d = type(self).driver
    if d.poll() is None:
      d.send_signal(signal.SIGTERM)
      out, _ = d.communicate(timeout=10)
      type(self).counter_text = out
    c = {}
    for line in type(self).counter_text.splitlines():
      parts = line.split()
      if len(parts) == 2 and parts[1].isdigit():
        c[parts[0]] = int(parts[1])
    return c

  def test_1_every_size_ipv4(self):
    r = ns(NS_G, sys.executable, "-c", CLIENT, "4", H4, str(PORT), "1",
           "65507", str(MTU), check=False, timeout=1200)
    print(f"IPv4: {r.stdout.strip()}", flush=True)
    self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

  def test_2_every_size_ipv6(self):
    r = ns(NS_G, sys.executable, "-c", CLIENT, "6", H6, str(PORT), "1",
           "65507", str(MTU), check=False, timeout=1200)
    print(f"IPv6: {r.stdout.strip()}", flush=True)
    self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

  def test_3_counters(self):
    c = self.counters()
    print("\n".join(f"{k} {v}" for k, v in sorted(c.items())
                    if k.startswith("backend.udp.") and v), flush=True)
    # The pairs went whole both ways: USO in, UDP_SEGMENT out; UDP_GRO in,
    # one USO super-frame to the guest (its TAP takes UDP_L4 frames).
    self.assertGreater(c.get("backend.udp.to_guest_uso", 0), 60000)
    self.assertGreater(c.get("backend.udp.to_host_segmented", 0), 60000)
    self.assertGreater(c.get("backend.udp.to_guest_gro", 0), 60000)
    self.assertEqual(c.get("backend.udp.to_host_split", 0), 0)
    self.assertEqual(c.get("backend.udp.to_host_dropped.full", 0), 0)
    self.assertEqual(c.get("backend.udp.bytes_to_host"),
                     c.get("backend.udp.bytes_to_guest"))


if __name__ == "__main__":
  unittest.main(verbosity=2)
