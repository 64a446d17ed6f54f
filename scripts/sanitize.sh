#!/usr/bin/env bash
# The unit tests and the end-to-end tests that feed gemmakit outside input, built with ASan,
# UBSan (no recovery: a report fails the test) and libstdc++'s assertions, leaks checked at exit:
#
#   scripts/sanitize.sh [BUILD_DIR]      (default build-asan; about 40 min to build on 2 cores,
#                                         15 min to run; docs/RELIABILITY.md "Sanitizers beyond
#                                         the parsers")
#
# Each gtest suite runs in a process of its own, so a report in one suite does not hide the
# others'. The fuzzers (fuzz/, run by `make test`) cover the parsers with the same sanitizers;
# this covers everything else the tests reach: the engines, the kernels, the server, the trainer.
# The CUDA backend is left out (-DGK_CUDA=OFF): nvcc's objects would not be instrumented, and
# the CUDA emulator's fiber stacks are not ASan's to follow.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-asan}
flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -g -D_GLIBCXX_ASSERTIONS"
cmake -S . -B "$build" -DGK_CUDA=OFF -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" > /dev/null || exit 1
cmake --build "$build" -j"$(nproc)" --target gemmakit gemmakit_tests jinja_render || exit 1
if [ ! -d "$build/tokenizer" ]; then  # (the tests look beside their binary; the script writes build/)
  scripts/fetch_tokenizer.sh > /dev/null || exit 1
  [ "$build" -ef build ] || cp -r build/tokenizer "$build/tokenizer"
fi

# allocator_may_return_null: a size the allocator refuses is then bad_alloc's business, as
# without ASan. One test is left out: it reserves half of size_t's range to see bad_alloc turned
# into a message, and ASan's allocator stops the process on that size whatever its options.
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1
skip=GuardedParse.TurnsEveryExceptionIntoOneLine
logs="$(cd "$build" && pwd)/sanitize-logs"
rm -rf "$logs"
mkdir -p "$logs"
failed=()
suites=$("$build/gemmakit_tests" --gtest_list_tests | grep -v '^ ' | sed -e 's/ *#.*//' | grep '\.$' | sed 's/\.$//')
for s in $suites; do
  case "$s" in Mpi*) continue ;; esac  # (they run under mpirun, below)
  log="$logs/$(echo "$s" | tr / _).log"
  if ! (cd "$build" && timeout 1200 ./gemmakit_tests --gtest_filter="$s.*-$skip") > "$log" 2>&1; then
    failed+=("$s")
    grep -m1 -E 'ERROR: AddressSanitizer|runtime error|LeakSanitizer|FAILED' "$log"
  fi
done
# The end-to-end tests that run the (sanitized) binary on requests, files and flags from outside.
# Reports also go to files (log_path), since a test may not look at how a server it stopped exited.
export ASAN_OPTIONS="$ASAN_OPTIONS:log_path=$logs/report" UBSAN_OPTIONS="$UBSAN_OPTIONS:log_path=$logs/report"
(cd "$build" && ctest -j"$(nproc)" --timeout 900 --output-on-failure -R \
  '^(cli_bad_input|cli_data_prepare|cli_cost_plan|serve_e2e|serve_curl|serve_openai_sdk|serve_lora_e2e|bench_serve_e2e|eval_verilog_e2e|train_bad_input|train_resume_e2e|bridge_convert_merge_verify|chat_template_init|synth_verilog)$') \
  > "$logs/e2e.log" 2>&1 || failed+=("end-to-end (see $logs/e2e.log)")
# Tensor and data parallelism over MPI ranks: the communicator's tests, then the binary's
# inference, serving and training under mpirun. OpenMPI keeps allocations of its own (in libmpi
# and its plugins) at exit, which are not ours to fix: leaks are not checked there.
(cd "$build" && ASAN_OPTIONS="${ASAN_OPTIONS/detect_leaks=1/detect_leaks=0}" ctest -j"$(nproc)" --timeout 900 \
  --output-on-failure -R '^(mpi_communicator_np[24]|tp_inference_e2e|serve_tp_e2e|train_tp_e2e|train_dp_e2e)$') \
  > "$logs/mpi.log" 2>&1 || failed+=("mpi (see $logs/mpi.log)")
tail -3 "$logs/mpi.log"
tail -3 "$logs/e2e.log"
for r in "$logs"/report.*; do
  [ -e "$r" ] || continue
  failed+=("a sanitizer report: $r")
  grep -m1 -E 'ERROR|runtime error' "$r"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "sanitize: failed: ${failed[*]} (logs in $logs)"
  exit 1
fi
echo "sanitize: every suite and end-to-end test passed under ASan + UBSan (logs in $logs)"
