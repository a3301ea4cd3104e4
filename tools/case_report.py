#!/usr/bin/env python3
"""One GoogleTest-style XML report holding one case, for the runs of
tools/test.sh that are not GoogleTest binaries or that died without a report
of their own (tsan.sh, asan.sh, fuzz.sh); tools/gtest_summary.py counts it.

usage: case_report.py PATH SUITE NAME [FAILURE_MESSAGE]
  (with a message the case failed, without one it passed)
"""
import os
import sys
from xml.sax.saxutils import quoteattr


def write_case(path, suite, name, failure=None):
    failed = 0 if failure is None else 1
    body = "" if failure is None else "<failure message=%s/>" % quoteattr(failure)
    with open(path, "w") as f:
        f.write('<?xml version="1.0" encoding="UTF-8"?>\n<testsuites tests="1" failures="%d">\n'
                '  <testsuite name=%s tests="1" failures="%d">\n'
                '    <testcase name=%s classname=%s>%s</testcase>\n'
                '  </testsuite>\n</testsuites>\n'
                % (failed, quoteattr(suite), failed, quoteattr(name), quoteattr(suite), body))


def report_case(suite, name, failures):
    """The one-case report of a tool's own test, where GTEST_OUTPUT=xml:DIR/
    (as tools/test.sh sets it) asks for reports: DIR/<script>.xml, failed
    when `failures` (a list of strings) is not empty. Nothing otherwise."""
    out = os.environ.get("GTEST_OUTPUT", "")
    if out.startswith("xml:") and out.endswith("/"):
        os.makedirs(out[4:], exist_ok=True)
        write_case(os.path.join(out[4:], os.path.basename(sys.argv[0]) + ".xml"), suite, name,
                   "; ".join(failures) if failures else None)


if __name__ == "__main__":
    if len(sys.argv) not in (4, 5):
        sys.exit("usage: case_report.py PATH SUITE NAME [FAILURE_MESSAGE]")
    write_case(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) == 5 else None)
