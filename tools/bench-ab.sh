#!/usr/bin/env bash
# Same-run A/B of two builds of uroce-perf: the per-packet CPU cost of the
# transport (both ends on one core) for the cases of tools/bench-transport.sh
# (--sim write 64 B and 4 KiB) and over DPDK (--ring write 4 KiB and 8 B;
# 8 B also posted 16 WRs to a call, --post-list 16: both builds need it),
# run in turns (A, B, A, B, ...) so that the machine's drift hits both.
# With two more builds made with -Dcpp_args=-DUROCE_PROFILE_TX (the engine
# then times its TX path: frames built and handed to the port), the TX
# path's own ns per frame for the --ring cases, in turns too.
#
# usage: tools/bench-ab.sh BUILD_A BUILD_B [RUNS] [OUT.json]
#        UROCE_AB_PROFILE="PROFILE_BUILD_A PROFILE_BUILD_B" tools/bench-ab.sh ...
#   e.g. git worktree add /tmp/base <commit>; (cd /tmp/base && meson setup build && ninja -C build)
#        tools/bench-ab.sh /tmp/base/build build 5
set -euo pipefail
cd "$(dirname "$0")/.."
if (($# < 2)); then
  echo "usage: tools/bench-ab.sh BUILD_A BUILD_B [RUNS] [OUT.json] (two build directories with apps/perf/uroce-perf)" >&2
  exit 2
fi
a=$1 b=$2 runs=${3:-5} out=${4:-build/bench-ab.json}
for d in "$a" "$b"; do
  [[ -x $d/apps/perf/uroce-perf ]] || { echo "bench-ab: no $d/apps/perf/uroce-perf (build it first)" >&2; exit 2; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# name|arguments
cases=(
  "sim_write_64|--sim write -s 64 -n 400000 -t 128"
  "sim_write_4k|--sim write -s 4096 -n 200000 -t 128"
  "ring_write_4k|-- --ring write -s 4096 -n 200000 -t 64"
  "ring_write_8|-- --ring write -s 8 -n 400000 -t 64"
  "ring_write_8_list16|-- --ring write -s 8 -n 400000 -t 64 --post-list 16"
)
for ((r = 0; r < runs; ++r)); do
  for c in "${cases[@]}"; do
    name=${c%%|*} args=${c#*|}
    for side in A B; do
      dir=$a
      [[ $side == B ]] && dir=$b
      # shellcheck disable=SC2086
      "$dir/apps/perf/uroce-perf" $args --json "$tmp/$name.$side.$r.json" >/dev/null
    done
  done
done

# The TX path alone, from the profiling builds.
read -r -a prof <<<"${UROCE_AB_PROFILE:-}"
if ((${#prof[@]} == 2)); then
  for ((r = 0; r < runs; ++r)); do
    for c in "ring_write_4k|-s 4096 -n 200000" "ring_write_8|-s 8 -n 400000"; do
      name=${c%%|*} args=${c#*|}
      for side in A B; do
        dir=${prof[0]}
        [[ $side == B ]] && dir=${prof[1]}
        # shellcheck disable=SC2086
        "$dir/apps/perf/uroce-perf" -- --ring write $args -t 64 2>&1 >/dev/null |
          sed -n 's/^uroce profile: TX path \([0-9.]*\) ns per frame.*/\1/p' >"$tmp/tx.$name.$side.$r"
      done
    done
  done
fi

python3 - "$tmp" "$runs" "$out" "${#prof[@]}" "$a" "$b" <<'PY'
import json, statistics, sys
tmp, runs, out, have_prof, a, b = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == "2", sys.argv[5], sys.argv[6]
names = ["sim_write_64", "sim_write_4k", "ring_write_4k", "ring_write_8", "ring_write_8_list16"]
result = {"build_a": a, "build_b": b, "runs": runs, "cases": {}}
print(f"A = {a}\nB = {b}\n{runs} runs of each case, in turns; CPU ns per data packet, both ends on one core")
print(f"{'case':<16}{'A median':>10}{'B median':>10}{'B/A':>8}   B/A per run")
for n in names:
    ca = [json.load(open(f"{tmp}/{n}.A.{r}.json"))["cpu_ns_per_packet"] for r in range(runs)]
    cb = [json.load(open(f"{tmp}/{n}.B.{r}.json"))["cpu_ns_per_packet"] for r in range(runs)]
    ma, mb = statistics.median(ca), statistics.median(cb)
    per = [y / x for x, y in zip(ca, cb)]
    print(f"{n:<16}{ma:>10.1f}{mb:>10.1f}{mb / ma:>8.3f}   " + " ".join(f"{p:.2f}" for p in per))
    result["cases"][n] = {"a_ns": ca, "b_ns": cb, "a_median": ma, "b_median": mb, "ratio_b_a": mb / ma}

if have_prof:
    print("TX path alone (profiling builds): ns per frame sent, --ring")
    print(f"{'case':<16}{'A median':>10}{'B median':>10}{'B/A':>8}   B/A per run")
    result["tx_path"] = {}
    for n in ("ring_write_4k", "ring_write_8"):
        ta = [float(open(f"{tmp}/tx.{n}.A.{r}").read()) for r in range(runs)]
        tb = [float(open(f"{tmp}/tx.{n}.B.{r}").read()) for r in range(runs)]
        ma, mb = statistics.median(ta), statistics.median(tb)
        print(f"{n:<16}{ma:>10.1f}{mb:>10.1f}{mb / ma:>8.3f}   " + " ".join(f"{y / x:.2f}" for x, y in zip(ta, tb)))
        result["tx_path"][n] = {"a_ns": ta, "b_ns": tb, "a_median": ma, "b_median": mb, "ratio_b_a": mb / ma}
else:
    print("TX path alone: give UROCE_AB_PROFILE two builds made with -Dcpp_args=-DUROCE_PROFILE_TX")
json.dump(result, open(out, "w"), indent=1)
print(f"JSON: {out}")
PY
