#!/usr/bin/python3
"""Counts individual GoogleTest cases from the XML reports of one run.

usage: gtest_summary.py RESULTS_DIR MESON_TESTLOG_JSON

A test binary that failed without writing its report (a crash, a timeout)
counts as one failed case under its own name. Reports named RUN-<binary>.xml
come from another run of the same tests (tools/tsan.sh writes tsan-*.xml):
their cases count too, named "RUN: Suite.case". Prints the failed cases, then
"N skipped" when some were skipped, then exactly "N passed, N failed" as the
last line (CI reads that line with a strict pattern).
Exit status 0 only when nothing failed and at least one case ran.
"""
import json
import os
import signal
import sys
import xml.etree.ElementTree as ET


TAIL_LINES = 15


def how_it_ended(returncode):
    """", killed by SIGSEGV" for a negative return code, ", exit 3" else."""
    if returncode is None:
        return ""
    if returncode < 0:
        try:
            return ", killed by %s" % signal.Signals(-returncode).name
        except ValueError:
            return ", killed by signal %d" % -returncode
    return ", exit %d" % returncode


def main():
    results_dir, testlog = sys.argv[1], sys.argv[2]
    passed, failed, skipped = 0, [], []
    tails = []  # (test, its output) of binaries that ended without a report
    reported = {}  # binary -> failed cases in its report
    for name in sorted(os.listdir(results_dir)):
        if not name.endswith(".xml"):
            continue
        reported[name[:-4]] = 0
        # "tsan-test_x.xml": another run's report (binaries have no "-").
        run = name.split("-", 1)[0] + ": " if "-" in name else ""
        try:
            root = ET.parse(os.path.join(results_dir, name)).getroot()
        except ET.ParseError as e:
            failed.append("%s (unreadable report: %s)" % (name, e))
            continue
        for case in root.iter("testcase"):
            full = "%s%s.%s" % (run, case.get("classname"), case.get("name"))
            if case.find("failure") is not None:
                failed.append(full)
                reported[name[:-4]] += 1
            elif case.get("result") == "skipped" or case.get("status") == "notrun" or case.find("skipped") is not None:
                skipped.append(full)
            else:
                passed += 1
    # Binaries that did not finish cleanly.
    if os.path.exists(testlog):
        with open(testlog) as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                t = json.loads(line)
                # The binary's own name, which names its report ("command" in
                # meson's log; the test's name differs: memif_teardown runs
                # test_memif_teardown).
                cmd = t.get("command") or t.get("cmd")
                exe = os.path.basename(cmd[0]) if cmd else t["name"]
                if t.get("result") not in ("OK", "EXPECTEDFAIL", "SKIP"):
                    if exe not in reported:
                        failed.append("%s (%s%s, no report: crashed or timed out)" %
                                      (t["name"], t.get("result"), how_it_ended(t.get("returncode"))))
                        tails.append((t["name"], t.get("stdout") or ""))
                    elif reported[exe] == 0:
                        # Every case passed, yet the binary failed (a crash
                        # at exit, a leak checker): count it.
                        failed.append("%s (%s after all its cases passed)" % (t["name"], t.get("result")))
    else:
        failed.append("meson test log missing: %s" % testlog)
    # The end of what each crashed binary printed, before the summary: CI's
    # log may keep only its last lines.
    for name, out in tails:
        lines = out.rstrip("\n").split("\n")[-TAIL_LINES:]
        print("--- last %d lines of %s ---" % (len(lines), name))
        for line in lines:
            print("  " + line[:300])
    for f in failed:
        print("FAILED:", f)
    for s in skipped:
        print("SKIPPED:", s)
    if skipped:
        print("%d skipped" % len(skipped))
    print("%d passed, %d failed" % (passed, len(failed)))
    return 0 if not failed and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
