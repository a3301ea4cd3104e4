#!/usr/bin/python3
"""The project's plots, drawn with matplotlib (Debian's python3-matplotlib,
which tools/setup.sh installs) from what the tools write.

usage: plot.py chart SPEC.json OUT.png
         a line chart of the performance report (tools/perf_report.py writes
         the spec): {"title", "x_label", "y_label", "x_log", "y_log",
         "series": [{"name", "points": [[x, y], ...]}, ...]}; only "series"
         is required, and every series needs points
       plot.py sim DIR [OUT.png]
         a uroce-sim run from DIR/summary.json and DIR/timeseries.csv (default
         OUT: DIR/plot.png): the flows' rates (mean over 0.5 ms) above, the
         bottleneck queue with Kmax (and the buffer when in range) below,
         with PFC the share of the senders' time paused under that
       plot.py sweep DIR [OUT.png]
         a uroce-sim sweep from DIR/sweep.json (default OUT: DIR/sweep.png):
         per loss rate (fabric) and transport, goodput with its ratio to the
         same transport's lossless run above, FCT p99 below; a refused run
         is marked as such

Exit status: 0 written; 2 bad usage or input (one line on stderr).
Runs with /usr/bin/python3 (Debian's, where the package installs matplotlib).
"""
import csv
import json
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, MaxNLocator, NullFormatter  # noqa: E402


class Bad(Exception):
    """Input the plot cannot be drawn from: one line for the user."""


# Colours of the flows (matplotlib's default cycle); a named last flow is black.
COLOURS = plt.rcParams["axes.prop_cycle"].by_key()["color"]
FIGURE = {"dpi": 100}
MARKERS = "os^Dv"  # a marker of its own per series, for print in grey


def power_of_two(v):
    """64, 1K, 64K, 1M: a power of two counted in K = 1024, as sizes are."""
    for unit, suffix in ((1 << 40, "T"), (1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")):
        if v >= unit:
            return "%g%s" % (v / unit, suffix)
    return "%g" % v


def short_number(v):
    """12500 as 12.5K, 2e6 as 2M; below 10,000 as it is."""
    for unit, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e4, "K")):
        if v >= unit:
            return "%g%s" % (v / (1e3 if suffix == "K" else unit), suffix)
    return "%g" % v


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as e:
        raise Bad("cannot read %s: %s" % (path, e.strerror))
    except json.JSONDecodeError as e:
        raise Bad("%s: bad JSON at line %d: %s" % (path, e.lineno, e.msg))


def chart(spec_path, out):
    spec = read_json(spec_path)
    if not isinstance(spec, dict) or not isinstance(spec.get("series"), list) or not spec["series"]:
        raise Bad("%s: no series" % spec_path)
    known = {"title", "x_label", "y_label", "x_log", "y_log", "series"}
    unknown = sorted(set(spec) - known)
    if unknown:
        raise Bad("%s: unknown key %r" % (spec_path, unknown[0]))
    fig, ax = plt.subplots(figsize=(10, 6), **FIGURE)
    all_x = []
    for i, s in enumerate(spec["series"]):
        points = s.get("points") if isinstance(s, dict) else None
        if not points or not all(isinstance(p, list) and len(p) == 2 for p in points):
            raise Bad("%s: series %d needs points [[x, y], ...]" % (spec_path, i + 1))
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        for axis, values in (("x", xs), ("y", ys)):
            if spec.get(axis + "_log") and min(values) <= 0:
                raise Bad("%s: series %d has a value <= 0 on the logarithmic %s axis" % (spec_path, i + 1, axis))
        all_x += xs
        ax.plot(xs, ys, marker=MARKERS[i % len(MARKERS)], markersize=5, label=s.get("name", "series %d" % (i + 1)))
    if spec.get("x_log"):
        # Message sizes and QP counts are powers of two: ticks at them, in K = 1024.
        if all(float(x).is_integer() and int(x) & (int(x) - 1) == 0 for x in all_x):
            ax.set_xscale("log", base=2)
            # Labels at the sizes measured, or at every few powers if they are many.
            lo, hi = (int(min(all_x)).bit_length() - 1, int(max(all_x)).bit_length() - 1)
            step = 1
            while (hi - lo) // step > 10:
                step += 1
            measured = sorted(set(all_x))
            ax.xaxis.set_major_locator(FixedLocator(
                measured if len(measured) <= 10 else [2.0 ** e for e in range(lo, hi + 1, step)]))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: power_of_two(v)))
            ax.xaxis.set_minor_locator(FixedLocator([2.0 ** e for e in range(lo, hi + 1)]))
            ax.xaxis.set_minor_formatter(NullFormatter())
        else:
            ax.set_xscale("log")
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: short_number(v)))
    if spec.get("y_log"):
        # Ticks at 1, 2 and 5 of each decade, written as plain numbers.
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: "%g" % v))
        ax.yaxis.set_minor_formatter(NullFormatter())
    else:
        ax.set_ylim(bottom=min(0, ax.get_ylim()[0]))
    ax.set_title(spec.get("title", ""), loc="left")
    ax.set_xlabel(spec.get("x_label", ""))
    ax.set_ylabel(spec.get("y_label", ""))
    ax.grid(True, which="major", color="#d7d7d7")
    ax.legend(loc="best", fontsize="small", framealpha=0.9)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def nice_ceil(x):
    """The smallest of 1, 2, 2.5 and 5 times a power of ten that is >= x."""
    if x <= 0:
        return 1
    p = 10 ** math.floor(math.log10(x))
    return next(m * p for m in (1, 2, 2.5, 5, 10) if m * p >= x * (1 - 1e-9))


def moving_mean(values, window):
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v - (values[i - window] if i >= window else 0)
        out.append(total / min(i + 1, window))
    return out


def sim_fabric(folder, out, summary):
    """A run of uroce-sim's loss or leafspine scenario: the goodput over
    time and, on a leaf-spine fabric, each spine link's utilisation."""
    path = os.path.join(folder, "timeseries.csv")
    times, goodput = [], []
    try:
        with open(path) as f:
            for row in csv.DictReader(f):
                times.append(int(row["t_us"]) / 1000)
                goodput.append(float(row["goodput_bps"]) / 1e9)
    except OSError as e:
        raise Bad("cannot read %s: %s" % (path, e.strerror))
    except (KeyError, ValueError) as e:
        raise Bad("%s: not uroce-sim's time series (%s)" % (path, e))
    if not times:
        raise Bad("%s: no samples" % path)
    links = summary.get("spine_links", [])
    panels = 2 if links else 1
    fig, axes = plt.subplots(panels, 1, figsize=(10, 6.4 if links else 3.6), layout="constrained", squeeze=False,
                             **FIGURE)
    axes = [a[0] for a in axes]
    ax = axes[0]
    window = max(1, 200 // summary.get("sample_us", 50))
    ax.plot(times, moving_mean(goodput, window), color="black", linewidth=1.2)
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("goodput, all flows (Gb/s)" + (",\nmean over 0.2 ms" if window > 1 else ""))
    ax.set_xlim(0, times[-1])
    ax.set_ylim(0, None)
    ax.annotate("FCT p50 %.0f us, p99 %.0f us, max %.0f us" % (summary.get("fct_p50_us", 0), summary.get(
        "fct_p99_us", 0), summary.get("fct_max_us", 0)), (0.01, 0.04), xycoords="axes fraction")
    if links:
        ax = axes[1]
        names = ["L%d-S%d" % (l["leaf"], l["spine"]) for l in links]
        x = range(len(links))
        ax.bar([i - 0.2 for i in x], [100 * l["up_utilisation"] for l in links], width=0.4, label="up (leaf to spine)",
               color=COLOURS[0])
        ax.bar([i + 0.2 for i in x], [100 * l["down_utilisation"] for l in links], width=0.4,
               label="down (spine to leaf)", color=COLOURS[1])
        ax.set_xticks(list(x), names)
        ax.set_ylabel("spine link utilisation (%)")
        ax.legend(fontsize="small", frameon=False)
    for ax in axes:
        ax.grid(True, color="#d7d7d7")
    fig.suptitle(summary.get("title", ""), x=0.01, ha="left")
    fig.savefig(out)
    plt.close(fig)


def sim(folder, out):
    summary = read_json(os.path.join(folder, "summary.json"))
    # The fabric scenarios' summaries (the switch's have goodput too).
    if "spine_links" in summary:
        return sim_fabric(folder, out, summary)
    try:
        sample_us = summary["sample_us"]
        gbps = summary["bottleneck_gbps"]
        kmax = summary["kmax_bytes"]
        buffer = summary["buffer_bytes"]
        pfc = summary["pfc"]
        senders = summary["flow_sender"]
    except KeyError as e:
        raise Bad("%s/summary.json: no %s (written by an older uroce-sim?)" % (folder, e))
    rates, queue, paused_us = {}, {}, {}  # per flow: per sample; per sample; per sender: cumulative
    path = os.path.join(folder, "timeseries.csv")
    try:
        with open(path) as f:
            for row in csv.DictReader(f):
                t, flow = int(row["t_us"]), int(row["flow"])
                rates.setdefault(flow, []).append(float(row["rate_bps"]))
                queue[t] = int(row["queue_bytes"])
                paused_us.setdefault(senders[flow], {})[t] = int(row["paused_us"])
    except OSError as e:
        raise Bad("cannot read %s: %s" % (path, e.strerror))
    except (KeyError, ValueError, IndexError) as e:
        raise Bad("%s: not uroce-sim's time series (%s)" % (path, e))
    if not rates:
        raise Bad("%s: no samples" % path)
    times = sorted(queue)
    ms = [t / 1000 for t in times]
    panels = 3 if pfc else 2
    fig, axes = plt.subplots(panels, 1, sharex=True, figsize=(10, 7.6 if pfc else 6.4), layout="constrained",
                             gridspec_kw={"height_ratios": [3, 1.6, 1][:panels]}, **FIGURE)
    # Each 50 us sample holds whole packets (a 4 KiB packet is 0.66 Gb/s of
    # it): the lines are the mean over the last 0.5 ms.
    window = max(1, 500 // sample_us)
    ax = axes[0]
    named_last = summary.get("last_flow_name", "")
    flows = sorted(rates)
    shown = flows[:8]
    if len(flows) > 8 and named_last:
        shown[-1] = flows[-1]
    for f in flows:
        last = named_last and f == flows[-1]
        colour = "black" if last else COLOURS[f % len(COLOURS)]
        label = (named_last if last else "flow %d" % f) if f in shown else None
        ax.plot(ms, [r / 1e9 for r in moving_mean(rates[f], window)], color=colour, linewidth=1.2,
                label=label, zorder=3 if last else 2)
    if len(flows) > len(shown):
        ax.plot([], [], " ", label="+%d more" % (len(flows) - len(shown)))
    ax.set_ylim(0, gbps * 1.05)
    ax.set_ylabel("rate (Gb/s)" + (",\nmean over 0.5 ms" if window > 1 else ""))
    # The legend in a row above the rates, where it hides no line.
    ax.legend(loc="lower right", bbox_to_anchor=(1, 1), ncol=len(shown) + (len(flows) > len(shown)),
              fontsize="small", frameon=False, handlelength=1.5, columnspacing=1.2)
    fig.suptitle(summary.get("title", ""), x=0.01, ha="left")

    ax = axes[1]
    ax.plot(ms, [queue[t] / 1000 for t in times], color="black", linewidth=1)
    # Up to a round figure above the peak and Kmax, so the buffer shows when near.
    top = nice_ceil(max(max(queue.values()), kmax) * 1.1)
    # Kmax's label under its line (over it near the bottom), the buffer's over.
    ax.axhline(kmax / 1000, color="tab:red", linewidth=1)
    ax.annotate("Kmax", (1, kmax / 1000), xycoords=("axes fraction", "data"),
                xytext=(-4, 3 if kmax < 0.15 * top else -12), textcoords="offset points", ha="right", color="tab:red",
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 1})
    if buffer <= top:
        ax.axhline(buffer / 1000, color="grey", linestyle="--", linewidth=1)
        ax.annotate("buffer", (1, buffer / 1000), xycoords=("axes fraction", "data"), xytext=(-4, 3),
                    textcoords="offset points", ha="right", color="grey",
                    bbox={"facecolor": "white", "edgecolor": "none", "pad": 1})
    ax.set_ylim(0, top / 1000)
    ax.set_ylabel("queue (KB)")

    if pfc:
        # The share of the senders' time paused in each sample, each host once.
        ax = axes[2]
        share = []
        for i, t in enumerate(times):
            before = times[i - 1] if i else None
            total = sum(p[t] - (p[before] if before is not None else 0) for p in paused_us.values())
            share.append(100 * total / (len(paused_us) * sample_us))
        ax.plot(ms, share, color="tab:red", linewidth=1)
        ax.set_ylim(-4, 105)  # a line at 0 (no pause) shows above the axis
        ax.set_ylabel("senders paused\n(PFC, % of time)")
    for ax in axes:
        ax.grid(True, color="#d7d7d7")
        ax.yaxis.set_major_locator(MaxNLocator(nbins=5))
        ax.set_xlim(0, ms[-1])
    axes[-1].set_xlabel("time (ms)")
    fig.align_ylabels(axes)
    fig.savefig(out)
    plt.close(fig)


def sweep(folder, out):
    """A uroce-sim sweep: grouped bars, one group per loss rate (one group
    on the switch), one bar per transport."""
    data = read_json(os.path.join(folder, "sweep.json"))
    runs = data.get("runs") if isinstance(data, dict) else None
    if not runs or not all(isinstance(r, dict) and "transport" in r and "outcome" in r for r in runs):
        raise Bad("%s: not uroce-sim's sweep.json (no runs)" % os.path.join(folder, "sweep.json"))
    transports = list(dict.fromkeys(r["transport"] for r in runs))
    losses = list(dict.fromkeys(r.get("loss") for r in runs))
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6.4), layout="constrained", **FIGURE)
    width = 0.8 / len(transports)
    for t, name in enumerate(transports):
        for g, loss in enumerate(losses):
            run = next((r for r in runs if r["transport"] == name and r.get("loss") == loss), None)
            x = g - 0.4 + width * (t + 0.5)
            if run is None:
                continue
            if run["outcome"] not in ("ok", "failed"):
                top.annotate(run["outcome"], (x, 0), ha="center", va="bottom", rotation=90, fontsize="small")
                continue
            gbps = run["goodput_bps"] / 1e9
            label = name if g == 0 else None
            top.bar(x, gbps, width=width, color=COLOURS[t % len(COLOURS)], label=label)
            ratio = run.get("ratio_to_lossless")
            note = "%.2f" % ratio if ratio is not None else ""
            if not run.get("data_intact"):
                note += " NOT intact"
            if note:
                top.annotate(note, (x, gbps), ha="center", va="bottom", fontsize="small")
            bottom.bar(x, max(run["fct_p99_us"], 1e-3), width=width, color=COLOURS[t % len(COLOURS)])
    names = ["loss %g%%" % (100 * l) if l is not None else "" for l in losses]
    for ax in (top, bottom):
        ax.set_xticks(range(len(losses)), names)
        ax.grid(True, axis="y", color="#d7d7d7")
    top.set_ylabel("goodput (Gb/s)\n(ratio to lossless above)" if losses != [None] else "goodput (Gb/s)")
    top.legend(fontsize="small", frameon=False)
    bottom.set_yscale("log")
    bottom.yaxis.set_major_formatter(FuncFormatter(lambda v, _: "%g" % v))
    bottom.set_ylabel("FCT p99 (us)")
    fig.suptitle("uroce-sim sweep: %s, seed %s, DCQCN %s%s" % (
        data.get("scenario", "?"), data.get("seed", "?"), "on" if data.get("dcqcn") else "off",
        "" if data.get("complete") else " (incomplete)"), x=0.01, ha="left")
    fig.savefig(out)
    plt.close(fig)


def main(argv):
    try:
        if len(argv) == 4 and argv[1] == "chart":
            chart(argv[2], argv[3])
        elif len(argv) in (3, 4) and argv[1] == "sim":
            sim(argv[2], argv[3] if len(argv) == 4 else os.path.join(argv[2], "plot.png"))
        elif len(argv) in (3, 4) and argv[1] == "sweep":
            sweep(argv[2], argv[3] if len(argv) == 4 else os.path.join(argv[2], "sweep.png"))
        else:
            sys.stderr.write(__doc__.split("\n\n")[1] + "\n")
            return 2
    except Bad as e:
        sys.stderr.write("plot.py: %s\n" % e)
        return 2
    except OSError as e:
        sys.stderr.write("plot.py: cannot write: %s\n" % e)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
