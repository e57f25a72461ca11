#!/usr/bin/env python3
"""Counts test cases in Bazel's JUnit XML results.

Usage: count_results.py LABEL TESTLOGS_DIR TARGET...
Reads TESTLOGS_DIR/<package>/<name>/test.xml for each test TARGET
(//package:name), so stale results of deleted targets are not counted.
Prints "LABEL: P passed, F failed, S skipped (T targets)"; a skipped
test case is never counted as passed. Each failure is named on stderr
(target, case and the first line of its message; for an unreadable XML the
parser's error), so the cause is on screen next to the summary. A target whose XML is
missing or unreadable counts as one failure; a target that Bazel marked as
failed but whose XML lists no failing case (a crash, a timeout) counts as
one failure too. A target that passed only on a retry is named as flaky
(in the summary line and on stderr, with where its failed attempts' logs
are); its cases count as their last attempt says.
"""
import os
import sys
import xml.etree.ElementTree as ET


def main():
    label, root, labels = sys.argv[1], sys.argv[2], sys.argv[3:]
    passed = failed = skipped = targets = 0
    flaky = []
    for target in labels:
        package, _, name = target.lstrip("/").partition(":")
        path = os.path.join(root, package, name, "test.xml")
        targets += 1
        try:
            tree = ET.parse(path)
        except (ET.ParseError, OSError) as e:
            print(f"{label}: FAILED {target}: no readable result in {path}: {e}",
                  file=sys.stderr)
            position = getattr(e, "position", None)
            if position:
                try:
                    with open(path, "rb") as f:
                        line = f.read().splitlines()[position[0] - 1]
                    print(f"{label}:   line {position[0]}: {line[:300]!r}",
                          file=sys.stderr)
                except (OSError, IndexError):
                    pass
            failed += 1
            continue
        # A target that failed and then passed on a retry
        # (--flaky_test_attempts): Bazel keeps the failed attempts' logs.
        attempts = os.path.join(root, package, name, "test_attempts")
        if os.path.isdir(attempts):
            failed_attempts = sorted(
                f for f in os.listdir(attempts) if f.endswith(".log"))
            if failed_attempts:
                flaky.append(target)
                print(f"{label}: FLAKY {target}: passed after "
                      f"{len(failed_attempts)} failed attempt(s); their logs: "
                      f"{attempts}", file=sys.stderr)
                for log in failed_attempts:
                    xml = os.path.join(attempts, log[:-len(".log")] + ".xml")
                    try:
                        for case in ET.parse(xml).iter("testcase"):
                            if (case.find("failure") is not None or
                                    case.find("error") is not None):
                                print(f"{label}:   {log}: "
                                      f"{case.get('classname', '')}."
                                      f"{case.get('name', '')} failed",
                                      file=sys.stderr)
                    except (ET.ParseError, OSError):
                        pass
        cases = list(tree.iter("testcase"))
        bad = 0
        for case in cases:
            problem = case.find("failure")
            if problem is None:
                problem = case.find("error")
            if problem is not None:
                bad += 1
                message = (problem.get("message") or problem.text or "").strip()
                first = message.splitlines()[0] if message else "(no message)"
                print(f"{label}: FAILED {target} {case.get('classname', '')}."
                      f"{case.get('name', '')}: {first[:200]}", file=sys.stderr)
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
            print(f"{label}: FAILED {target}: the suite counts {suite_fail} "
                  "failures or errors but names no case (a crash or a timeout)",
                  file=sys.stderr)
            failed += 1
        if not cases and suite_fail == 0:
            # Bazel's own XML for a non-gtest target: one case per target.
            passed += 1
    note = f", {len(flaky)} flaky: {' '.join(flaky)}" if flaky else ""
    print(f"{label}: {passed} passed, {failed} failed, {skipped} skipped "
          f"({targets} targets{note})")


if __name__ == "__main__":
    main()
