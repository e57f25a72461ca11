#!/usr/bin/env python3
"""The differential conformance suite (issue #16): each scenario plays the
remote peer with crafted frames against a device under test and checks
what comes back, once against the Linux kernel and once against
netstackd. Each run is its own test case, named SCENARIO/DUT.

Where netstack and Linux differ on purpose, EXPECTED_DIFFERENCES says so,
with the RFC text that allows it; the scenario then asserts each DUT's own
behaviour (both are checked; nothing is skipped). docs/TESTING.md has the
table and how each scenario was seen to fail.

  bazel test //tests/conformance:conformance_test --test_output=streamed
  NST_CONFORMANCE_ONLY=syn_to_closed_port,paws_old_tsval  (a subset)
  NST_CONFORMANCE_DUTS=netstack  (one DUT; mutations.sh uses it)
Needs root and ethtool.
"""
import errno
import os
import sys
import time
import unittest

from tests.conformance import harness as h
from tests.conformance import wire as w
from tests.conformance.scenarios import SCENARIOS, EXPECTED_DIFFERENCES


class Conformance(unittest.TestCase):
    duts = {}

    @classmethod
    def setUpClass(cls):
        assert os.geteuid() == 0, "the conformance suite needs root"
        assert os.path.exists(h.NETSTACKD), h.NETSTACKD
        for kind in (h.LinuxDut, h.NetstackDut):
            if kind.name not in _duts:
                continue
            d = kind()
            cls.duts[d.name] = d
            try:
                d.start()
            except Exception:
                for x in cls.duts.values():
                    x.close()
                raise

    @classmethod
    def tearDownClass(cls):
        for d in cls.duts.values():
            d.close()

    def __str__(self):
        # "syn_to_closed_port/netstack": the case's name in every report.
        name = self._testMethodName[len("test_"):].replace("__", "/")
        return f"{name} ({name})"

    def differs(self):
        """The expected difference of this scenario for this DUT, if any."""
        return EXPECTED_DIFFERENCES.get((self.scenario, self.dut_name))

    def run_scenario(self):
        self.dut = self.duts[self.dut_name]
        self.assertTrue(self.dut.alive(), f"{self.dut_name} is not running:\n"
                        f"{self.dut.log()[-3000:]}")
        self.peer = self.dut.peer
        self.ctl = self.dut.ctl
        self.ctl.call("reset")
        self.peer.flush()
        fn, self.family = SCENARIOS[self.scenario]
        self.peer_addr = h.PEER4 if self.family == 4 else h.PEER6
        self.dut_addr = h.DUT4 if self.family == 4 else h.DUT6
        try:
            fn(self)
        except AssertionError as e:
            raise AssertionError(
                f"{self.scenario}/{self.dut_name}: {e}\n"
                f"frames (peer's view):\n{self.peer.report()}") from None
        except h.DutError as e:
            raise AssertionError(
                f"{self.scenario}/{self.dut_name}: a DUT call failed: {e}\n"
                f"frames (peer's view):\n{self.peer.report()}") from None
        finally:
            try:
                self.ctl.call("reset")
            except (OSError, AssertionError, h.DutError):
                pass


def _make(scenario, dut):
    def test(self):
        self.scenario = scenario
        self.dut_name = dut
        self.run_scenario()
    test.__name__ = f"test_{scenario}__{dut}"
    return test


_only = [s for s in os.environ.get("NST_CONFORMANCE_ONLY", "").split(",") if s]
_duts = [d for d in os.environ.get("NST_CONFORMANCE_DUTS",
                                   "linux,netstack").split(",") if d]
for _name in SCENARIOS:
    if _only and _name not in _only:
        continue
    for _dut in _duts:
        setattr(Conformance, f"test_{_name}__{_dut}", _make(_name, _dut))


if __name__ == "__main__":
    unittest.main(verbosity=2)
