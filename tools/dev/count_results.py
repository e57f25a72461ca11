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
are); its cases count as their last attempt says. A target that failed on
every attempt is a failure, never flaky.

A Python unittest target has no XML of its own (Bazel writes one case for
the whole target); its test.log is read instead: "Ran N tests" gives the
cases, and each "FAIL:"/"ERROR:" block names a failing case with the last
line of its traceback.
"""
import os
import re
import sys
import xml.etree.ElementTree as ET

_RAN = re.compile(r"^Ran (\d+) tests? in ", re.M)
_SKIPPED = re.compile(r"^(?:OK|FAILED) \(.*?skipped=(\d+)", re.M)
_PROBLEM = re.compile(r"^(FAIL|ERROR): (\S+) \(([^)]*)\)$", re.M)
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Failure|Exit)\b")


def unittest_result(log_path):
    """(cases, skipped, [(case, message)]) from a unittest log, or None."""
    try:
        with open(log_path, errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    ran = _RAN.findall(text)
    if len(ran) != 1:
        return None
    skipped = _SKIPPED.search(text)
    problems = []
    starts = list(_PROBLEM.finditer(text))
    for n, m in enumerate(starts):
        end = starts[n + 1].start() if n + 1 < len(starts) else _RAN.search(
            text).start()
        message = ""
        for line in text[m.end():end].splitlines():
            if _EXCEPTION.match(line):
                message = line.strip()
        problems.append((f"{m.group(3)}", message or m.group(1)))
    return int(ran[0]), int(skipped.group(1)) if skipped else 0, problems


def attempt_failures(log_path):
    """The failing cases of one failed attempt: from its XML, else from its
    unittest log."""
    xml = log_path[:-len(".log")] + ".xml"
    found = []
    try:
        for case in ET.parse(xml).iter("testcase"):
            problem = case.find("failure")
            if problem is None:
                problem = case.find("error")
            if problem is not None:
                found.append((f"{case.get('classname', '')}."
                              f"{case.get('name', '')}",
                              (problem.get("message") or "").strip()))
    except (ET.ParseError, OSError):
        pass
    result = unittest_result(log_path)
    if result is not None and result[2]:
        return result[2]
    return found or [("(target)", "failed; see the log")]


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
        cases = list(tree.iter("testcase"))
        final_failed = any(
            int(suite.get("failures", 0)) + int(suite.get("errors", 0)) > 0
            for suite in tree.iter("testsuite"))
        # A target that failed and then passed on a retry
        # (--flaky_test_attempts): Bazel keeps the failed attempts' logs.
        attempts = os.path.join(root, package, name, "test_attempts")
        failed_attempts = sorted(
            f for f in os.listdir(attempts)
            if f.endswith(".log")) if os.path.isdir(attempts) else []
        if failed_attempts:
            if final_failed:
                print(f"{label}: FAILED {target} on all "
                      f"{len(failed_attempts) + 1} attempts; the earlier "
                      f"ones' logs: {attempts}", file=sys.stderr)
            else:
                flaky.append(target)
                print(f"{label}: FLAKY {target}: passed after "
                      f"{len(failed_attempts)} failed attempt(s); their logs: "
                      f"{attempts}", file=sys.stderr)
            for log in failed_attempts:
                for case, message in attempt_failures(
                        os.path.join(attempts, log)):
                    print(f"{label}:   {log}: {case}: {message[:200]}",
                          file=sys.stderr)
        # Bazel's own XML for a non-gtest target: one case named after it.
        # A unittest log says more.
        if (len(cases) == 1 and cases[0].get("name") == f"{package}/{name}"):
            result = unittest_result(
                os.path.join(root, package, name, "test.log"))
            if result is not None:
                total, skips, problems = result
                for case, message in problems:
                    print(f"{label}: FAILED {target} {case}: {message[:200]}",
                          file=sys.stderr)
                failed += len(problems)
                skipped += skips
                passed += max(0, total - skips - len(problems))
                if final_failed and not problems:
                    print(f"{label}: FAILED {target}: exited with an error "
                          f"after its {total} cases passed", file=sys.stderr)
                    failed += 1
                continue
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
