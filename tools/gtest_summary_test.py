#!/usr/bin/env python3
"""tools/gtest_summary.py (the suite's last line, which CI reads) on made-up
runs: reports and a meson test log written here, one run per case. Each case
states the summary's last line, its exit status and what else it must (and
must not) print: failed cases by name, a binary that died without its report
with how it ended and the end of its output, one that failed after all its
cases passed. Exits 1 naming the cases that disagree.

usage: gtest_summary_test.py   (with GTEST_OUTPUT=xml:DIR/ it also writes a
one-case report there, for tools/test.sh's count)
"""
import json
import os
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
from case_report import report_case  # noqa: E402

summary = os.path.join(here, "gtest_summary.py")


def report(cases):
    """A GoogleTest XML report of (suite, name, failed) cases."""
    body = "".join('<testcase name="%s" classname="%s">%s</testcase>' %
                   (name, suite, '<failure message="no"/>' if failed else "") for suite, name, failed in cases)
    return '<?xml version="1.0"?><testsuites><testsuite name="s">%s</testsuite></testsuites>' % body


def run(reports, tests):
    """gtest_summary.py over `reports` ({binary: xml}) and meson log lines
    `tests` ([(name, binary, result, returncode, output)]): exit, output."""
    with tempfile.TemporaryDirectory() as d:
        res = os.path.join(d, "results")
        os.makedirs(res)
        for binary, xml in reports.items():
            with open(os.path.join(res, binary + ".xml"), "w") as f:
                f.write(xml)
        log = os.path.join(d, "testlog.json")
        with open(log, "w") as f:
            for name, binary, result, rc, out in tests:
                f.write(json.dumps({"name": name, "command": ["/b/test/" + binary], "result": result,
                                    "returncode": rc, "stdout": out}) + "\n")
        p = subprocess.run([sys.executable, summary, res, log], capture_output=True, text=True)
        return p.returncode, p.stdout


def main():
    crash_output = "".join("line %d\n" % i for i in range(1, 31)) + "*** fatal signal 11 (SEGV)\n"
    ok = ("a", "test_a", "OK", 0, "")
    cases = [
        # (name, reports, tests, exit, last line, must print, must not print)
        ("all pass", {"test_a": report([("S", "x", False), ("S", "y", False)])}, [ok], 0,
         "2 passed, 0 failed", [], ["FAILED"]),
        ("a failed case by name", {"test_a": report([("S", "x", False), ("S", "y", True)])},
         [("a", "test_a", "FAIL", 1, "")], 1, "1 passed, 1 failed", ["FAILED: S.y"], ["no report"]),
        ("a crash: the signal and the end of its output",
         {"test_a": report([("S", "x", False)])},
         [ok, ("crashy", "test_crashy", "FAIL", -11, crash_output)], 1, "1 passed, 1 failed",
         ["FAILED: crashy (FAIL, killed by SIGSEGV, no report: crashed or timed out)",
          "--- last 15 lines of crashy ---", "  line 30", "  line 17", "*** fatal signal 11"],
         ["line 16\n", "line 1\n"]),
        ("an exit status without a report", {}, [("quits", "test_quits", "FAIL", 3, "bye\n")], 1,
         "0 passed, 1 failed", ["FAILED: quits (FAIL, exit 3, no report", "  bye"], []),
        ("a timeout", {}, [("slow", "test_slow", "TIMEOUT", None, "waiting\n")], 1, "0 passed, 1 failed",
         ["FAILED: slow (TIMEOUT, no report", "  waiting"], ["killed by", "exit "]),
        ("a failure after every case passed", {"test_a": report([("S", "x", False)])},
         [("a", "test_a", "FAIL", 1, "")], 1, "1 passed, 1 failed",
         ["FAILED: a (FAIL after all its cases passed)"], ["last 15 lines"]),
        ("nothing ran", {}, [], 1, "0 passed, 0 failed", [], []),
    ]
    failures = []
    for name, reports, tests, rc, last, wanted, unwanted in cases:
        got, out = run(reports, tests)
        lines = out.rstrip("\n").split("\n")
        wrong = []
        if got != rc:
            wrong.append("exit %d, expected %d" % (got, rc))
        if lines[-1] != last:
            wrong.append("last line %r, expected %r" % (lines[-1], last))
        wrong += ["lacks %r" % w for w in wanted if w not in out]
        wrong += ["has %r" % u for u in unwanted if u in out]
        if wrong:
            failures.append(name)
            print("FAIL %s: %s\n%s" % (name, "; ".join(wrong), out))
        else:
            print("ok   %s" % name)
    print("%d of %d cases as expected" % (len(cases) - len(failures), len(cases)))
    report_case("GtestSummary", "CountsAndReportsCrashes", failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
