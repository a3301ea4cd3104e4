#!/usr/bin/python3
"""Issue 31's scenarios on uroce-sim with each congestion control side by side,
in one run: the tables of docs/congestion.md ("Both controllers side by side")
on stdout, every run's figures in OUT/cc-report.json, and the plots of one
run per scenario and controller in OUT (tools/plot.py sim).

usage: cc_report.py SIM_BINARY OUT [--seeds N] [--jobs N] [--quick]
  --seeds N  seeds per fairness case (default 20)
  --jobs N   runs at once (default 2)
  --quick    2 seeds, shorter runs and no plots: checks that the report runs

The controllers:
  dcqcn     conf/dcqcn.conf (a QP starts at line rate, a window cap at 16 us)
  dcqcn-w2  DCQCN as it was before issue 31 (conf/sim/dcqcn-wave2.conf: a
            QP starts at an eighth of line rate, no cap, fixed increase steps)
  delay     delay-based control (conf/delay.conf's values at the link's rate)
Each runs on a switch that ECN-marks (Kmin/Kmax); `delay` also on one that
never marks (Kmin = Kmax beyond any buffer), where DCQCN has nothing to go by.

Exit status: 0 every run kept its data intact; 1 otherwise (the table says
which); 2 bad usage.
"""
import concurrent.futures
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CONTROLLERS = {
    "dcqcn": ["--cc", "dcqcn"],
    "dcqcn-w2": ["--cc", "dcqcn", "--dcqcn", os.path.join(ROOT, "conf/sim/dcqcn-wave2.conf")],
    "delay": ["--cc", "delay"],
}
NO_MARKS = "kmin_kb = 1000000\nkmax_kb = 1000000\n"


def scenario_file(folder, name, lines):
    path = os.path.join(folder, name + ".sc")
    with open(path, "w") as f:
        f.write(lines)
    return path


class Report:
    def __init__(self, sim, out, seeds, jobs, quick):
        self.sim, self.out, self.seeds, self.jobs, self.quick = sim, out, seeds, jobs, quick
        self.work = os.path.join(out, "runs")
        os.makedirs(self.work, exist_ok=True)
        self.runs = []  # (key, argv, run folder)

    def add(self, key, scenario, cc, extra=()):
        folder = os.path.join(self.work, "-".join(str(k) for k in key))
        self.runs.append((key, [self.sim, scenario] + CONTROLLERS[cc] + list(extra) + ["--out", folder], folder))

    def run_all(self):
        def one(run):
            key, argv, folder = run
            p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            summary = None
            path = os.path.join(folder, "summary.json")
            if os.path.exists(path):
                with open(path) as f:
                    summary = json.load(f)
            return key, {"status": p.returncode, "folder": folder, "summary": summary,
                         "output": p.stdout[-2000:] if p.returncode != 0 else ""}

        with concurrent.futures.ThreadPoolExecutor(self.jobs) as pool:
            return dict(pool.map(one, self.runs))


def first_us_share(folder, gbps, until_us):
    """A flow alone: the mean share of the link over the samples up to
    `until_us`, and the end of the first sample at 0.95 of the link or more."""
    rows = []
    with open(os.path.join(folder, "timeseries.csv")) as f:
        next(f)
        for line in f:
            t, flow, rate = line.split(",")[:3]
            if flow == "0":
                rows.append((int(t), int(rate) / (gbps * 1e9)))
    early = [r for t, r in rows if t <= until_us]
    reached = next((t for t, r in rows if r >= 0.95), None)
    return sum(early) / len(early), reached


def main(argv):
    args = argv[1:]
    if len(args) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    sim, out = args[0], args[1]
    seeds, jobs, quick = 20, 2, False
    i = 2
    while i < len(args):
        if args[i] == "--seeds" and i + 1 < len(args):
            seeds, i = int(args[i + 1]), i + 2
        elif args[i] == "--jobs" and i + 1 < len(args):
            jobs, i = int(args[i + 1]), i + 2
        elif args[i] == "--quick":
            quick, seeds, i = True, 2, i + 1
        else:
            print("cc_report.py: unknown argument '%s' (see --help in the file's head)" % args[i], file=sys.stderr)
            return 2
    os.makedirs(out, exist_ok=True)
    r = Report(sim, out, seeds, jobs, quick)
    sc_dir = r.work

    # One flow alone at 25, 100 and 400 Gb/s; the switch's Kmin/Kmax and
    # buffer scaled with the link as HPCC's evaluation does (100/400 KB per
    # 25 Gb/s; 16 MB per 50 Gb/s).
    rates = [25, 100, 400]
    for g in rates:
        sc = scenario_file(sc_dir, "alone-%d" % g,
                           "base = fairness\nflows = 1\ngbps = %d\nduration_us = %d\nsample_us = 10\n"
                           "kmin_kb = %d\nkmax_kb = %d\nbuffer_kb = %d\n"
                           % (g, 500 if quick else 2000, 4 * g, 16 * g, 320 * g))
        for cc in CONTROLLERS:
            r.add(("alone", g, cc), sc, cc)

    # Fairness: 2-16 flows started together at 100 Gb/s, 20 seeds each.
    counts = [2, 3, 4, 8, 16]
    duration = 4000 if quick else 20000
    marking = "base = fairness\ngbps = 100\nduration_us = %d\nsample_us = 100\nbuffer_kb = 32000\n" % duration
    for n in counts:
        sc = scenario_file(sc_dir, "fair-%d" % n, marking + "flows = %d\nkmin_kb = 400\nkmax_kb = 1600\n" % n)
        quiet = scenario_file(sc_dir, "fair-nomark-%d" % n, marking + "flows = %d\n" % n + NO_MARKS)
        for seed in range(1, seeds + 1):
            for cc in CONTROLLERS:
                r.add(("fair", n, cc, seed), sc, cc, ["--seed", str(seed)])
            r.add(("fair", n, "delay-nomark", seed), quiet, "delay", ["--seed", str(seed)])

    # Incast N-to-1 at 10 Gb/s into a 4 MB buffer (the built-in scenario),
    # without PFC; with PFC at 64-to-1.
    fan = [8, 16, 32, 64]
    for n in fan:
        for cc in CONTROLLERS:
            r.add(("incast", n, cc), "incast", cc, ["--flows", str(n)])
        r.add(("incast", n, "delay-nomark"), scenario_file(sc_dir, "incast-nomark-%d" % n,
                                                           "base = incast\nflows = %d\n" % n + NO_MARKS), "delay")
    for cc in CONTROLLERS:
        r.add(("incast-pfc", 64, cc), "incast", cc, ["--flows", "64", "--pfc", "on"])
    # Beyond 64 (a scenario file: --flows stops at 64), where drops begin.
    wide = [] if quick else [96, 128, 160, 192, 224, 256]
    for n in wide:
        sc = scenario_file(sc_dir, "incast-%d" % n, "base = incast\nflows = %d\n" % n)
        for cc in ("dcqcn", "delay"):
            r.add(("incast", n, cc), sc, cc)

    # Flows joining and leaving (the built-in: 3 flows, 50 ms phases).
    for cc in CONTROLLERS:
        r.add(("join-leave", cc), "join-leave", cc)
    r.add(("join-leave", "delay-nomark"),
          scenario_file(sc_dir, "join-leave-nomark", "base = join-leave\n" + NO_MARKS), "delay")

    # The victim: a 16-to-1 incast with PFC, and a flow from the first
    # sender's host to an idle port.
    for cc in CONTROLLERS:
        r.add(("victim", cc), "victim", cc, ["--pfc", "on"])
    r.add(("victim", "off"), "victim", "dcqcn", ["--pfc", "on", "--dcqcn", "off"])

    results = r.run_all()
    bad = [k for k, v in results.items() if v["status"] != 0 or not v["summary"] or not v["summary"]["data_intact"]]
    table = {}

    def s(*key):
        return results[key]["summary"]

    print("## One flow alone (DCQCN on a marking switch, 10 us samples)\n")
    print("| line rate | controller | first 100 us (share of the link) | first sample >= 0.95 | whole run |")
    print("| --- | --- | --- | --- | --- |")
    for g in rates:
        for cc in CONTROLLERS:
            mean, reached = first_us_share(results[("alone", g, cc)]["folder"], g, 100)
            util = s("alone", g, cc)["utilisation"]
            table["alone-%d-%s" % (g, cc)] = {"first_100us": mean, "reached_us": reached, "utilisation": util}
            print("| %d Gb/s | %s | %.2f | %s | %.2f |" % (g, cc, mean, "%d us" % reached if reached else "never",
                                                             util))

    print("\n## Fairness at 100 Gb/s, %d seeds each (Jain and utilisation over the last half)\n" % seeds)
    print("| flows | controller | Jain, worst seed | Jain, median | utilisation, worst | drops, all seeds "
          "| largest queue | largest queue, last half |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for n in counts:
        for cc in list(CONTROLLERS) + ["delay-nomark"]:
            runs = [s("fair", n, cc, seed) for seed in range(1, seeds + 1)]
            jain = sorted(x["jain_last_half"] for x in runs)
            util = min(x["utilisation"] for x in runs)
            drops = sum(x["drops"] for x in runs)
            queue = max(x["max_queue_bytes"] for x in runs)
            late = max(x["max_queue_last_half_bytes"] for x in runs)
            table["fair-%d-%s" % (n, cc)] = {"jain_min": jain[0], "jain_median": jain[len(jain) // 2],
                                             "utilisation_min": util, "drops": drops, "max_queue_bytes": queue,
                                             "max_queue_last_half_bytes": late}
            print("| %d | %s | %.3f | %.3f | %.3f | %d | %.0f KB | %.0f KB |" % (
                n, cc, jain[0], jain[len(jain) // 2], util, drops, queue / 1e3, late / 1e3))

    print("\n## Incast N-to-1 at 10 Gb/s, 4 MB buffer\n")
    print("| N | PFC | controller | drops | utilisation | largest queue | most paused sender | Jain |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    rows = [("incast", n, cc) for n in fan for cc in list(CONTROLLERS) + ["delay-nomark"]]
    rows += [("incast", n, cc) for n in wide for cc in ("dcqcn", "delay")]
    rows += [("incast-pfc", 64, cc) for cc in CONTROLLERS]
    for key in rows:
        x = s(*key)
        paused = max(x["paused_us_per_sender"]) / x["duration_us"] if x["pfc"] else None
        table["%s-%d-%s" % key] = {"drops": x["drops"], "utilisation": x["utilisation"],
                                   "max_queue_bytes": x["max_queue_bytes"], "paused_share": paused,
                                   "jain": x["jain_last_half"]}
        print("| %d | %s | %s | %d | %.2f | %.2f MB | %s | %.3f |" % (
            key[1], "on" if x["pfc"] else "off", key[2], x["drops"], x["utilisation"], x["max_queue_bytes"] / 1e6,
            "%.1f%% of the run" % (100 * paused) if paused is not None else "-", x["jain_last_half"]))

    print("\n## Flows joining and leaving (3 flows at 10 Gb/s, each phase's last half)\n")
    print("| controller | Jain per phase | utilisation per phase | drops |")
    print("| --- | --- | --- | --- |")
    for cc in list(CONTROLLERS) + ["delay-nomark"]:
        x = s("join-leave", cc)
        phases = x["phases"]
        table["join-leave-%s" % cc] = {"phases": phases, "drops": x["drops"]}
        print("| %s | %s | %s | %d |" % (cc, " ".join("%.2f" % p["jain"] for p in phases),
                                         " ".join("%.2f" % p["utilisation"] for p in phases), x["drops"]))

    print("\n## The victim (16-to-1 incast with PFC, and a flow from the first sender's host to an idle port)\n")
    print("| controller | victim over the last half | its due | share of its due | pauses | drops |")
    print("| --- | --- | --- | --- | --- | --- |")
    for cc in list(CONTROLLERS) + ["off"]:
        x = s("victim", cc)
        # Its host's link carries incast flow 0 too, due 1/16 of the
        # bottleneck: the victim is due the rest of that link.
        due = x["bottleneck_gbps"] * 1e9 * (1 - 1 / x["flows"])
        share = x["victim_last_half_bps"] / due
        table["victim-%s" % cc] = {"victim_bps": x["victim_last_half_bps"], "due_bps": due, "share": share,
                                   "pauses": x["pauses"], "drops": x["drops"]}
        print("| %s | %.2f Gb/s | %.2f Gb/s | %.2f | %d | %d |" % (
            cc if cc != "off" else "none (PFC alone)", x["victim_last_half_bps"] / 1e9, due / 1e9, share, x["pauses"],
            x["drops"]))

    if not quick:
        for cc in list(CONTROLLERS) + ["off"]:  # delay-nomark draws as delay does: no mark reaches it
            for key in [("alone", 100, cc), ("fair", 8, cc, 1), ("incast", 64, cc), ("join-leave", cc),
                        ("victim", cc)]:
                if key in results:
                    name = "cc-" + "-".join(str(k) for k in key[:3 if key[0] == "fair" else len(key)])
                    subprocess.run([sys.executable, os.path.join(HERE, "plot.py"), "sim", results[key]["folder"],
                                    os.path.join(out, name + ".png")], check=True)

    with open(os.path.join(out, "cc-report.json"), "w") as f:
        json.dump({"seeds": seeds, "quick": quick, "figures": table,
                   "failed": ["-".join(str(k) for k in key) for key in bad]}, f, indent=1)
    if bad:
        print("\nruns that failed or lost data:")
        for key in bad:
            print("  %s: status %d %s" % ("-".join(str(k) for k in key), results[key]["status"],
                                          results[key]["output"].strip().splitlines()[-1:] or ""))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
