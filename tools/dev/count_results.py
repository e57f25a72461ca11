#!/usr/bin/env python3
"""Counts test cases in Bazel's JUnit XML results.

Usage: count_results.py LABEL TESTLOGS_DIR TARGET...
Reads TESTLOGS_DIR/<package>/<name>/test.xml for each test TARGET
(//package:name), so stale results of deleted targets are not counted.
Prints "LABEL: P passed, F failed, S skipped (T targets)"; a skipped
test case is never counted as passed. A target whose XML is
missing or unreadable counts as one failure; a target that Bazel marked as
failed but whose XML lists no failing case (a crash, a timeout) counts as
one failure too.
"""
import os
import sys
import xml.etree.ElementTree as ET


def main():
    label, root, labels = sys.argv[1], sys.argv[2], sys.argv[3:]
    passed = failed = skipped = targets = 0
    for target in labels:
        package, _, name = target.lstrip("/").partition(":")
        path = os.path.join(root, package, name, "test.xml")
        targets += 1
        try:
            tree = ET.parse(path)
        except (ET.ParseError, OSError):
            print(f"{label}: no readable result for {target}", file=sys.stderr)
            failed += 1
            continue
        cases = list(tree.iter("testcase"))
        bad = 0
        for case in cases:
            if case.find("failure") is not None or case.find("error") is not None:
                bad += 1
            elif (case.find("skipped") is not None or
                  case.get("result") in ("skipped", "suppressed") or
                  case.get("status") == "notrun"):
                skipped += 1
            else:
                passed += 1
        failed += bad
        # A suite-level failure count with no failing case: crash or timeout.
        suite_fail = 0
        for suite in tree.iter("testsuite"):
            suite_fail += int(suite.get("failures", 0)) + int(suite.get("errors", 0))
        if bad == 0 and suite_fail > 0:
            failed += 1
        if not cases and suite_fail == 0:
            # Bazel's own XML for a non-gtest target: one case per target.
            passed += 1
    print(f"{label}: {passed} passed, {failed} failed, {skipped} skipped "
          f"({targets} targets)")


if __name__ == "__main__":
    main()
