#!/usr/bin/env bash
# Runs every libFuzzer target for a fixed time over a copy of its seed corpus
# (fuzz/corpus/<target>/, never modified here) and fails on any crash, sanitizer report, leak,
# timeout or out-of-memory. `make test` runs it for a few seconds per target; bench/fuzz.sh
# runs the same targets for hours with a corpus that persists between runs.
#
#   fuzz/run_fuzzers.sh FUZZ_BUILD_DIR [SECONDS_PER_TARGET=10] [PARALLEL_JOBS=2]
#
# Prints one line per target: executions, exec/s, coverage, corpus size. A failing target's
# log tail and its crashing input are printed; reproduce with FUZZ_BUILD_DIR/<target> <input>.
set -euo pipefail
cd "$(dirname "$0")/.."

build=${1:?usage: fuzz/run_fuzzers.sh FUZZ_BUILD_DIR [SECONDS] [JOBS]}
seconds=${2:-10}
jobs=${3:-2}
work=$(mktemp -d "${TMPDIR:-/tmp}/gk-fuzz-run.XXXXXX")
trap 'rm -rf "$work"' EXIT

targets=()
for dir in fuzz/corpus/*/; do
  t=$(basename "$dir")
  [ -x "$build/$t" ] || { echo "fuzz: $build/$t is missing (build the fuzz targets first)" >&2; exit 1; }
  targets+=("$t")
done

run_one() {  # target -> exit status of libFuzzer; log in $work/<target>.log
  local t=$1
  mkdir -p "$work/$t/corpus"
  cp fuzz/corpus/"$t"/* "$work/$t/corpus/"
  # -timeout: one input taking longer is a hang; -rss_limit_mb: one allocating more is a bug.
  "$build/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$work/$t/" "$work/$t/corpus" >"$work/$t.log" 2>&1
}
export -f run_one
export build seconds work

status=0
kept=${FUZZ_ARTIFACTS:-$build/artifacts}  # failing inputs are copied here
printf '%s\n' "${targets[@]}" | xargs -P "$jobs" -I{} bash -c 'run_one {} && echo ok >"$work/{}.status" || echo "failed ($?)" >"$work/{}.status"' || true

printf '%-24s %10s %8s %6s %6s %7s  %s\n' target execs exec/s cov ft corpus result
for t in "${targets[@]}"; do
  log="$work/$t.log"
  execs=$(awk '/^stat::number_of_executed_units:/ {print $2}' "$log")
  rate=$(awk '/^stat::average_exec_per_sec:/ {print $2}' "$log")
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | awk '{print $2}' || true)
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | awk '{print $2}' || true)
  corpus=$(ls "$work/$t/corpus" | wc -l)
  result=$(cat "$work/$t.status" 2>/dev/null || echo "not run")
  printf '%-24s %10s %8s %6s %6s %7s  %s\n' "$t" "${execs:--}" "${rate:--}" "${cov:--}" "${ft:--}" "$corpus" "$result"
  if [ "$result" != ok ]; then
    status=1
    echo "---- $t: last lines of its log ----"
    tail -n 40 "$log"
    for a in "$work/$t"/crash-* "$work/$t"/leak-* "$work/$t"/timeout-* "$work/$t"/oom-*; do
      [ -e "$a" ] || continue
      mkdir -p "$kept"
      cp "$a" "$kept/$t-$(basename "$a")"
      echo "input kept as $kept/$t-$(basename "$a") (reproduce: $build/$t <that file>)"
    done
  fi
done
exit $status
