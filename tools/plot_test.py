#!/usr/bin/python3
"""The test of tools/plot.py (meson test plot_tool): it draws a chart, a
uroce-sim run (a switch scenario's and a fabric scenario's) and a sweep
from the small inputs in tools/testdata/plot/ and writes PNGs
(their signature, and a picture of some size, not an empty canvas), and it
refuses bad input with exit status 2 and one line, writing nothing.

usage: plot_test.py   (with GTEST_OUTPUT=xml:DIR/ it also writes a one-case
report there, as doc_links.py does, for tools/test.sh's count)
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from case_report import report_case  # noqa: E402

PLOT = os.path.join(HERE, "plot.py")
DATA = os.path.join(HERE, "testdata", "plot")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run(*args):
    return subprocess.run([PLOT, *args], capture_output=True, text=True)


def check(tmp):
    """The failures, as lines."""
    failures = []

    def drawn(what, args, out):
        r = run(*args)
        if r.returncode != 0:
            failures.append("%s: exit %d: %s" % (what, r.returncode, r.stderr.strip()))
            return
        try:
            with open(out, "rb") as f:
                data = f.read()
        except OSError as e:
            failures.append("%s: %s not written (%s)" % (what, out, e.strerror))
            return
        if not data.startswith(PNG_MAGIC):
            failures.append("%s: %s is not a PNG" % (what, out))
        elif len(data) < 20000:  # lines, labels and a legend take more than a blank canvas
            failures.append("%s: %s holds only %d bytes" % (what, out, len(data)))

    drawn("chart", ["chart", os.path.join(DATA, "chart.json"), os.path.join(tmp, "chart.png")],
          os.path.join(tmp, "chart.png"))
    drawn("sim", ["sim", os.path.join(DATA, "sim"), os.path.join(tmp, "sim.png")], os.path.join(tmp, "sim.png"))
    drawn("fabric", ["sim", os.path.join(DATA, "fabric"), os.path.join(tmp, "fabric.png")],
          os.path.join(tmp, "fabric.png"))
    drawn("sweep", ["sweep", os.path.join(DATA, "sweep"), os.path.join(tmp, "sweep.png")], os.path.join(tmp, "sweep.png"))

    bad = os.path.join(tmp, "bad.json")
    with open(bad, "w") as f:
        f.write('{"series": [{"name": "empty", "points": []}]}')
    for what, args in (("a series without points", ["chart", bad, os.path.join(tmp, "bad.png")]),
                       ("a folder without a run", ["sim", tmp, os.path.join(tmp, "bad.png")]),
                       ("a folder without a sweep", ["sweep", tmp, os.path.join(tmp, "bad.png")]),
                       ("no arguments", [])):
        r = run(*args)
        if r.returncode != 2 or len(r.stderr.strip().splitlines()) < 1:
            failures.append("%s: exit %d (expected 2 and a message)" % (what, r.returncode))
        if os.path.exists(os.path.join(tmp, "bad.png")):
            failures.append("%s: a PNG was written" % what)
    return failures


def main():
    with tempfile.TemporaryDirectory(prefix="uroce-plot-test.") as tmp:
        failures = check(tmp)
    for f in failures:
        print(f)
    print("plot_tool: %s" % ("FAILED" if failures else "ok"))
    report_case("PlotTool", "DrawsChartAndSimRun", failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
