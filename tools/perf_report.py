#!/usr/bin/env python3
"""The figures of tools/perf-report.sh: reads the run's results folder, writes
DOCS/perf/report.json, the plots (DOCS/perf/*.png, drawn by tools/plot.py) and
the generated part of DOCS/performance.md (between its report markers).

usage: perf_report.py RESULTS DOCS PLOT   (PLOT: tools/plot.py)
"""
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys

BEGIN = "<!-- perf-report:begin (tools/perf-report.sh writes this part) -->"
END = "<!-- perf-report:end -->"


def load(res, name):
    try:
        with open(os.path.join(res, name + ".json")) as f:
            return json.load(f)  # one object each (the tools write one line, iperf3 several)
    except (OSError, ValueError):
        return None


def text(res, name):
    try:
        with open(os.path.join(res, name)) as f:
            return f.read()
    except OSError:
        return ""


def get(d, *keys):
    for k in keys:
        if d is None:
            return None
        d = d.get(k) if isinstance(d, dict) else None
    return d


def median_of(res, prefix, *keys):
    """The median of PREFIX_r1, PREFIX_r2, ... (the runs that have the value), and the values."""
    vals = []
    for i in range(1, 21):
        v = get(load(res, f"{prefix}_r{i}"), *keys)
        if v is not None:
            vals.append(v)
    return (statistics.median(vals) if vals else None), vals


def median(res, prefix, *keys):
    return median_of(res, prefix, *keys)[0]


def ratio(a, b):
    return a / b if a is not None and b not in (None, 0) else None


def machine():
    model = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": model,
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30),
    }


def collect(res):
    r = {"machine": machine()}
    ring = r["ring"] = {}
    ring["headline_ratio"], ring["headline_ratios"] = median_of(res, "headline", "ratio_to_bare")
    ring["headline_gbps"], _ = median_of(res, "headline", "bw_gbps")
    ring["headline_ns_per_packet"], _ = median_of(res, "headline", "cpu_ns_per_packet")
    ring["bare_gbytes_s"], _ = median_of(res, "headline", "bare_icrc_copy_gbytes_s")
    ring["headline_page_faults"], _ = median_of(res, "headline", "page_faults")
    ring["headline_footprint_bytes"], _ = median_of(res, "headline", "footprint_bytes")
    ring["bare_at_footprint_gbytes_s"], _ = median_of(res, "headline", "bare_at_footprint_gbytes_s")
    ring["headline_ratio_at_footprint"], _ = median_of(res, "headline", "ratio_to_bare_at_footprint")
    ring["demo_ratio"], ring["demo_ratios"] = median_of(res, "demo", "ratio_to_bare")
    ring["demo_gbps"], _ = median_of(res, "demo", "bw_gbps")
    ring["demo_page_faults"], _ = median_of(res, "demo", "page_faults")
    ring["demo_verified"] = get(load(res, "demo_r1"), "verified")
    ring["verified"] = {op: get(load(res, f"verify_{op}"), "verified") for op in ("read", "send", "atomic")}
    ring["verified"]["write"] = ring["demo_verified"]
    ring["verified"]["write, 10,000 QPs"] = get(load(res, "verify_qps10000"), "verified")
    r["verified_two_processes"] = {
        "memif write 64 KiB, 4 QPs": get(load(res, "verify_memif"), "verified"),
        "memif send 8 B, 16 QPs": get(load(res, "verify_memif_send"), "verified"),
        "veth read 64 KiB": get(load(res, "verify_veth"), "verified"),
    }
    ring["bw"] = {}
    ring["lat_p50_us"] = {}
    for s in (8, 64, 512, 4096, 65536, 1048576):
        d = load(res, f"bw_{s}")
        if d:
            ring["bw"][s] = {"gbps": d["bw_gbps"], "mpps": d["msg_rate_mpps"], "ratio": d.get("ratio_to_bare")}
        d = load(res, f"lat_{s}")
        if d:
            ring["lat_p50_us"][s] = get(d, "lat_us", "p50")
    ring["rate8_mpps"] = get(load(res, "rate_ring"), "msg_rate_mpps")
    ring["qps"] = {}
    for s in (4096, 65536):
        base = median(res, f"qps_{s}_1", "bw_gbps")
        ring["qps"][s] = {}
        for q in (1, 10, 100, 1000, 10000):
            g, runs = median_of(res, f"qps_{s}_{q}", "bw_gbps")
            ring["qps"][s][q] = {"gbps": g, "ratio_to_1": ratio(g, base), "runs": runs}
    (g0, runs0), (g1, runs1) = median_of(res, "idle_0", "bw_gbps"), median_of(res, "idle_10000", "bw_gbps")
    ring["idle"] = {"gbps_0": g0, "gbps_10000": g1, "ratio": ratio(g1, g0), "turns": min(len(runs0), len(runs1)),
                    "turn_ratios": [b / a for a, b in zip(runs0, runs1) if a]}
    m16, m1 = median(res, "idle_10000", "idle_qp_bytes"), get(load(res, "idle_10000_d1"), "idle_qp_bytes")
    per_wqe_pair = (m16 - m1) / 15 if m16 is not None and m1 is not None else None
    m1r = get(load(res, "idle_10000_d1_rd1"), "idle_qp_bytes")
    ring["memory"] = {"per_qp_bytes_depth16": m16, "per_qp_bytes_depth1": m1,
                      "per_send_recv_wqe_pair_bytes": per_wqe_pair,
                      "per_qp_beyond_sq_rq_bytes": (m1 - per_wqe_pair) if per_wqe_pair is not None else None,
                      "per_qp_beyond_sq_rq_bytes_rd_atomic_1":
                          (m1r - per_wqe_pair) if per_wqe_pair is not None and m1r is not None else None}
    c1 = get(load(res, "cores1_c0"), "bw_gbps")
    c2a, c2b = get(load(res, "cores2_c0"), "bw_gbps"), get(load(res, "cores2_c1"), "bw_gbps")
    c2 = c2a + c2b if c2a is not None and c2b is not None else None
    ring["cores"] = {"1": c1, "2": c2, "2_each": [c2a, c2b], "scaling": ratio(c2, c1)}

    mem = r["memif"] = {}
    mem["raw_pingpong_p50_us"], mem["raw_pingpong_runs"] = median_of(res, "raw_pingpong_memif", "p50_us")
    mem["raw_rate82_mpps"], mem["raw_rate82_runs"] = median_of(res, "raw_rate82_memif", "rx_mpps")
    mem["raw_rate4170_gbps"] = get(load(res, "raw_rate4170_memif"), "rx_gbps")
    mem["lat8_p50_us"], mem["lat8_runs"] = median_of(res, "lat8_memif", "lat_us", "p50")
    mem["lat_ratio_to_raw"] = ratio(mem["lat8_p50_us"], mem["raw_pingpong_p50_us"])
    mem["rate8_mpps"], mem["rate8_runs"] = median_of(res, "rate8_memif", "msg_rate_mpps")
    mem["rate_ratio_to_raw"] = ratio(mem["rate8_mpps"], mem["raw_rate82_mpps"])
    mem["bw64k_gbps"] = get(load(res, "bw64k_memif"), "bw_gbps")
    mem["bw4k_gbps"] = get(load(res, "bw4k_memif"), "bw_gbps")
    # Stock perftest in both progress modes, in turns with uroce-perf on the
    # same link and cores: medians of the rounds.
    mem["bw64k_rounds_gbps"], mem["bw64k_rounds"] = median_of(res, "bw64k_memif", "bw_gbps")
    lat_p50, mem["lat8_rounds"] = median_of(res, "lat8s_memif", "lat_us", "p50")
    mem["lat8_rounds_one_way_us"] = lat_p50 / 2 if lat_p50 is not None else None
    stock = mem["stock"] = {}
    for prog, col in (("ib_write_bw", 3), ("ib_write_lat", 4), ("ib_send_lat", 4)):
        for mode in ("workers", "caller"):
            values = []
            for i in range(1, 10):
                f = text(res, f"{prog}_memif_{mode}_r{i}.figures").split()
                if len(f) > col:
                    values.append(float(f[col]))  # Gb/s average (--report_gbits); t_typical, one way
            stock[f"{prog}_{mode}"] = statistics.median(values) if values else None
            stock[f"{prog}_{mode}_runs"] = values
    for mode in ("workers", "caller"):
        stock[f"ib_write_bw_{mode}_ratio"] = ratio(stock[f"ib_write_bw_{mode}"], mem["bw64k_rounds_gbps"])
        for prog in ("ib_write_lat", "ib_send_lat"):
            v, base = stock[f"{prog}_{mode}"], mem["lat8_rounds_one_way_us"]
            stock[f"{prog}_{mode}_over_us"] = v - base if v is not None and base is not None else None

    veth = r["veth"] = {}
    veth["raw_pingpong_p50_us"] = get(load(res, "raw_pingpong_veth"), "p50_us")
    veth["raw_rate4170_gbps"] = get(load(res, "raw_rate4170_veth"), "rx_gbps")
    veth["bw64k_gbps"] = get(load(res, "bw64k_veth"), "bw_gbps")
    veth["lat8_p50_us"] = get(load(res, "lat8_veth"), "lat_us", "p50")
    veth["iperf3_gbps"] = get(load(res, "iperf3_veth"), "end", "sum_received", "bits_per_second")
    if veth["iperf3_gbps"] is not None:
        veth["iperf3_gbps"] /= 1e9
    m = re.search(r"avg-latency=([0-9.]+)", text(res, "sockperf_veth.log"))
    veth["sockperf_rtt_us"] = 2 * float(m.group(1)) if m else None  # sockperf reports half the round trip
    return r


def fmt(v, digits=2, unit=""):
    if v is None:
        return "n/a"
    return f"{v:,.{digits}f}{unit}"


def runs(values):
    return f"{len(values)}: " + ", ".join(fmt(v) for v in values)


def verdict(v, target, higher=True):
    if v is None:
        return "not measured"
    return "met" if (v >= target if higher else v <= target) else "not met"


def plots(r, docs, plot_bin):
    ring, mem, veth = r["ring"], r["memif"], r["veth"]
    specs = {
        "bandwidth": {
            "title": "RDMA WRITE bandwidth vs message size",
            "x_label": "message size [bytes]", "y_label": "Gb/s", "x_log": True, "y_log": False,
            "series": [
                {"name": "uroce-perf, both ends on 1 core (net_ring)",
                 "points": [[int(s), v["gbps"]] for s, v in sorted(ring["bw"].items(), key=lambda kv: int(kv[0]))]},
                {"name": "uroce-perf, 2 processes (memif)",
                 "points": [[4096, mem["bw4k_gbps"]], [65536, mem["bw64k_gbps"]]]},
            ],
        },
        "latency": {
            "title": "RDMA WRITE latency (p50) vs message size",
            "x_label": "message size [bytes]", "y_label": "us", "x_log": True, "y_log": True,
            "series": [
                {"name": "uroce-perf, both ends on 1 core (net_ring)",
                 "points": [[int(s), v] for s, v in sorted(ring["lat_p50_us"].items(), key=lambda kv: int(kv[0]))]},
                {"name": "uroce-perf, 2 processes (memif)", "points": [[8, mem["lat8_p50_us"]]]},
                {"name": "raw DPDK ping-pong, 82 B frames (memif)", "points": [[8, mem["raw_pingpong_p50_us"]]]},
            ],
        },
        "qps": {
            "title": "RDMA WRITE bandwidth vs connected QPs (1 core, net_ring)",
            "x_label": "QPs carrying traffic (64 messages in flight)", "y_label": "Gb/s", "x_log": True, "y_log": False,
            "series": [
                {"name": f"{'64 KiB' if int(s) == 65536 else '4 KiB'} messages",
                 "points": [[int(q), v["gbps"]] for q, v in sorted(by_q.items(), key=lambda kv: int(kv[0]))]}
                for s, by_q in ring["qps"].items()
            ],
        },
    }
    made = []
    for name, spec in specs.items():
        spec["series"] = [s for s in spec["series"] if all(p[1] is not None and p[1] > 0 for p in s["points"]) and s["points"]]
        if not spec["series"]:
            continue
        src = os.path.join(docs, "perf", f"{name}.json")
        with open(src, "w") as f:
            json.dump(spec, f, indent=1)
        png = os.path.join(docs, "perf", f"{name}.png")
        if subprocess.run([plot_bin, "chart", src, png]).returncode == 0:
            made.append(name)
    return made


def markdown(r):
    ring, mem, veth, m = r["ring"], r["memif"], r["veth"], r["machine"]
    out = []
    w = out.append
    w(f"Measured {m['date']} on {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, Linux {m['kernel']}, "
      "by `tools/perf-report.sh` (one run; raw figures in [perf/report.json](perf/report.json)).")
    w("")
    w("### Targets")
    w("")
    w("| target | measured | baseline in the same run | verdict |")
    w("|---|---|---|---|")
    w(f"| 64 KiB WRITE, 1 core, payload rate / bare ICRC+copy >= 0.7 (aim 0.85) | "
      f"{fmt(ring['headline_ratio'], 3)} (median of {len(ring['headline_ratios'])}: "
      f"{', '.join(fmt(x, 3) for x in ring['headline_ratios'])}); {fmt(ring['headline_gbps'], 1)} Gb/s | "
      f"bare {fmt(ring['bare_gbytes_s'])} GB/s (buffers hot in L1); the same bare work walking through the "
      f"run's {fmt((ring['headline_footprint_bytes'] or 0) / 2**20, 0)} MiB of source and of target "
      f"{fmt(ring['bare_at_footprint_gbytes_s'])} GB/s (the transfer's ratio to it "
      f"{fmt(ring['headline_ratio_at_footprint'], 3)}) | {verdict(ring['headline_ratio'], 0.7)} |")
    w(f"| README main job (64 KiB, --verify) >= 0.5 | {fmt(ring['demo_ratio'], 3)}; verified: {ring['demo_verified']} | "
      f"same | {verdict(ring['demo_ratio'], 0.5)} |")
    w(f"| no first-touch page faults in timed runs | {fmt(ring['headline_page_faults'], 0)} (plain), "
      f"{fmt(ring['demo_page_faults'], 0)} (--verify) | 2,140 before reg_mr populated | "
      f"{'met' if (ring['headline_page_faults'] or 0) < 100 else 'not met'} |")
    w(f"| 8 B WRITE message rate, 2 processes over memif >= 8 M/s (aim 10) | {fmt(mem['rate8_mpps'])} M/s "
      f"(median of {runs(mem['rate8_runs'])}) | raw DPDK "
      f"{fmt(mem['raw_rate82_mpps'])} Mpps of 82 B frames (ratio {fmt(mem['rate_ratio_to_raw'], 3)}) | "
      f"{verdict(mem['rate8_mpps'], 8)} |")
    w(f"| 8 B WRITE round trip over memif <= 1.6 x raw ping-pong (aim 1.3) | p50 {fmt(mem['lat8_p50_us'])} us "
      f"(median of {runs(mem['lat8_runs'])}) | raw 82 B "
      f"ping-pong p50 {fmt(mem['raw_pingpong_p50_us'])} us (ratio {fmt(mem['lat_ratio_to_raw'])}) | "
      f"{verdict(mem['lat_ratio_to_raw'], 1.6, higher=False)} |")
    st = mem["stock"]
    w(f"| stock ib_write_bw 64 KiB under uroce-run, caller progress, 1 core per process >= 0.9 of uroce-perf | "
      f"{fmt(st['ib_write_bw_caller'], 1)} Gb/s (median of {runs(st['ib_write_bw_caller_runs'])}) | uroce-perf "
      f"{fmt(mem['bw64k_rounds_gbps'], 1)} Gb/s, in turns (ratio {fmt(st['ib_write_bw_caller_ratio'])}) | "
      f"{verdict(st['ib_write_bw_caller_ratio'], 0.9)} |")
    for prog in ("ib_write_lat", "ib_send_lat"):
        w(f"| stock {prog} 8 B, caller progress, one way <= uroce-perf's + 0.3 us | "
          f"{fmt(st[prog + '_caller'])} us (median of {runs(st[prog + '_caller_runs'])}) | uroce-perf half round "
          f"trip {fmt(mem['lat8_rounds_one_way_us'])} us, in turns (+{fmt(st[prog + '_caller_over_us'])} us) | "
          f"{verdict(st[prog + '_caller_over_us'], 0.3, higher=False)} |")
    q10k = {s: get(ring, "qps", s, 10000, "ratio_to_1") for s in ring["qps"]}
    w(f"| 10,000 QPs with traffic >= 0.8 of 1 QP at 64 KiB, >= 0.6 at 4 KiB | 64 KiB: {fmt(q10k.get(65536), 3)}; 4 KiB: {fmt(q10k.get(4096), 3)} | "
      f"1 QP, same size (medians of {len(get(ring, 'qps', 65536, 1, 'runs') or [])} runs in turns) | {verdict(q10k.get(65536), 0.8)} (64 KiB), {verdict(q10k.get(4096), 0.6)} (4 KiB) |")
    tr = ring["idle"]["turn_ratios"]
    spread = f"; one turn's ratio {fmt(min(tr), 3)} to {fmt(max(tr), 3)}" if tr else ""
    w(f"| 10,000 idle QPs cost active ones <= 2% | {fmt(ring['idle']['ratio'], 3)} of the bandwidth "
      f"without them | {fmt(ring['idle']['gbps_0'], 1)} Gb/s without | "
      f"{verdict(ring['idle']['ratio'], 0.98)} (medians of {ring['idle']['turns']} runs in turns{spread}) |")
    mm = ring["memory"]
    w(f"| memory per idle QP <= 4 KiB beyond its queues | beyond the send and receive queues: "
      f"{fmt(mm['per_qp_beyond_sq_rq_bytes_rd_atomic_1'], 0)} B with max_dest_rd_atomic 1, "
      f"{fmt(mm['per_qp_beyond_sq_rq_bytes'], 0)} B with 16 (its READ/atomic response queue is 4,096 B); "
      f"{fmt(mm['per_send_recv_wqe_pair_bytes'], 0)} B per send+receive WQE | "
      f"{fmt(mm['per_qp_bytes_depth16'], 0)} B in all with 16+16 WQEs and 16 READs | "
      f"{verdict(mm['per_qp_beyond_sq_rq_bytes_rd_atomic_1'], 4096, higher=False)} (rd_atomic 1), "
      f"{verdict(mm['per_qp_beyond_sq_rq_bytes'], 4096, higher=False)} (16) |")
    c = ring["cores"]
    w(f"| bandwidth scales with cores (1, 2) | 1 core {fmt(c['1'], 1)} Gb/s, 2 cores {fmt(c['2'], 1)} Gb/s "
      f"(x{fmt(c['scaling'])}) | one process per core, each running both ends | "
      f"{verdict(c['scaling'], 1.6)} |")
    w("")
    w("### One core, both ends in one process (net_ring)")
    w("")
    w("| size | WRITE Gb/s | messages M/s | payload / bare | p50 latency us (--lat) |")
    w("|---|---|---|---|---|")
    for s in sorted(set(list(ring["bw"].keys()) + list(ring["lat_p50_us"].keys())), key=int):
        b = ring["bw"].get(s, {})
        w(f"| {int(s):,} B | {fmt(b.get('gbps'))} | {fmt(b.get('mpps'), 3)} | {fmt(b.get('ratio'), 3)} | "
          f"{fmt(ring['lat_p50_us'].get(s))} |")
    w("")
    w(f"8-byte WRITEs over 16 QPs, 512 in flight: {fmt(ring['rate8_mpps'])} M messages/s for both ends on one core. "
      f"Every operation with --verify: " +
      ", ".join(f"{op} {'PASSED' if v else 'FAILED' if v is False else 'n/a'}" for op, v in ring["verified"].items()) + ".")
    w("")
    w("| QPs carrying traffic | 4 KiB Gb/s (x of 1 QP) | 64 KiB Gb/s (x of 1 QP) |")
    w("|---|---|---|")
    for q in (1, 10, 100, 1000, 10000):
        a, b = get(ring, "qps", 4096, q), get(ring, "qps", 65536, q)
        w(f"| {q:,} | {fmt(get(a, 'gbps'))} ({fmt(get(a, 'ratio_to_1'), 3)}) | {fmt(get(b, 'gbps'))} "
          f"({fmt(get(b, 'ratio_to_1'), 3)}) |")
    w("")
    w("### Two processes, one core each")
    w("")
    w("With --verify: " + ", ".join(f"{k} {'PASSED' if v else 'FAILED' if v is False else 'n/a'}"
                                    for k, v in r["verified_two_processes"].items()) + ".")
    w("")
    w("| link | figure | uroce | baseline |")
    w("|---|---|---|---|")
    w(f"| memif | 8 B WRITE round trip, p50 | {fmt(mem['lat8_p50_us'])} us | raw DPDK ping-pong {fmt(mem['raw_pingpong_p50_us'])} us |")
    w(f"| memif | 8 B WRITE message rate | {fmt(mem['rate8_mpps'])} M/s | raw DPDK {fmt(mem['raw_rate82_mpps'])} Mpps (82 B) |")
    w(f"| memif | 64 KiB WRITE | {fmt(mem['bw64k_gbps'], 1)} Gb/s | raw DPDK {fmt(mem['raw_rate4170_gbps'], 1)} Gb/s (4170 B frames) |")
    w(f"| memif | 4 KiB WRITE | {fmt(mem['bw4k_gbps'], 1)} Gb/s | |")
    for mode, what in (("workers", "a worker beside the program, pinned to its core"),
                       ("caller", "caller progress")):
        w(f"| memif | stock ib_write_bw 64 KiB under uroce-run, {what} | {fmt(st['ib_write_bw_' + mode], 1)} Gb/s | "
          f"uroce-perf {fmt(mem['bw64k_rounds_gbps'], 1)} Gb/s in turns |")
        for prog in ("ib_write_lat", "ib_send_lat"):
            w(f"| memif | stock {prog} 8 B under uroce-run, {what}, t_typical (one way) | "
              f"{fmt(st[prog + '_' + mode])} us | uroce-perf half round trip {fmt(mem['lat8_rounds_one_way_us'])} us |")
    w(f"| veth (af_packet) | 64 KiB WRITE | {fmt(veth['bw64k_gbps'], 1)} Gb/s | raw DPDK {fmt(veth['raw_rate4170_gbps'], 1)} Gb/s; kernel TCP (iperf3) {fmt(veth['iperf3_gbps'], 1)} Gb/s |")
    w(f"| veth (af_packet) | 8 B WRITE round trip, p50 | {fmt(veth['lat8_p50_us'])} us | raw DPDK ping-pong {fmt(veth['raw_pingpong_p50_us'])} us; kernel TCP (sockperf) {fmt(veth['sockperf_rtt_us'])} us |")
    w("")
    w("![bandwidth vs size](perf/bandwidth.png)")
    w("")
    w("![latency vs size](perf/latency.png)")
    w("")
    w("![bandwidth vs QPs](perf/qps.png)")
    return "\n".join(out)


def main():
    if len(sys.argv) != 4:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    res, docs, plot_bin = sys.argv[1:]
    r = collect(res)
    os.makedirs(os.path.join(docs, "perf"), exist_ok=True)
    with open(os.path.join(docs, "perf", "report.json"), "w") as f:
        json.dump(r, f, indent=1, default=str)
    made = plots(r, docs, plot_bin)
    body = markdown(r)
    path = os.path.join(docs, "performance.md")
    try:
        doc = open(path).read()
    except OSError:
        doc = f"# Performance\n\n{BEGIN}\n{END}\n"
    if BEGIN not in doc or END not in doc:
        doc += f"\n{BEGIN}\n{END}\n"
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    with open(path, "w") as f:
        f.write(f"{head}{BEGIN}\n{body}\n{END}{tail}")
    print(body)
    print(f"\nplots: {', '.join(made) or 'none'}; {path} and {docs}/perf/report.json written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
