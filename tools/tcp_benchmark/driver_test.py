#!/usr/bin/env python3
"""tcp_benchmark's driver mode end to end, with the real roles.

Runs the driver (no --role) the way a user does and checks what it
promises:
  - --modes=off with the kernel baseline: exit 0, ONE JSON array on stdout
    with one object per measurement and the documented keys, gbps > 0,
    kernel rows at ratio 1.0, netstack's ratio = its gbps / the kernel's;
  - a role that fails (--cc=bogus): non-zero exit, the role's complaint in
    the row's "error" and on stderr;
  - SIGINT (twice) in the middle of a transfer: exit 128+2 within
    seconds, and no role process or namespace of the run left behind;
  - after every run, no namespace named with the run's PID (tcpb<pid>a/b).
Needs root (namespaces, veth, AF_PACKET).
"""
import json
import os
import signal
import subprocess
import time
import unittest

RUNFILES = os.environ.get("TEST_SRCDIR", "")
WORKSPACE = os.environ.get("TEST_WORKSPACE", "netstack")
TCP_BENCHMARK = os.environ.get("TCP_BENCHMARK") or os.path.join(
    RUNFILES, WORKSPACE, "tools/tcp_benchmark/tcp_benchmark")

REQUIRED_KEYS = {"mode", "mtu", "netstack_role", "gbps", "cpu_s_per_gb",
                 "retransmits", "ratio_to_kernel"}


def namespaces_of(pid):
    out = subprocess.run(["ip", "netns", "list"], capture_output=True,
                         text=True, check=True).stdout
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    return [n for n in names if n in (f"tcpb{pid}a", f"tcpb{pid}b")]


def role_processes_of(pid):
    """Processes whose command line names the run's namespace."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().decode(errors="replace")
        except OSError:
            continue
        if f"tcpb{pid}" in cmdline and "--role=" in cmdline:
            found.append(cmdline.replace("\0", " "))
    return found


class DriverTest(unittest.TestCase):
    def run_driver(self, *flags, timeout=120):
        p = subprocess.Popen([TCP_BENCHMARK, *flags], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        out, err = p.communicate(timeout=timeout)
        self.assertEqual(namespaces_of(p.pid), [],
                         "the driver left its namespaces behind")
        return p.returncode, out, err

    def test_json_rows_against_the_kernel_baseline(self):
        rc, out, err = self.run_driver("--modes=off", "--duration=2",
                                       "--json")
        self.assertEqual(rc, 0, err[-3000:])
        rows = json.loads(out)  # the whole stdout is one JSON array
        self.assertEqual([(r["mode"], r["netstack_role"]) for r in rows],
                         [("kernel", "sender"), ("off", "sender")], out)
        for row in rows:
            self.assertLessEqual(REQUIRED_KEYS, set(row), row)
            self.assertNotIn("error", row)
            self.assertEqual(row["mtu"], 1500)
            self.assertGreater(row["gbps"], 0, row)
            self.assertGreater(row["cpu_s_per_gb"], 0, row)
            self.assertGreaterEqual(row["retransmits"], 0, row)
            self.assertEqual(row["duration"], 2)
        kernel, ours = rows
        self.assertEqual(kernel["ratio_to_kernel"], 1.0)
        self.assertAlmostEqual(ours["ratio_to_kernel"],
                               ours["gbps"] / kernel["gbps"], places=3)
        # The user sees progress: a header per measurement, interval lines.
        self.assertIn("== netstack sender, off GSO, MTU 1500, packet link ==",
                      err)
        self.assertIn("Gbits/sec", err)

    def test_server_role_and_no_baseline(self):
        rc, out, err = self.run_driver("--server", "--modes=sw",
                                       "--kernel_baseline=false",
                                       "--duration=1", "--json")
        self.assertEqual(rc, 0, err[-3000:])
        rows = json.loads(out)
        self.assertEqual(len(rows), 1, out)
        self.assertEqual(rows[0]["netstack_role"], "receiver")
        self.assertEqual(rows[0]["mode"], "sw")
        self.assertIsNone(rows[0]["ratio_to_kernel"])
        self.assertGreater(rows[0]["gbps"], 0)

    def test_verbose_shows_a_netstack_receivers_counters(self):
        # A receiver row: netstack is the server, whose stderr (and so its
        # stack's counters) the driver shows only with --verbose.
        for verbose in (False, True):
            rc, out, err = self.run_driver(
                "--server", "--modes=off", "--kernel_baseline=false",
                "--duration=1", "--json", f"--verbose={str(verbose).lower()}")
            self.assertEqual(rc, 0, err[-3000:])
            self.assertEqual(json.loads(out)[0]["netstack_role"], "receiver")
            if verbose:
                self.assertIn("-- the server's stderr (netstack):", err)
                self.assertRegex(err, r"(?m)^tcp: segments_in=\d+")
                self.assertRegex(err, r"(?m)^link\.\S+\.rx_dropped \d+$")
            else:
                self.assertNotIn("the server's stderr", err)

    def test_a_failing_role_fails_the_run_and_says_why(self):
        rc, out, err = self.run_driver("--modes=off",
                                       "--kernel_baseline=false",
                                       "--cc=bogus", "--duration=1", "--json")
        self.assertNotEqual(rc, 0)
        rows = json.loads(out)
        self.assertEqual(len(rows), 1)
        self.assertIn("--cc", rows[0]["error"])
        self.assertIn("measurement failed", err)

    def test_bad_driver_flags_are_refused_before_anything_is_built(self):
        rc, _, err = self.run_driver("--modes=turbo", timeout=30)
        self.assertEqual(rc, 2)
        self.assertIn("turbo", err)
        rc, _, err = self.run_driver("--mtus=1500,abc", timeout=30)
        self.assertEqual(rc, 2)
        self.assertIn("abc", err)

    def test_sigint_mid_transfer_tears_everything_down(self):
        p = subprocess.Popen([TCP_BENCHMARK, "--modes=off",
                              "--kernel_baseline=false", "--duration=60",
                              "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        try:
            # Wait for the first interval line: both roles run, data flows.
            seen = ""
            deadline = time.time() + 30
            while "Gbits/sec" not in seen and "Mbits/sec" not in seen:
                self.assertLess(time.time(), deadline, seen)
                line = p.stderr.readline()
                self.assertNotEqual(line, "", "driver ended early: " + seen)
                seen += line
            self.assertEqual(len(namespaces_of(p.pid)), 2)
            self.assertNotEqual(role_processes_of(p.pid), [])
            start = time.time()
            p.send_signal(signal.SIGINT)
            time.sleep(0.05)
            p.send_signal(signal.SIGINT)  # an impatient user: twice
            out, err = p.communicate(timeout=20)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.assertLess(time.time() - start, 10)
        self.assertEqual(p.returncode, 128 + signal.SIGINT, err[-3000:])
        self.assertIn("interrupted", err)
        self.assertEqual(namespaces_of(p.pid), [])
        self.assertEqual(role_processes_of(p.pid), [])


if __name__ == "__main__":
    unittest.main()
