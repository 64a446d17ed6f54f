#!/usr/bin/env bash
# The long fuzzing run: every libFuzzer target (fuzz/, docs/RELIABILITY.md) in turn, for a
# given time each (default one hour), on one core at the lowest priority, with a working corpus
# that persists between runs outside the repository (seeded from fuzz/corpus/<target>/ and
# topped up with new committed seeds each run). `make test` runs the same targets for seconds.
#
#   bench/fuzz.sh [SECONDS_PER_TARGET=3600] [TARGET ...]
#
# Environment: FUZZ_BUILD (default build-fuzz; built here when a target is missing),
# FUZZ_WORK (default ${XDG_CACHE_HOME:-~/.cache}/gemmakit-fuzz: <target>/ corpora,
# artifacts/ crashing inputs, runs/<date>/ logs and summary.md).
#
# Prints, and writes to FUZZ_WORK/runs/<date>/summary.md, a table per target: seconds, executions,
# executions per second, coverage (cov, ft), corpus size before and after, crashes. A crash
# stops that target (libFuzzer stops at the first); the run goes on to the next target and the
# script exits 1. A crash becomes a regression input: fix the parser, copy the input to
# fuzz/corpus/<target>/regress-<what> and add a unit test beside the parser.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-3600}
shift || true
build=${FUZZ_BUILD:-build-fuzz}
work=${FUZZ_WORK:-${XDG_CACHE_HOME:-$HOME/.cache}/gemmakit-fuzz}
stamp=$(date -u +%Y%m%d-%H%M%S)
run_dir="$work/runs/$stamp"
mkdir -p "$run_dir" "$work/artifacts"

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for dir in fuzz/corpus/*/; do targets+=("$(basename "$dir")"); done
fi
missing=0
for t in "${targets[@]}"; do [ -x "$build/$t" ] || missing=1; done
if [ $missing -eq 1 ]; then
  CXX=${CXX:-clang++} cmake -S fuzz -B "$build" >/dev/null
  cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"
fi

summary="$run_dir/summary.md"
{
  echo "bench/fuzz.sh $seconds, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, one target at a time"
  echo
  echo "| target | seconds | executions | exec/s | cov | ft | corpus before → after | crashes |"
  echo "|---|---:|---:|---:|---:|---:|---|---|"
} >"$summary"
status=0
for t in "${targets[@]}"; do
  corpus="$work/$t"
  mkdir -p "$corpus"
  cp -n fuzz/corpus/"$t"/* "$corpus"/ 2>/dev/null || true
  before=$(ls "$corpus" | wc -l)
  log="$run_dir/$t.log"
  start=$(date +%s)
  rc=0
  nice -n 19 "$build/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$work/artifacts/$t-" "$corpus" >"$log" 2>&1 || rc=$?
  took=$(($(date +%s) - start))
  after=$(ls "$corpus" | wc -l)
  execs=$(awk '/^stat::number_of_executed_units:/ {print $2}' "$log")
  rate=$(awk '/^stat::average_exec_per_sec:/ {print $2}' "$log")
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | awk '{print $2}' || true)
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | awk '{print $2}' || true)
  crashes=0
  result="none"
  if [ $rc -ne 0 ]; then
    status=1
    crashes=1
    artifact=$(grep -o "Test unit written to [^ ]*" "$log" | tail -1 | awk '{print $5}' || true)
    result="exit $rc: ${artifact:-see $log}"
  fi
  line="| $t | $took | ${execs:--} | ${rate:--} | ${cov:--} | ${ft:--} | $before → $after | $result |"
  echo "$line" >>"$summary"
  echo "$line"
done
echo "summary: $summary"
exit $status
