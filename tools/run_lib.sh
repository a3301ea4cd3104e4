# Shared by tools/tsan.sh and tools/asan.sh (sourced after they set $kind,
# "tsan" or "asan", and $results, the report folder or ""): the report
# folder made ready, one-case reports, and the failed-build exit.

# A report with one failed case, <kind>.<name>.
failed_report() {  # file name message
  python3 tools/case_report.py "$1" "$kind" "$2" "$3"
}

if [[ -n $results ]]; then
  mkdir -p "$results"
  rm -f "$results/$kind"-*.xml
fi

build_failed() {  # message
  echo "$kind: $1" >&2
  [[ -n $results ]] && failed_report "$results/$kind-build.xml" build "$1"
  exit 1
}
