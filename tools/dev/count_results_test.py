"""count_results.py on made-up Bazel test logs: the counts, and the names
of what failed, for gtest XML, unittest logs, flaky and always-failing
targets, and a missing result."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "count_results.py")

GTEST_XML = """<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="3" failures="{failures}" errors="0">
  <testsuite name="Suite" tests="3" failures="{failures}" errors="0">
    <testcase name="A" classname="Suite" />
    <testcase name="B" classname="Suite">{b}</testcase>
    <testcase name="C" classname="Suite"><skipped /></testcase>
  </testsuite>
</testsuites>
"""

BAZEL_XML = """<?xml version="1.0" encoding="UTF-8"?>
<testsuites>
  <testsuite name="{target}" tests="1" failures="0" errors="{errors}">
    <testcase name="{target}" status="run">{error}</testcase>
  </testsuite>
</testsuites>
"""

UNITTEST_FAILED = """Executing tests from //p:py_test
..F
======================================================================
FAIL: test_tap (__main__.TcpInterop.test_tap)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "x.py", line 3, in test_tap
AssertionError: Lists differ: [['63608', 'ONEWAY']] != []

First list contains 1 additional elements.
----------------------------------------------------------------------
Ran 3 tests in 18.729s

FAILED (failures=1)
"""

UNITTEST_OK = """...s
----------------------------------------------------------------------
Ran 4 tests in 1.0s

OK (skipped=1)
"""


class CountResults(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.root)

    def write(self, target, name, text):
        package, _, base = target.lstrip("/").partition(":")
        path = os.path.join(self.root, package, base, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)

    def py_target(self, target, log, failed, attempts=()):
        package, _, base = target.lstrip("/").partition(":")
        error = '<error message="exited with error code 1"></error>'
        self.write(target, "test.xml", BAZEL_XML.format(
            target=f"{package}/{base}", errors=1 if failed else 0,
            error=error if failed else ""))
        self.write(target, "test.log", log)
        for n, attempt_log in enumerate(attempts, 1):
            self.write(target, f"test_attempts/attempt_{n}.log", attempt_log)

    def run_script(self, *targets):
        p = subprocess.run([sys.executable, SCRIPT, "cfg", self.root,
                            *targets], capture_output=True, text=True,
                           check=True)
        return p.stdout.strip(), p.stderr

    def test_gtest_cases_are_counted_and_failures_named(self):
        self.write("//a:t", "test.xml", GTEST_XML.format(
            failures=1, b='<failure message="Expected: 1\nWhich is: 2" />'))
        out, err = self.run_script("//a:t")
        self.assertEqual(out, "cfg: 1 passed, 1 failed, 1 skipped (1 targets)")
        self.assertIn("FAILED //a:t Suite.B: Expected: 1", err)

    def test_unittest_log_gives_cases_and_the_failing_one(self):
        self.py_target("//p:py", UNITTEST_FAILED, failed=True)
        out, err = self.run_script("//p:py")
        self.assertEqual(out, "cfg: 2 passed, 1 failed, 0 skipped (1 targets)")
        self.assertIn("FAILED //p:py __main__.TcpInterop.test_tap: "
                      "AssertionError: Lists differ", err)

    def test_unittest_skips_are_not_passes(self):
        self.py_target("//p:ok", UNITTEST_OK, failed=False)
        out, _ = self.run_script("//p:ok")
        self.assertEqual(out, "cfg: 3 passed, 0 failed, 1 skipped (1 targets)")

    def test_failing_on_every_attempt_is_not_flaky(self):
        self.py_target("//p:bad", UNITTEST_FAILED, failed=True,
                       attempts=[UNITTEST_FAILED])
        out, err = self.run_script("//p:bad")
        self.assertNotIn("flaky", out)
        self.assertNotIn("FLAKY", err)
        self.assertIn("FAILED //p:bad on all 2 attempts", err)
        self.assertEqual(out, "cfg: 2 passed, 1 failed, 0 skipped (1 targets)")

    def test_passing_on_the_retry_is_flaky_and_names_the_failed_case(self):
        self.py_target("//p:flaky", UNITTEST_OK, failed=False,
                       attempts=[UNITTEST_FAILED])
        out, err = self.run_script("//p:flaky")
        self.assertEqual(out, "cfg: 3 passed, 0 failed, 1 skipped "
                         "(1 targets, 1 flaky: //p:flaky)")
        self.assertIn("FLAKY //p:flaky: passed after 1 failed attempt", err)
        self.assertIn("attempt_1.log: __main__.TcpInterop.test_tap: "
                      "AssertionError", err)

    def test_a_crash_before_any_case_ran_is_one_failure(self):
        self.py_target("//p:crash", "Segmentation fault\n", failed=True)
        out, err = self.run_script("//p:crash")
        self.assertEqual(out, "cfg: 0 passed, 1 failed, 0 skipped (1 targets)")
        self.assertIn("FAILED //p:crash", err)

    def test_a_missing_result_is_one_failure(self):
        out, err = self.run_script("//gone:t")
        self.assertEqual(out, "cfg: 0 passed, 1 failed, 0 skipped (1 targets)")
        self.assertIn("no readable result", err)


if __name__ == "__main__":
    unittest.main()
