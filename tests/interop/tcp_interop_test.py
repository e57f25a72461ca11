#!/usr/bin/env python3
"""netstackd's TCP and UDP, with its services, against the Linux kernel.

For a veth pair (AF_PACKET) and a TAP, each in namespaces of its own, the
kernel side runs real clients against netstackd (--http-root, --echo-port,
--discard-port), over IPv4 and IPv6:
  - curl downloads a file of NST_HTTP_BYTES (default 10 MiB) from the HTTP
    server: its sha256 must match;
  - socat sends NST_STREAM_BYTES (default 8 MiB) to the echo service and
    reads them back: the sha256 of what came back equals what was sent;
  - socat sends the same amount to discard: netstackd's counter of
    discarded bytes must reach it;
  - UDP echo: socat, and 60 datagrams from 1 byte to the largest a
    datagram can be (fragmented both ways), each back identical; UDP
    discard counts 50 datagrams;
  - the HTTP server's behaviour over the real TCP: keep-alive reuse,
    HTTP/1.0 closes, HEAD, 404, 405, 400 for traversal, 413, 414,
    pipelined requests answered in order, Content-Type.
Then netstackd stops (exit 0) and its exit counters are printed (TCP
retransmits, ...), and tshark reads its pcap: no malformed packet, no
expert error, and valid IPv4/TCP/UDP checksums in every frame netstackd
sent.

When a transfer stalls, the test asks netstackd for its per-connection TCP
state (SIGUSR1) while the connection is still stuck, keeps the pcap (in
$TEST_UNDECLARED_OUTPUTS_DIR) and prints its last frames.

By hand, with bigger transfers (and no pcap, which would be huge):
  bazel test //tests/interop:tcp_interop_test --test_output=streamed \\
      --test_env=NST_HTTP_BYTES=$((100<<20)) \\
      --test_env=NST_STREAM_BYTES=$((1<<30)) --test_env=NST_PCAP=0 \\
      --test_env=NST_TRANSFER_TIMEOUT=600
Needs root, curl, socat, ethtool and tshark.
"""
import json
import os
import re
import shutil
import sys
import tempfile
import unittest

from tests.interop import interop_util as iu

HTTP_BYTES = iu.env_int("NST_HTTP_BYTES", 10 << 20)
STREAM_BYTES = iu.env_int("NST_STREAM_BYTES", 8 << 20)
TIMEOUT = iu.env_int("NST_TRANSFER_TIMEOUT", 60)
PCAP = os.environ.get("NST_PCAP", "1") != "0"
HTTP_PORT, ECHO_PORT, DISCARD_PORT = 80, 7, 9


def mib(n):
    return f"{n / (1 << 20):.1f} MiB"


def make_root(nbytes):
    """The document root: a big random file, a few small ones, a
    directory with an index, and a symlink pointing outside."""
    root = tempfile.mkdtemp(prefix="nst-www-")
    sha = iu.write_random_file(os.path.join(root, "blob.bin"), nbytes, seed=42)
    with open(os.path.join(root, "small.txt"), "w") as f:
        f.write("small text file\n")
    with open(os.path.join(root, "index.html"), "w") as f:
        f.write("<html><body>netstackd</body></html>\n")
    os.mkdir(os.path.join(root, "sub"))
    with open(os.path.join(root, "sub", "index.html"), "w") as f:
        f.write("sub index\n")
    os.mkdir(os.path.join(root, "empty"))
    os.symlink("/etc", os.path.join(root, "escape"))
    return root, sha


def file_sha(path):
    import hashlib
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class TcpInterop(unittest.TestCase):
    def setUp(self):
        self.assertEqual(os.geteuid(), 0, "this test needs root (CI runs as root)")
        self.assertTrue(os.path.exists(iu.NETSTACKD), iu.NETSTACKD)
        for tool in ("curl", "socat", "tshark"):
            self.assertTrue(iu.have(tool), f"{tool} is not installed "
                            "(tools/dev/install-deps installs it)")

    # --- transfers ---------------------------------------------------------

    def http_download(self, ctx, addr, sha):
        label = f"{ctx.kind} http {addr}"
        r = iu.curl_download(
            ctx.topo.peer(), f"http://{iu.url_host(addr)}:{HTTP_PORT}/blob.bin",
            TIMEOUT, on_stall=lambda: iu.diagnose(ctx.nd, ctx.pcap, label,
                                                  HTTP_PORT))
        rate = r.received / r.seconds / 1e6 if r.seconds else 0
        print(f"{label}: {mib(r.received)} in {r.seconds:.2f} s "
              f"({rate:.0f} MB/s), curl exit {r.returncode}", flush=True)
        if r.returncode != 0 or r.received_sha.hexdigest() != sha:
            self.fail(f"{label}: curl exit {r.returncode} ({r.stderr.strip()}), "
                      f"{r.received} of {HTTP_BYTES} bytes, sha "
                      f"{'ok' if r.received_sha.hexdigest() == sha else 'MISMATCH'}\n"
                      f"{r.stall_info or iu.diagnose(ctx.nd, ctx.pcap, label, HTTP_PORT)}")
        return r

    def echo_stream(self, ctx, addr):
        label = f"{ctx.kind} tcp echo {addr}"
        r = iu.socat_stream(
            ctx.topo.peer(), iu.socat_tcp(addr, ECHO_PORT), STREAM_BYTES,
            TIMEOUT, echo=True,
            on_stall=lambda: iu.diagnose(ctx.nd, ctx.pcap, label, ECHO_PORT))
        print(f"{label}: {mib(r.sent)} sent, {mib(r.received)} back in "
              f"{r.seconds:.2f} s, socat exit {r.returncode}", flush=True)
        ok = (r.returncode == 0 and r.sent == STREAM_BYTES and
              r.received == r.sent and
              r.received_sha.hexdigest() == r.sent_sha.hexdigest())
        if not ok:
            self.fail(f"{label}: socat exit {r.returncode} ({r.stderr.strip()}), "
                      f"timed out {r.timed_out}, {r.sent} sent, {r.received} "
                      f"back, sha equal "
                      f"{r.received_sha.hexdigest() == r.sent_sha.hexdigest()}\n"
                      f"{r.stall_info or iu.diagnose(ctx.nd, ctx.pcap, label, ECHO_PORT)}")
        return r

    def discard_stream(self, ctx, addr, expected_total):
        label = f"{ctx.kind} tcp discard {addr}"
        r = iu.socat_stream(
            ctx.topo.peer(), iu.socat_tcp(addr, DISCARD_PORT), STREAM_BYTES,
            TIMEOUT, echo=False)
        got = {}

        def arrived():
            got.update(ctx.nd.counters())
            return got.get("service.discard.tcp_bytes", 0) >= expected_total

        done = iu.wait_for(arrived, TIMEOUT, interval=0.25)
        print(f"{label}: {mib(r.sent)} sent in {r.seconds:.2f} s; netstackd "
              f"discarded {got.get('service.discard.tcp_bytes')} bytes in all",
              flush=True)
        self.assertEqual(r.returncode, 0, f"{label}: {r.stderr}")
        self.assertEqual(r.sent, STREAM_BYTES, label)
        if not done or got.get("service.discard.tcp_bytes") != expected_total:
            self.fail(f"{label}: discarded {got.get('service.discard.tcp_bytes')}"
                      f", want {expected_total}\n"
                      f"{iu.diagnose(ctx.nd, ctx.pcap, label, DISCARD_PORT)}")

    def udp_echo(self, ctx, addr):
        p = iu.run(*ctx.topo.peer("socat", "-t", "2", "-", iu.socat_udp(addr, ECHO_PORT)),
                   input="hello over udp", timeout=30, check=False)
        self.assertEqual(p.stdout, "hello over udp", f"socat udp echo {addr}: {p.stderr}")
        # 65507: the largest IPv4 UDP payload; over IPv6 65527 would be, but
        # see test_udp_ipv6_largest_datagram.
        sizes = "1,100,1472,1473,8000,65507"
        out = iu.run(*ctx.topo.peer("python3", iu.PEER_CLIENT, "udp-echo", addr,
                                    str(ECHO_PORT), "--sizes", sizes,
                                    "--count", "60"), timeout=300)
        res = json.loads(out.stdout)
        print(f"{ctx.kind} udp echo {addr}: {res}", flush=True)
        self.assertEqual(res["same"], 60, f"udp echo {addr}: {res}")

    def udp_discard(self, ctx, addr):
        before = ctx.nd.counters().get("service.discard.udp_datagrams", 0)
        iu.run(*ctx.topo.peer("python3", iu.PEER_CLIENT, "udp-send", addr,
                              str(DISCARD_PORT), "--sizes", "1,1000,3000",
                              "--count", "50"), timeout=60)
        got = {}

        def arrived():
            got.update(ctx.nd.counters())
            return got.get("service.discard.udp_datagrams", 0) >= before + 50

        iu.wait_for(arrived, 10, interval=0.2)
        self.assertEqual(got.get("service.discard.udp_datagrams", 0) - before,
                         50, f"udp discard {addr}")

    # --- HTTP semantics over the real TCP -------------------------------------

    def curl(self, ctx, *args):
        p = iu.run(*ctx.topo.peer("curl", "-sS", "-g", "-m", "30", *args),
                   check=False, timeout=60)
        return p.stdout

    def http_semantics(self, ctx, addr, root):
        base = f"http://{iu.url_host(addr)}:{HTTP_PORT}"
        # Keep-alive: three requests, one connection.
        out = self.curl(ctx, "-o", "/dev/null", "-o", "/dev/null", "-o",
                        "/dev/null", "-w", "%{http_code} %{num_connects} "
                        "%{content_type}\n", f"{base}/small.txt",
                        f"{base}/index.html", f"{base}/sub/")
        self.assertEqual(out.splitlines(), [
            "200 1 text/plain; charset=utf-8",
            "200 0 text/html; charset=utf-8",
            "200 0 text/html; charset=utf-8"], f"keep-alive {addr}")
        # 404 keeps the connection.
        out = self.curl(ctx, "-o", "/dev/null", "-o", "/dev/null", "-w",
                        "%{http_code} %{num_connects}\n", f"{base}/nope",
                        f"{base}/small.txt")
        self.assertEqual(out.splitlines(), ["404 1", "200 0"], f"404 {addr}")
        # HTTP/1.0 closes after each response.
        out = self.curl(ctx, "-0", "-o", "/dev/null", "-o", "/dev/null", "-w",
                        "%{http_code} %{num_connects}\n", f"{base}/small.txt",
                        f"{base}/small.txt")
        self.assertEqual(out.splitlines(), ["200 1", "200 1"], f"HTTP/1.0 {addr}")
        # HEAD: the headers of the GET, no body.
        out = self.curl(ctx, "-I", f"{base}/blob.bin")
        self.assertIn(f"Content-Length: {HTTP_BYTES}", out)
        self.assertIn("Content-Type: application/octet-stream", out)
        # Refusals.
        for path, want in [("/../../etc/passwd", "400"),
                           ("/%2e%2e/%2e%2e/etc/passwd", "400"),
                           ("/sub/..%2f..%2fetc%2fpasswd", "400"),
                           ("/escape/passwd", "404"),  # symlink out of root
                           ("/empty/", "404")]:
            code = self.curl(ctx, "--path-as-is", "-o", "/dev/null", "-w",
                             "%{http_code}", base + path)
            self.assertEqual(code, want, f"{path} over {addr}")
        out = self.curl(ctx, "-X", "POST", "-d", "x", "-D", "-", "-o",
                        "/dev/null", f"{base}/small.txt")
        self.assertIn(" 405 ", out.splitlines()[0] if out else "", out)
        self.assertIn("Allow: GET, HEAD", out)
        # Pipelined requests, answered in order; the last closes.
        out = iu.run(*ctx.topo.peer("python3", iu.PEER_CLIENT, "http-pipeline",
                                    addr, str(HTTP_PORT), "/small.txt",
                                    "/nope", "/sub/", "/index.html"),
                     timeout=60)
        res = json.loads(out.stdout)
        statuses = [r.get("status", r.get("error")) for r in res["responses"]]
        self.assertEqual(statuses, ["HTTP/1.1 200 OK", "HTTP/1.1 404 Not Found",
                                    "HTTP/1.1 200 OK", "HTTP/1.1 200 OK"],
                         f"pipelining {addr}: {res}")
        self.assertEqual(res["responses"][0]["sha256"],
                         file_sha(os.path.join(root, "small.txt")))
        self.assertEqual(res["responses"][2]["sha256"],
                         file_sha(os.path.join(root, "sub", "index.html")))
        self.assertTrue(res["closed"], "Connection: close not honoured")
        # Oversize header (413) and target (414): answered, then closed.
        for name, req, want in [
                ("413", "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + "a" * 17000
                 + "\r\n\r\n", " 413 "),
                ("414", "GET /" + "a" * 9000 + " HTTP/1.1\r\nHost: x\r\n\r\n",
                 " 414 ")]:
            with tempfile.NamedTemporaryFile("w", delete=False) as f:
                f.write(req)
            try:
                out = iu.run(*ctx.topo.peer("python3", iu.PEER_CLIENT,
                                            "http-raw", addr, str(HTTP_PORT),
                                            "--request-file", f.name),
                             timeout=60)
            finally:
                os.unlink(f.name)
            res = json.loads(out.stdout)
            self.assertIn(want, res["status"], f"{name} over {addr}: {res}")
            self.assertTrue(res["closed"], f"{name}: not closed")
        print(f"{ctx.kind} http semantics {addr}: ok", flush=True)

    # --- pcap -------------------------------------------------------------------

    def check_pcap(self, ctx, our4, our6):
        bad = iu.tshark_lines(
            ctx.pcap, "_ws.malformed || _ws.expert.severity == 8388608",
            ["frame.number", "frame.protocols", "_ws.col.Info"])
        self.assertEqual(bad, [], f"{ctx.kind}: malformed frames or expert "
                         f"errors in {ctx.pcap}")
        # With host GSO the pcap holds TCP super-segments as handed to the
        # kernel: larger than the MTU, with only the pseudo-header in the
        # checksum field (the kernel completes it per wire packet), as
        # tcpdump shows on a host with TSO. Their IP checksum must still be
        # right; their TCP checksum is not checked.
        host_gso = "--hostgso" in os.environ.get("NST_NETSTACKD_FLAGS", "")
        ours = f"(ip.src == {our4} || ipv6.src == {our6})"
        rows = iu.tshark_lines(
            ctx.pcap, f"{ours} && frame.len <= 1514",
            ["ip.checksum.status", "tcp.checksum.status",
             "udp.checksum.status"],
            "-o", "ip.check_checksum:TRUE", "-o", "tcp.check_checksum:TRUE",
            "-o", "udp.check_checksum:TRUE")
        supers = iu.tshark_lines(
            ctx.pcap, f"{ours} && tcp && frame.len > 1514",
            ["ip.checksum.status"], "-o", "ip.check_checksum:TRUE")
        if host_gso:
            self.assertGreater(len(supers), 0, "no super-segment sent")
            rows += supers
        else:
            self.assertEqual(supers, [], "frames above the MTU without GSO")
        good = sum(1 for r in rows if "1" in r)
        bad_rows = [r for r in rows if "0" in r]
        print(f"{ctx.kind} pcap: {len(rows)} frames from netstackd "
              f"({len(supers)} GSO super-segments), {good} with checksums "
              f"verified good, {len(bad_rows)} bad", flush=True)
        self.assertEqual(bad_rows, [], f"{ctx.kind}: bad checksums")
        self.assertGreater(good, 1000)

    # --- the runs ------------------------------------------------------------------

    def run_link(self, kind, net4, net6):
        ctx = type("Ctx", (), {})()
        ctx.kind = kind
        ctx.topo = iu.Topology(kind, "nst-tcp")
        ctx.nd = None
        ctx.pcap = None
        root, sha = make_root(HTTP_BYTES)
        pcap_dir = tempfile.mkdtemp(prefix="nst-tcp-")
        failed = True
        try:
            flags = ctx.topo.setup(net4, net6)
            for note in ctx.topo.notes:
                print(f"note: {note}", flush=True)
            if PCAP:
                ctx.pcap = os.path.join(pcap_dir, f"{kind}.pcap")
                flags.append(f"--pcap={ctx.pcap}")
            ctx.nd = iu.Netstackd(flags + [
                "--http-root", root, f"--http-port={HTTP_PORT}",
                f"--echo-port={ECHO_PORT}", f"--discard-port={DISCARD_PORT}"])
            ctx.nd.start()
            our4, our6 = f"{net4}.2", f"{net6}::2"
            for n, addr in enumerate((our4, our6)):
                self.http_download(ctx, addr, sha)
                self.echo_stream(ctx, addr)
                self.discard_stream(ctx, addr, (n + 1) * STREAM_BYTES)
                self.udp_echo(ctx, addr)
                self.udp_discard(ctx, addr)
                self.http_semantics(ctx, addr, root)
            code = ctx.nd.stop()
            c = ctx.nd.exit_counters()
            print(f"--- netstackd ({kind}) exit {code}; "
                  f"tcp retransmits {c.get('tcp.retransmits')}, "
                  f"segments in/out {c.get('tcp.segments_in')}/"
                  f"{c.get('tcp.segments_out')}, resets sent "
                  f"{c.get('tcp.resets_sent')}; http {c.get('service.http.requests')}"
                  f" requests, {c.get('service.http.body_bytes')} body bytes; "
                  f"echo {c.get('service.echo.tcp_bytes')} B; discard "
                  f"{c.get('service.discard.tcp_bytes')} B; udp echo "
                  f"{c.get('service.echo.udp_datagrams')} datagrams", flush=True)
            self.assertEqual(code, 0, ctx.nd.log()[-4000:])
            self.assertEqual(c.get("service.echo.tcp_bytes"), 2 * STREAM_BYTES)
            self.assertEqual(c.get("service.discard.tcp_bytes"), 2 * STREAM_BYTES)
            self.assertEqual(c.get("service.http.connection_errors", 0), 0)
            self.assertEqual(c.get("service.echo.tcp_errors", 0), 0)
            self.assertEqual(c.get("service.discard.tcp_errors", 0), 0)
            # No frame lost on our side of the link: not a super-frame of
            # the kernel peer's TSO/GSO (its offloads are at their
            # defaults), not one the socket's receive buffer overflowed on.
            dropped = {k: v for k, v in c.items()
                       if k.startswith("link.") and k.endswith(".rx_dropped")}
            self.assertTrue(dropped, "netstackd printed no rx_dropped")
            self.assertFalse(any(dropped.values()),
                             f"netstackd dropped received frames: {dropped}")
            if ctx.pcap:
                self.check_pcap(ctx, our4, our6)
            failed = False
        finally:
            if ctx.nd is not None:
                ctx.nd.stop()
                if failed:
                    print(f"--- netstackd ({kind}) log tail:\n"
                          f"{ctx.nd.log()[-6000:]}", flush=True)
                ctx.nd.close()
            ctx.topo.close()
            shutil.rmtree(root, ignore_errors=True)
            if ctx.pcap and failed and os.path.exists(ctx.pcap):
                print(f"pcap kept at {iu.keep_artifact(ctx.pcap, f'{kind}.pcap')}")
            shutil.rmtree(pcap_dir, ignore_errors=True)

    def test_udp_ipv6_largest_datagram(self):
        """A UDP payload of 65520..65527 bytes over IPv6: its fragmentable
        part fits the 65535-byte limit of RFC 8200 4.5 (the Fragment header
        does not count), and the kernel sends such datagrams to us. Once
        refused by SendIpv6 (drop.fragmentation_needed)."""
        topo = iu.Topology("veth", "nst-udp6")
        nd = None
        try:
            flags = topo.setup("10.83.0", "fd00:83")
            nd = iu.Netstackd(flags + [f"--echo-port={ECHO_PORT}"]).start()
            out = iu.run(*topo.peer("python3", iu.PEER_CLIENT, "udp-echo",
                                    "fd00:83::2", str(ECHO_PORT), "--sizes",
                                    "100,65519,65520,65527", "--count", "4"),
                         timeout=60)
            res = json.loads(out.stdout)
            print(f"udp echo of 100/65519/65520/65527 bytes over IPv6: {res}",
                  flush=True)
            self.assertEqual(res["same"], 4, res)
        finally:
            if nd is not None:
                nd.close()
            topo.close()

    def test_veth_af_packet(self):
        self.run_link("veth", "10.79.0", "fd00:79")

    def test_tap(self):
        self.run_link("tap", "10.80.0", "fd00:80")


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
