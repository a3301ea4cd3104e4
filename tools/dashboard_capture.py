#!/usr/bin/python3
"""A screenshot-like capture of the Grafana dashboard conf/grafana/uroce-dashboard.json,
without Grafana (Debian 12 does not package it): two uroced joined by memif, each
exporting /metrics (--metrics), daemon a dropping a share of arriving frames (UROCE_RX_LOSS),
a Prometheus of its own scraping both every second, and stock perftest through
uroce-run --service for a scenario of about 75 s (one paced WRITE flow, an idle gap,
three flows of different kinds that join and leave). Every target of every panel is then
evaluated with /api/v1/query_range over the scenario, and the dashboard drawn as one
PNG in its grid layout; a JSON beside it holds each series' max and last, and the
scenario's phases and flows with their times.

usage: dashboard_capture.py --build DIR [--out DIR] [--smoke] [--keep]
  --build DIR  the build folder with apps/uroced/uroced and apps/run/uroce-run
  --out DIR    where dashboard.png and dashboard.json go (default docs/plots)
  --smoke      a 15 s scenario, output to a temporary folder (removed), then checks that
               every panel got at least one series with samples
  --keep       keep the scratch folder (logs, Prometheus's data) and say where

Exit status: 0 the capture is written, every flow ran and every panel got at least one
series with samples; 1 otherwise (what failed on stderr; a capture may still be written).
Every process started here is stopped, and the scratch folder removed, on the way out,
also after Ctrl-C, SIGTERM or an error.
"""
import argparse
import datetime
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DASHBOARD = os.path.join(ROOT, "conf/grafana/uroce-dashboard.json")
LOSS = "0.002,7"  # daemon a drops one arriving frame in 500 (seed 7)
RATE_INTERVAL = "5s"  # what Grafana makes of $__rate_interval at a 1 s scrape
INSTANCES = {"a": "uroced-a", "b": "uroced-b"}  # each daemon's instance label (the scrape config sets it)
DPDK_RUNTIME = "/var/run/dpdk"


class Failure(Exception):
    """Something that stops the capture; its text is the one-line reason."""


# --- processes -------------------------------------------------------------


class Processes:
    """Children started in sessions of their own (a perftest under uroce-run is a
    grandchild: the whole group is stopped), each writing to a log in the scratch
    folder."""

    def __init__(self, folder):
        self.folder = folder
        self.running = []  # (name, Popen), in start order

    def start(self, name, argv, env=None):
        log = open(os.path.join(self.folder, name + ".log"), "w")
        try:
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                 env=env, start_new_session=True)
        finally:
            log.close()
        self.running.append((name, p))
        return p

    def log(self, name):
        try:
            with open(os.path.join(self.folder, name + ".log"), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def stop(self, p, limit=30.0):
        """SIGTERM to p's group, then SIGKILL if it has not ended within `limit`."""
        if p.poll() is None:
            self._signal(p, signal.SIGTERM)
            try:
                p.wait(limit)
            except subprocess.TimeoutExpired:
                pass
        # Whatever is left of the group (a program uroce-run started), and p itself.
        self._signal(p, signal.SIGKILL)
        p.wait()

    def stop_all(self):
        # The last started first: programs before the daemons they use.
        for _, p in reversed(self.running):
            self.stop(p)
        self.running = []

    @staticmethod
    def _signal(p, sig):
        try:
            os.killpg(p.pid, sig)  # its own session: its pid is its group's id
        except ProcessLookupError:
            pass


def free_tcp_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tcp_listening(port):
    """Whether a socket listens on TCP `port` here (/proc/net/tcp{,6}: state 0A)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        return True
        except OSError:
            pass
    return False


def wait_until(what, check, limit, poll=0.2):
    end = time.monotonic() + limit
    while not check():
        if time.monotonic() > end:
            raise Failure(what)
        time.sleep(poll)


def telemetry(path, command):
    """DPDK telemetry's answer to `command` on socket `path` ("" if none)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
            s.settimeout(5)
            s.connect(path)
            s.recv(65536)  # its greeting
            s.send(command.encode())
            return s.recv(1 << 20).decode(errors="replace")
    except OSError:
        return ""


# --- the daemons and Prometheus ---------------------------------------------


class Daemon:
    """uroced on one end of the memif link in `folder`: a (the server end, 10.0.0.1,
    CPU 0) or b (10.0.0.2, CPU 1)."""

    def __init__(self, procs, uroced, folder, name, extra=(), env=None):
        server = name == "a"
        self.name = name
        self.prefix = "uroce-dash-%s-%d" % (name, os.getpid())
        self.socket = os.path.join(folder, name + ".sock")
        self.telemetry = os.path.join(DPDK_RUNTIME, self.prefix, "dpdk_telemetry.v2")
        self.procs = procs
        eal = ("--no-huge --no-shconf --no-pci -m 512 --log-level=lib.eal:error -l %d "
               "--vdev=net_memif0,role=%s,socket=%s/memif.sock,bsize=8192 --file-prefix=%s"
               % (0 if server else 1, "server" if server else "client", folder, self.prefix))
        argv = [uroced, "--eal", eal, "--ip", "10.0.0.%d/24" % (1 if server else 2), "--socket", self.socket,
                "--cc", "dcqcn"] + list(extra)
        self.log_name = "uroced-" + name
        self.process = procs.start(self.log_name, argv, env)

    def wait_ready(self, limit=60):
        def ready():
            if self.process.poll() is not None:
                raise Failure("uroced %s exited (%s): %s" % (self.name, self.process.returncode, self.last_line()))
            return "uroced: ready" in self.procs.log(self.log_name)
        wait_until("uroced %s did not get ready within %d s: %s" % (self.name, limit, self.last_line()), ready, limit)

    def wait_link_up(self, limit=60):
        wait_until("uroced %s's memif link did not come up within %d s" % (self.name, limit),
                   lambda: '"status":"UP"' in telemetry(self.telemetry, "/ethdev/link_status,0"), limit)

    def last_line(self):
        lines = self.procs.log(self.log_name).strip().splitlines()
        return lines[-1] if lines else "(no output)"

    def remove_runtime(self):
        shutil.rmtree(os.path.join(DPDK_RUNTIME, self.prefix), ignore_errors=True)


class Prometheus:
    """A Prometheus server of its own on loopback, scraping each daemon's /metrics
    every second; `targets` maps an instance label to the port of its /metrics (the
    label stands for the host name an operator would see)."""

    def __init__(self, procs, folder, targets):
        self.port = free_tcp_port()
        self.instances = sorted(targets)
        config = os.path.join(folder, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
                    "scrape_configs:\n  - job_name: uroced\n    static_configs:\n")
            for instance, port in sorted(targets.items()):
                f.write("      - targets: ['127.0.0.1:%d']\n        labels: {instance: '%s'}\n" % (port, instance))
        self.process = procs.start("prometheus", [
            "prometheus", "--config.file=" + config, "--storage.tsdb.path=" + os.path.join(folder, "tsdb"),
            "--web.listen-address=127.0.0.1:%d" % self.port, "--log.level=warn"])
        self.procs = procs

    def get(self, path, params=None):
        url = "http://127.0.0.1:%d%s" % (self.port, path)
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                return r.read().decode()
        except OSError as e:
            if hasattr(e, "read"):  # an HTTP error: Prometheus says why in the body
                return e.read().decode(errors="replace")
            return ""

    def query(self, expr, at=None):
        params = {"query": expr}
        if at is not None:
            params["time"] = "%.3f" % at
        return json.loads(self.get("/api/v1/query", params) or "{}")

    def query_range(self, expr, start, end, step=1):
        return json.loads(self.get("/api/v1/query_range",
                                   {"query": expr, "start": "%.3f" % start, "end": "%.3f" % end, "step": step}) or "{}")

    def wait_first_scrape(self, limit=60):
        def ready():
            if self.process.poll() is not None:
                raise Failure("prometheus exited (%s): %s" % (self.process.returncode,
                                                              self.procs.log("prometheus").strip()[-300:]))
            return "Ready" in self.get("/-/ready")
        wait_until("prometheus did not get ready within %d s" % limit, ready, limit)

        def scraped():
            r = self.query('up{job="uroced"}').get("data", {}).get("result", [])
            return sorted(s["metric"]["instance"] for s in r if s["value"][1] == "1") == self.instances
        wait_until("prometheus did not scrape both daemons within %d s: %s" % (
            limit, self.procs.log("prometheus")[-300:]), scraped, limit, 0.25)

    def version(self):
        try:
            return json.loads(self.get("/api/v1/status/buildinfo"))["data"]["version"]
        except (ValueError, KeyError):
            return "?"


# --- the scenario -------------------------------------------------------------


def flow(name, at, tool, args, seconds):
    """A perftest pair that starts `at` s into the scenario and runs `seconds` s."""
    return {"name": name, "at": at, "tool": tool, "args": args, "seconds": seconds}


# Long enough that each phase spans several 5 s rate windows; each flow is paced by
# perftest, so its rate holds on a loaded 2-core machine (both cores also run a
# daemon's polling engine).
FULL = {
    "length": 76,
    "flows": [
        flow("WRITE 64 KiB, 1 Gb/s each way", 5, "ib_write_bw",
             "-s 65536 -b --rate_limit=1 --rate_limit_type=SW", 20),
        flow("WRITE 64 KiB on 4 QPs, 2 Gb/s", 34, "ib_write_bw",
             "-s 65536 -q 4 --rate_limit=2 --rate_limit_type=SW", 30),
        flow("SEND 4 KiB, 0.5 Gb/s", 40, "ib_send_bw", "-s 4096 --rate_limit=0.5 --rate_limit_type=SW", 20),
        flow("READ 64 KiB, 1 Gb/s", 46, "ib_read_bw", "-s 65536 --rate_limit=1 --rate_limit_type=SW", 12),
    ],
}
SMOKE = {
    "length": 15,
    "flows": [
        flow("WRITE 64 KiB, 1 Gb/s each way", 3, "ib_write_bw",
             "-s 65536 -b --rate_limit=1 --rate_limit_type=SW", 7),
    ],
}


def perftest_gbps(log):
    """The average Gb/s of perftest's result line (#bytes #iterations peak average
    msgrate), or None."""
    rows = re.findall(r"^\s*\d+\s+\d+\s+[\d.]+\s+([\d.]+)\s+[\d.]+\s*$", log, re.M)
    return float(rows[-1]) if rows else None


def run_scenario(procs, uroce_run, a, b, scenario):
    """Runs the scenario's flows at their times; their start, end and outcome, with
    times in seconds from the scenario's start (unix time `start` in the result)."""
    start = time.time()
    pending = sorted(scenario["flows"], key=lambda f: f["at"])
    running = []  # (flow, server, client, record)
    done = []
    while pending or running or time.time() < start + scenario["length"]:
        now = time.time() - start
        while pending and pending[0]["at"] <= now:
            f = pending.pop(0)
            port = free_tcp_port()
            cmd = "%s -d uroce0 -x 1 -D %d --report_gbits -p %d %s" % (f["tool"], f["seconds"], port, f["args"])
            tag = "flow%d" % (len(done) + len(running) + 1)
            limit = ["timeout", str(f["seconds"] + 60)]
            server = procs.start(tag + "-server", limit + [uroce_run, "--service", "--socket", a.socket]
                                 + cmd.split())
            wait_until("%s's server did not listen on TCP %d within 30 s: %s" % (f["tool"], port, procs.log(
                tag + "-server").strip()[-300:]), lambda: tcp_listening(port) or server.poll() is not None, 30, 0.02)
            client = procs.start(tag + "-client", limit + [uroce_run, "--service", "--socket", b.socket]
                                 + cmd.split() + ["127.0.0.1"])
            record = {"name": f["name"], "command": cmd, "start_s": round(time.time() - start, 1), "tag": tag}
            running.append((f, server, client, record))
        for item in list(running):
            f, server, client, record = item
            if client.poll() is None:
                continue
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                procs.stop(server)
            record["end_s"] = round(time.time() - start, 1)
            record["exit"] = [server.returncode, client.returncode]
            record["perftest_gbps"] = perftest_gbps(procs.log(record["tag"] + "-client"))
            if client.returncode != 0 or server.returncode != 0:
                record["error"] = (procs.log(record["tag"] + "-client").strip().splitlines() or ["?"])[-1]
                print("dashboard-capture: %s failed (%s): %s" % (record["name"], record["exit"], record["error"]),
                      file=sys.stderr)
            running.remove(item)
            done.append(record)
        time.sleep(0.1)
    return start, time.time(), sorted(done, key=lambda r: r["start_s"])


def phases_of(flows, length):
    """The scenario cut where the set of running flows changes: each phase's start,
    end and flows (none: idle)."""
    cuts = sorted({0.0, float(length)} | {r["start_s"] for r in flows} | {r["end_s"] for r in flows})
    phases = []
    for s, e in zip(cuts, cuts[1:]):
        if e - s < 0.5:
            continue
        names = [r["name"] for r in flows if r["start_s"] <= s and r["end_s"] >= e]
        if phases and phases[-1]["flows"] == names:
            phases[-1]["end_s"] = e
        else:
            phases.append({"start_s": s, "end_s": e, "flows": names})
    return phases


# --- the dashboard's queries -------------------------------------------------------


def expand(expr):
    """The target as Grafana would send it with $instance and $port on All."""
    expr = expr.replace("$__rate_interval", RATE_INTERVAL)
    return re.sub(r"\$\{?(port|instance)\}?", ".*", expr)


def legend(fmt, labels):
    if not fmt:
        return "{" + ", ".join('%s="%s"' % kv for kv in sorted(labels.items()) if kv[0] != "__name__") + "}"
    text = re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt)
    return re.sub(r"\s+", " ", text).strip()


def number(text):
    try:
        v = float(text)
    except ValueError:
        return math.nan
    return v if math.isfinite(v) else math.nan


def evaluate(prom, dashboard, start, end):
    """Each panel with its series: (timestamps, values, legend, labels) per series."""
    panels = []
    for panel in sorted(dashboard["panels"], key=lambda p: (p["gridPos"]["y"], p["gridPos"]["x"])):
        entry = {"panel": panel, "series": [], "errors": []}
        for target in panel.get("targets", []):
            expr = expand(target["expr"])
            answer = prom.query_range(expr, start, end)
            if answer.get("status") != "success":
                entry["errors"].append("%s: %s" % (target["refId"], answer.get("error", "no answer")))
                continue
            for s in answer["data"]["result"]:
                times = [float(t) for t, _ in s["values"]]
                values = [number(v) for _, v in s["values"]]
                entry["series"].append({"ref": target["refId"], "legend": legend(target.get("legendFormat"),
                                                                                   s["metric"]),
                                        "labels": s["metric"], "times": times, "values": values})
        panels.append(entry)
    return panels


def summary(series):
    finite = [v for v in series["values"] if not math.isnan(v)]
    return {"legend": series["legend"], "target": series["ref"], "labels": series["labels"],
            "samples": len(finite), "max": significant(max(finite)) if finite else None,
            "last": significant(finite[-1]) if finite else None}


def significant(v):
    """v to 4 significant digits (the JSON stays short and diffs stay small)."""
    return float("%.4g" % v)


# --- drawing ---------------------------------------------------------------------

# Grafana's dark theme and its classic palette.
CANVAS = "#111217"
PANEL = "#181b1f"
BORDER = "#2c3235"
TEXT = "#ccccdc"
DIM = "#8e8e9e"
GRID = "#24292e"
PALETTE = ["#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9", "#705da0",
           "#37872d", "#fade2a", "#447ebc", "#c15c17", "#890f02", "#0a437c", "#6d1f62", "#584477"]
ANNOTATION = "#00d3ff"

# Grafana's units: SI prefixes on a suffix ("bps" is bits per second), and "short".
UNITS = {"bps": ("b/s", ["", "k", "M", "G", "T"]), "pps": ("p/s", ["", "k", "M", "G", "T"]),
         "short": ("", ["", " K", " Mil", " Bil", " Tri"])}


def unit_scale(unit, peak):
    """(divisor, suffix) for a value `peak` of `unit`."""
    suffix, prefixes = UNITS.get(unit, UNITS["short"])
    step = 0
    while step + 1 < len(prefixes) and abs(peak) >= 1000 ** (step + 1):
        step += 1
    sep = " " if suffix else ""
    return 1000.0 ** step, (sep + prefixes[step] + suffix) if suffix else prefixes[step]


def fmt_value(v, unit):
    """v as Grafana shows a value of `unit`: scaled on its own (800 Mb/s, 1 Gb/s)."""
    if v is None or math.isnan(v):
        return "-"
    divisor, suffix = unit_scale(unit, v)
    x = v / divisor
    text = ("%.3g" % x) if abs(x) < 1000 else "%.0f" % x
    if "e" in text:  # below 0.0001: fixed decimals, 3 significant
        text = "%.*f" % (2 - math.floor(math.log10(abs(x))), x)
    return text + suffix


def draw(panels, phases, flows, scenario_start, start, end, header, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch
    from matplotlib.ticker import FuncFormatter

    plt.rcParams.update({"font.family": "DejaVu Sans", "font.size": 8, "text.color": TEXT,
                         "axes.labelcolor": DIM, "xtick.color": DIM, "ytick.color": DIM})
    rows = max(p["panel"]["gridPos"]["y"] + p["panel"]["gridPos"]["h"] for p in panels)
    # The header: its title, then the setup and the phases, wrapped to the width.
    lines = [(l, DIM) for l in textwrap.wrap(header[1], 245)] + \
        [(l, ANNOTATION) for l in textwrap.wrap(header[2], 245)]
    width_px, unit_px, gap_px = 1600, 34, 8
    head_px = 40 + 17 * len(lines)
    height_px = head_px + rows * unit_px + gap_px
    dpi = 100
    fig = plt.figure(figsize=(width_px / dpi, height_px / dpi), dpi=dpi, facecolor=CANVAS)

    def frac(x_px, y_px, w_px, h_px):  # top-left pixel box -> figure fraction box
        return [x_px / width_px, 1 - (y_px + h_px) / height_px, w_px / width_px, h_px / height_px]

    fig.text(gap_px / width_px, 1 - 22 / height_px, header[0], fontsize=13, color=TEXT, weight="bold", va="center")
    for i, (text, color) in enumerate(lines):
        fig.text(gap_px / width_px, 1 - (44 + 17 * i) / height_px, text, fontsize=8.5, color=color, va="center")

    col_px = (width_px - gap_px) / 24
    to_num = lambda t: mdates.date2num(datetime.datetime.fromtimestamp(t))
    x_lo, x_hi = to_num(start), to_num(end)
    for entry in panels:
        g = entry["panel"]["gridPos"]
        box = (gap_px + g["x"] * col_px, head_px + g["y"] * unit_px,  # left, top, width, height
               g["w"] * col_px - gap_px, g["h"] * unit_px - gap_px)
        fig.patches.append(FancyBboxPatch((box[0] / width_px, 1 - (box[1] + box[3]) / height_px), box[2] / width_px,
                                          box[3] / height_px, boxstyle="round,pad=0,rounding_size=0.002",
                                          transform=fig.transFigure, facecolor=PANEL, edgecolor=BORDER, lw=1,
                                          zorder=-10))  # under the plot
        fig.text((box[0] + 10) / width_px, 1 - (box[1] + 14) / height_px, entry["panel"]["title"], fontsize=10,
                 color=TEXT, weight="bold", va="center")
        legend_px = 0.45 * box[2]
        ax = fig.add_axes(frac(box[0] + 62, box[1] + 30, box[2] - legend_px - 70, box[3] - 52))
        ax.set_facecolor(PANEL)
        for side in ax.spines.values():
            side.set_visible(False)
        ax.grid(True, color=GRID, lw=0.8)
        ax.tick_params(length=0, labelsize=7.5)
        ax.set_xlim(x_lo, x_hi)
        ax.xaxis.set_major_locator(mdates.SecondLocator(bysecond=range(0, 60, 15)))
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))

        unit = entry["panel"].get("fieldConfig", {}).get("defaults", {}).get("unit", "short")
        finite = [v for s in entry["series"] for v in s["values"] if not math.isnan(v)]
        peak = max(finite, default=0.0)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _, u=unit: fmt_value(v, u)))
        low = min(finite, default=0.0)
        ax.set_ylim(min(0.0, low * 1.1), peak * 1.12 if peak > 0 else 1.0)

        # As Grafana's annotations: the phases with traffic shaded, each flow's
        # start a dashed line with the flow's number (the header names them).
        for ph in phases:
            if ph["flows"]:
                ax.axvspan(to_num(scenario_start + ph["start_s"]), to_num(scenario_start + ph["end_s"]),
                           color=ANNOTATION, alpha=0.045, lw=0)
        for n, f in enumerate(flows, 1):
            x = to_num(scenario_start + f["start_s"])
            ax.axvline(x, color=ANNOTATION, lw=0.7, ls=(0, (3, 3)), alpha=0.55)
            ax.text(x, 1.0, " %d" % n, transform=ax.get_xaxis_transform(), color=ANNOTATION, fontsize=7,
                    va="top", ha="left")

        rows_legend = []
        for i, s in enumerate(entry["series"]):
            color = PALETTE[i % len(PALETTE)]
            xs = [to_num(t) for t in s["times"]]
            ax.plot(xs, s["values"], color=color, lw=1.2)  # no fill: the dashboard sets no fillOpacity
            sm = summary(s)
            rows_legend.append((color, s["legend"], fmt_value(sm["last"], unit), fmt_value(sm["max"], unit)))
        if not entry["series"]:
            ax.text(0.5, 0.5, "No data", transform=ax.transAxes, ha="center", va="center", fontsize=11, color=DIM)
            ax.set_yticklabels([])

        # The legend as the dashboard asks for it: a table on the right, last and max.
        lx = box[0] + box[2] - legend_px + 6
        ly = box[1] + 34
        cols = (lx + 14, box[0] + box[2] - 74, box[0] + box[2] - 10)
        fig.text(cols[1] / width_px, 1 - ly / height_px, "Last *", ha="right", va="center", fontsize=7.5,
                 color=ANNOTATION)
        fig.text(cols[2] / width_px, 1 - ly / height_px, "Max", ha="right", va="center", fontsize=7.5,
                 color=ANNOTATION)
        max_chars = int((cols[1] - cols[0] - 60) / 5.0)
        line_px = 12
        room = int((box[1] + box[3] - 6 - ly) / line_px)
        for i, (color, name, last, top) in enumerate(rows_legend[:room]):
            y = 1 - (ly + (i + 1) * line_px) / height_px
            if i == room - 1 and len(rows_legend) > room:
                fig.text(cols[0] / width_px, y, "+%d more" % (len(rows_legend) - i), va="center", fontsize=7.5,
                         color=DIM)
                break
            fig.patches.append(FancyBboxPatch(((lx) / width_px, y - 1.5 / height_px), 9 / width_px, 3 / height_px,
                                              boxstyle="square,pad=0", transform=fig.transFigure, facecolor=color,
                                              lw=0))
            if len(name) > max_chars:
                name = name[:max_chars - 1] + "…"
            fig.text(cols[0] / width_px, y, name, va="center", fontsize=7, color=TEXT)
            fig.text(cols[1] / width_px, y, last, ha="right", va="center", fontsize=7, color=TEXT)
            fig.text(cols[2] / width_px, y, top, ha="right", va="center", fontsize=7, color=TEXT)

    fig.savefig(path, dpi=dpi, facecolor=CANVAS)
    plt.close(fig)
    shrink_png(path)


def shrink_png(path):
    """The PNG with a palette of 256 colours (a third of the size; the dark flat
    style loses nothing), if Pillow is there."""
    try:
        from PIL import Image
    except ImportError:
        return
    with Image.open(path) as im:
        small = im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    small.save(path, optimize=True)


# --- the whole ----------------------------------------------------------------------


def capture(args, scratch):
    uroced = os.path.join(args.build, "apps/uroced/uroced")
    uroce_run = os.path.join(args.build, "apps/run/uroce-run")
    with open(DASHBOARD) as f:
        dashboard = json.load(f)
    scenario = SMOKE if args.smoke else FULL
    procs = Processes(scratch)
    daemons = []
    try:
        metrics = {name: free_tcp_port() for name in INSTANCES}
        # Only daemon a's arrivals are lossy: a counts the drops and sends NAKs,
        # b receives them and retransmits.
        loss = {"a": dict(os.environ, UROCE_RX_LOSS=LOSS), "b": None}
        for name in INSTANCES:
            daemons.append(Daemon(procs, uroced, scratch, name, ["--metrics", "127.0.0.1:%d" % metrics[name]],
                                  loss[name]))
            daemons[-1].wait_ready()
        for d in daemons:
            d.wait_link_up()
        prom = Prometheus(procs, scratch, {INSTANCES[name]: port for name, port in metrics.items()})
        prom.wait_first_scrape()
        print("dashboard-capture: daemons up, Prometheus scraping; a %d s scenario" % scenario["length"])

        scenario_start, scenario_end, flows = run_scenario(procs, uroce_run, daemons[0], daemons[1], scenario)
        phases = phases_of(flows, round(scenario_end - scenario_start, 1))
        # Its last seconds scraped before they are read.
        time.sleep(2.5)
        start, end = math.floor(scenario_start), math.ceil(scenario_end)
        panels = evaluate(prom, dashboard, start, end)
        version = prom.version()
    finally:
        # A second Ctrl-C must not cut the cleanup short.
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        procs.stop_all()
        for d in daemons:
            d.remove_runtime()
        signal.signal(signal.SIGINT, previous)

    os.makedirs(args.out, exist_ok=True)
    when = datetime.datetime.fromtimestamp(scenario_start).strftime("%Y-%m-%d %H:%M")
    header = ("uroce  (conf/grafana/uroce-dashboard.json)",
              "%s, %d s.  Two uroced joined by memif (--cc dcqcn), uroced-a dropping %s of arriving frames "
              "(UROCE_RX_LOSS), both scraped every 1 s by Prometheus %s; stock perftest through uroce-run "
              "--service.  $__rate_interval = %s, instance = port = All." % (
                  when, round(scenario_end - scenario_start), LOSS.split(",")[0], version, RATE_INTERVAL),
              "Shaded: traffic.  Flows (perftest, servers on uroced-a):  " + ";   ".join(
                  "%d  %s-%s s  %s" % (n, round(f["start_s"]), round(f["end_s"]), f["name"])
                  for n, f in enumerate(flows, 1)))
    png = os.path.join(args.out, "dashboard.png")
    draw(panels, phases, flows, scenario_start, start, end, header, png)
    report = {
        "dashboard": "conf/grafana/uroce-dashboard.json",
        "captured": datetime.datetime.fromtimestamp(scenario_start).isoformat(timespec="seconds"),
        "prometheus": version,
        "scrape_interval_s": 1,
        "rate_interval": RATE_INTERVAL,
        "setup": "two uroced joined by memif, --cc dcqcn, both scraped: a (10.0.0.1, instance %s, CPU 0) "
                 "with UROCE_RX_LOSS=%s, b (10.0.0.2, instance %s, CPU 1); perftest servers on a, clients on b"
                 % (INSTANCES["a"], LOSS, INSTANCES["b"]),
        "scenario": {"length_s": round(scenario_end - scenario_start, 1), "start_unix": round(scenario_start, 3),
                     "phases": phases,
                     "flows": [{k: v for k, v in r.items() if k != "tag"} for r in flows]},
        "panels": [{"id": e["panel"]["id"], "title": e["panel"]["title"],
                    "unit": e["panel"].get("fieldConfig", {}).get("defaults", {}).get("unit", "short"),
                    "errors": e["errors"], "series": [summary(s) for s in e["series"]]} for e in panels],
    }
    with open(os.path.join(args.out, "dashboard.json"), "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    return report, png


def check(report):
    """Every panel has at least one series with samples; the flows all ran. Problems as lines."""
    problems = []
    for p in report["panels"]:
        if p["errors"]:
            problems.append("panel %r: %s" % (p["title"], "; ".join(p["errors"])))
        elif not any(s["samples"] > 0 for s in p["series"]):
            problems.append("panel %r: no series with data" % p["title"])
    for f in report["scenario"]["flows"]:
        if f.get("error"):
            problems.append("flow %r failed: %s" % (f["name"], f["error"]))
    return problems


def print_report(report):
    for p in report["panels"]:
        moving = [s for s in p["series"] if s["max"]]
        print("  %-36s %2d series, %2d above zero%s" % (p["title"], len(p["series"]), len(moving),
                                                        ("  errors: " + "; ".join(p["errors"])) if p["errors"] else ""))
    for f in report["scenario"]["flows"]:
        print("  flow %-32s %5.1f-%5.1f s  perftest %s Gb/s%s" % (
            f["name"], f["start_s"], f["end_s"], f["perftest_gbps"], ("  FAILED: " + f["error"]) if f.get("error")
            else ""))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", required=True)
    parser.add_argument("--out", default=os.path.join(ROOT, "docs/plots"))
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()

    # SIGTERM and SIGHUP unwind like Ctrl-C does, through the cleanup below (and
    # SIGINT does too when started in the background, where it came in ignored).
    def stop(signum, _frame):
        raise KeyboardInterrupt("signal %d" % signum)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)

    scratch = tempfile.mkdtemp(prefix="uroce-dash-")
    if args.smoke:
        args.out = os.path.join(scratch, "out")
    status = 1
    try:
        report, png = capture(args, scratch)
        print_report(report)
        problems = check(report)
        for line in problems:
            print("dashboard-capture: " + line, file=sys.stderr)
        print("dashboard-capture: %s (%d KiB) and dashboard.json%s" % (
            png, os.path.getsize(png) // 1024, " (removed at the end; --keep keeps them)" if args.smoke and not
            args.keep else ""))
        status = 1 if problems else 0
        if args.smoke:
            print("dashboard-capture: smoke %s" % ("FAILED" if problems else "passed"))
    except Failure as e:
        print("dashboard-capture: %s" % e, file=sys.stderr)
    except KeyboardInterrupt:
        print("dashboard-capture: interrupted; cleaned up", file=sys.stderr)
        status = 130
    finally:
        if args.keep:
            print("dashboard-capture: scratch folder kept: %s" % scratch, file=sys.stderr)
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
