#!/usr/bin/env python3
"""What watching uroce costs its traffic: uroce-perf's 64 KiB WRITEs (both
devices in one process on net_ring, one core) with its Prometheus exporter
on, run in turns without a scraper, with a scrape loop at 10 Hz on
/metrics, and with uroce-stat refreshing every 0.1 s (telemetry). A turn
runs every variant back to back (in reverse order every other turn), and
each variant's figure in a turn is divided by the same turn's run alone:
the machine drifts by several per cent over a minute (other work, the
clock), and a ratio of neighbours cancels most of that. The cost is
1 - the median of a variant's ratios.

usage: tools/bench_metrics.py [--build DIR] [--runs N] [--iters N] [--json OUT]
       [--idle-qps N] [--qps N]
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request


# uroce-perf's engines and application run on CPU 0 (-l 0); the scrapers
# stay off it, as they would be on a host that gives uroce its cores.
OFF_LCORE = sorted(os.sched_getaffinity(0) - {0})


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Scraper(threading.Thread):
    """GET url every `period` s (on a fixed schedule, not period after the
    last answer) until stopped; counts the answers and their bytes."""

    def __init__(self, url, period):
        super().__init__(daemon=True)
        self.url, self.period = url, period
        self.stop = threading.Event()
        self.scrapes = self.failures = self.bytes = 0
        self.seconds = []
        self.first = self.last = None  # when the first and the last answer came

    def hz(self):
        return (self.scrapes - 1) / (self.last - self.first) if self.scrapes > 1 and self.last > self.first else 0.0

    def run(self):
        # A scraper is another program, on another core (Prometheus, on
        # another host or core): never on the lcore uroce-perf polls on.
        if OFF_LCORE:
            os.sched_setaffinity(0, OFF_LCORE)
        next_at = time.monotonic()
        while not self.stop.is_set():
            start = time.monotonic()
            try:
                with urllib.request.urlopen(self.url, timeout=2) as r:
                    self.bytes += len(r.read())
                self.scrapes += 1
                self.last = time.monotonic()
                self.first = self.first or self.last
                self.seconds.append(self.last - start)
            except OSError:
                self.failures += 1  # before the exporter listens, or after it goes
            next_at += self.period
            if next_at < time.monotonic():  # late (the machine was busy): no burst to catch up
                next_at = time.monotonic()
            self.stop.wait(max(0.0, next_at - time.monotonic()))


def run_perf(args, variant, out_json, port):
    perf = os.path.join(args.build, "apps/perf/uroce-perf")
    prefix = f"bench-metrics-{os.getpid()}"
    # One core for both devices' engines and the application (-l 0); the
    # exporter's thread and the scrapers may take the other.
    cmd = [perf, "--no-huge", "--no-shconf", "--no-pci", "-l", "0", "-m", "512", f"--file-prefix={prefix}",
           "--", "--ring", "write", "-s", "65536", "-n", str(args.iters), "-t", "64",
           "--metrics", f"127.0.0.1:{port}", "--json", out_json]
    if args.qps > 1:
        cmd += ["-q", str(args.qps)]
    if args.idle_qps:
        cmd += ["--idle-qps", str(args.idle_qps)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    scraper = stat = None
    if variant in ("prometheus_10hz", "http_only_10hz"):
        # http_only_10hz: the same requests for "/", which collects
        # nothing: what the HTTP exchange alone costs.
        path = "/metrics" if variant == "prometheus_10hz" else "/"
        scraper = Scraper(f"http://127.0.0.1:{port}{path}", 0.1)
        scraper.start()
    elif variant == "uroce_stat_10hz":
        # The process's telemetry socket is found by its file prefix.
        stat = subprocess.Popen([os.path.join(args.build, "apps/stat/uroce-stat"), "--file-prefix", prefix,
                                 "--interval", "0.1", "--json"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL,
                                preexec_fn=(lambda: os.sched_setaffinity(0, OFF_LCORE)) if OFF_LCORE else None)
    out, _ = proc.communicate()
    if scraper:
        scraper.stop.set()
        scraper.join()
    if stat:
        stat.terminate()
        stat.wait()
    shutil.rmtree(f"/var/run/dpdk/{prefix}", ignore_errors=True)  # its EAL runtime folder
    if proc.returncode != 0:
        sys.exit(f"bench-metrics: uroce-perf failed ({variant}):\n{out}")
    with open(out_json) as f:
        r = json.load(f)
    row = {"bw_gbps": r["bw_gbps"], "wall_s": r["wall_s"], "cpu_s": r["cpu_s"]}
    if scraper:
        row.update(scrapes=scraper.scrapes, failures=scraper.failures,
                   scrape_hz=scraper.hz(),
                   page_bytes=scraper.bytes // max(1, scraper.scrapes),
                   scrape_ms_median=1e3 * statistics.median(scraper.seconds) if scraper.seconds else None)
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default="build")
    p.add_argument("--runs", type=int, default=11)
    p.add_argument("--iters", type=int, default=100000)
    p.add_argument("--qps", type=int, default=1)
    p.add_argument("--idle-qps", type=int, default=0)
    p.add_argument("--json", default="build/bench-metrics.json")
    p.add_argument("--variants", default="alone,prometheus_10hz,uroce_stat_10hz")
    args = p.parse_args()
    variants = args.variants.split(",")
    if "uroce_stat_10hz" in variants and not os.access(os.path.join(args.build, "apps/stat/uroce-stat"), os.X_OK):
        variants.remove("uroce_stat_10hz")
    rows = {v: [] for v in variants}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.runs):
            for v in (variants if r % 2 == 0 else list(reversed(variants))):
                rows[v].append(run_perf(args, v, os.path.join(tmp, f"{v}.{r}.json"), free_port()))
                print(f"turn {r + 1}/{args.runs} {v:16s} {rows[v][-1]['bw_gbps']:7.2f} Gb/s", flush=True)
    base = statistics.median(x["bw_gbps"] for x in rows["alone"])
    result = {"tool": "bench-metrics", "size": 65536, "iters": args.iters, "qps": args.qps,
              "idle_qps": args.idle_qps, "runs": args.runs, "variants": {}}
    print(f"\n64 KiB WRITEs, uroce-perf --ring (one core), {args.qps} QP(s), {args.idle_qps} idle, "
          f"median of {args.runs} turns; ratios to the same turn's run alone")
    for v in variants:
        med = statistics.median(x["bw_gbps"] for x in rows[v])
        ratios = [x["bw_gbps"] / a["bw_gbps"] for x, a in zip(rows[v], rows["alone"])]
        ratio = statistics.median(ratios)
        entry = {"bw_gbps_median": med, "ratio_to_alone": ratio, "ratio_min": min(ratios), "ratio_max": max(ratios),
                 "cost": 1 - ratio, "turns": rows[v]}
        line = (f"  {v:16s} {med:7.2f} Gb/s  ratio {ratio:.3f} (turns {min(ratios):.3f}-{max(ratios):.3f})"
                f"  cost {100 * (1 - ratio):+.1f}%")
        if v in ("prometheus_10hz", "http_only_10hz"):
            hz = statistics.median(x["scrape_hz"] for x in rows[v])
            size = statistics.median(x["page_bytes"] for x in rows[v])
            ms = statistics.median(x["scrape_ms_median"] or 0 for x in rows[v])
            entry.update(scrape_hz_median=hz, page_bytes_median=size, scrape_ms_median=ms)
            line += f"  ({hz:.1f} scrapes/s, {size / 1024:.0f} KiB a page, {ms:.1f} ms a scrape)"
        result["variants"][v] = entry
        print(line)
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(result, f, indent=2)
    print(f"written {args.json}")


if __name__ == "__main__":
    main()
