#!/usr/bin/env python3
"""tcp_benchmark's netstack roles against stock iperf3 (Debian's 3.12).

A veth pair between two namespaces: stock iperf3 runs on the kernel side,
tcp_benchmark --stack=netstack on an AF_PACKET socket on the other end.
For each GSO mode (off, software, host):
  - `iperf3 -c` measures our server, forward and reverse (-R), and over
    IPv6 once;
  - our client measures against `iperf3 -s`, forward and reverse.
Each run must move data (> 1 MiB), both sides must agree on the byte
count, and both processes must exit 0. The kernel peer's offloads stay at
their defaults (TSO/GSO on, as on any veth): its super-frames reach our
AF_PACKET endpoint whole, also without --hostgso, and our server must
drop none of them (its link's rx_dropped, which includes the kernel's
PACKET_STATISTICS drops, is 0). Needs root and iperf3.
"""
import re
import json
import os
import subprocess
import sys
import time
import unittest

from tests.interop import interop_util as iu

TCP_BENCHMARK = os.environ.get("TCP_BENCHMARK") or iu.runfile(
    "tools/tcp_benchmark/tcp_benchmark")
SECONDS = iu.env_int("NST_IPERF_SECONDS", 2)
MODES = os.environ.get("NST_IPERF_MODES", "off,sw,host").split(",")
GSO_FLAGS = {"off": ["--gso=0"], "sw": ["--swgso"], "host": ["--hostgso"]}
PORT = 5201


class Iperf3Interop(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not iu.have("iperf3"):
            raise RuntimeError("iperf3 is not installed "
                               "(tools/dev/install-deps installs it)")
        cls.topo = iu.Topology("veth", "nstip")
        try:
            cls.link = cls.topo.setup("10.79.0", "fd00:79")
        except Exception:
            cls.topo.close()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.topo.close()

    def ours(self, mode, *args):
        return [TCP_BENCHMARK, "--stack=netstack", *self.link,
                *GSO_FLAGS[mode], *args]

    def wait_listening(self, proc, what):
        """Reads the role's output until it says it listens."""
        deadline = time.time() + 20
        lines = []
        while time.time() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "listening" in line:
                return
        proc.kill()
        self.fail(f"{what} did not start listening:\n{''.join(lines)}")

    def finish(self, proc, what, timeout=60):
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            self.fail(f"{what} hung:\n{out[-3000:]}{err or ''}")
        self.assertEqual(proc.returncode, 0, f"{what} exited {proc.returncode}:"
                         f"\n{out[-3000:]}{err or ''}")
        return out, err

    def run_stock_client(self, mode, target, reverse):
        server = subprocess.Popen(
            self.ours(mode, "--role=server", f"--port={PORT}", "--one_off"),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            self.wait_listening(server, "our server")
            cmd = self.topo.peer("iperf3", "-c", target, "-p", str(PORT),
                                 "-t", str(SECONDS), "-J")
            if reverse:
                cmd.append("-R")
            client = subprocess.run(cmd, capture_output=True, text=True,
                                    timeout=SECONDS + 60)
            self.assertEqual(client.returncode, 0,
                             f"iperf3 -c failed:\n{client.stdout[-2000:]}"
                             f"{client.stderr[-2000:]}")
            result = json.loads(client.stdout)
            out, _ = self.finish(server, "our server")
            dropped = re.findall(r"^link\.\S+\.rx_dropped (\d+)$", out, re.M)
            self.assertTrue(dropped, f"no rx_dropped counter:\n{out[-3000:]}")
            self.assertEqual(dropped, ["0"] * len(dropped),
                             f"our server dropped frames:\n{out[-3000:]}")
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
        end = result["end"]
        received = end["sum_received"]["bytes"]
        sent = end["sum_sent"]["bytes"]
        # sum_received is what our server (or, with -R, iperf3's client)
        # counted as received by the end of the test; data still in flight
        # then is sent but not counted, as between two stock iperf3s.
        self.assertGreater(received, 1 << 20, end)
        self.assertLessEqual(received, sent, end)
        self.assertGreater(received, sent // 2, end)
        gbps = end["sum_received"]["bits_per_second"] / 1e9
        print(f"  stock iperf3 -c {target}{' -R' if reverse else ''} -> our "
              f"server ({mode} GSO): {received} bytes, {gbps:.2f} Gbit/s, "
              f"retransmits {end['sum_sent'].get('retransmits', 0)}",
              flush=True)

    def run_our_client(self, mode, reverse, extra=()):
        server = subprocess.Popen(
            self.topo.peer("iperf3", "-s", "-1", "-p", str(PORT), "-J"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(0.5)  # iperf3 -s has no readiness signal
            args = ["--role=client", f"--connect=10.79.0.1:{PORT}",
                    f"--duration={SECONDS}", "--json", *extra]
            if reverse:
                args.append("--reverse")
            client = subprocess.run(self.ours(mode, *args),
                                    capture_output=True, text=True,
                                    timeout=SECONDS + 60)
            self.assertEqual(client.returncode, 0,
                             f"our client failed:\n{client.stderr[-3000:]}")
            ours = json.loads(client.stdout)
            out, _ = self.finish(server, "iperf3 -s")
            theirs = json.loads(out)
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
        end = theirs["end"]
        self.assertGreater(ours["bytes"], 1 << 20 if not extra else 1 << 16,
                           ours)
        if reverse:
            # iperf3 -s sent; it reports no received count of its own (as
            # against a stock client). What we received is at most what
            # it sent (bytes in flight at the end are not counted).
            sent = end["sum_sent"]["bytes"]
            self.assertLessEqual(ours["bytes"], sent, (ours, end))
            self.assertGreater(ours["bytes"], sent // 2, (ours, end))
        else:
            self.assertEqual(ours["bytes"], end["sum_received"]["bytes"],
                             (ours, end))
        print(f"  our client{' --reverse' if reverse else ''} ({mode} GSO) "
              f"-> stock iperf3 -s: {ours['bytes']} bytes, "
              f"{ours['gbps']:.2f} Gbit/s, retransmits "
              f"{ours['retransmits']}", flush=True)

    def test_stock_client_against_our_server(self):
        for mode in MODES:
            for reverse in (False, True):
                with self.subTest(mode=mode, reverse=reverse):
                    self.run_stock_client(mode, "10.79.0.2", reverse)
        with self.subTest(mode="sw", family="IPv6"):
            self.run_stock_client("sw" if "sw" in MODES else MODES[0],
                                  "fd00:79::2", False)

    def test_our_client_through_loss_and_delay(self):
        # 1% loss and 2 ms each way: control messages get lost too, and
        # the client must not exit before its last one (IPERF_DONE) is
        # acknowledged, or iperf3 -s reports the test as failed.
        self.run_our_client("sw" if "sw" in MODES else MODES[0], False,
                            ("--loss=0.01", "--latency=2ms"))

    def test_our_client_against_stock_server(self):
        for mode in MODES:
            for reverse in (False, True):
                with self.subTest(mode=mode, reverse=reverse):
                    self.run_our_client(mode, reverse)


if __name__ == "__main__":
    unittest.main(verbosity=2)
