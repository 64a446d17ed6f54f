#!/usr/bin/env bash
# The GPU checks of the CUDA backend, in two halves, for a GPU machine that has the CUDA driver
# and runtime but not this project's other libraries, and no network:
#
#   scripts/device_check.sh pack [BUILD_DIR]    here: gemmakit and gemmakit_tests (built with the
#                                               CUDA backend), every shared library they load
#                                               that is not glibc's or the compiler's, and the
#                                               test scripts, in .device/gemmakit-device.tar.xz
#   scripts/device_check.sh run [OUT_DIR]       there, from the repository root (the tree and
#                                               .device travel: `carry: [".device"]`): unpacks,
#                                               then runs `gemmakit devices` and the GPU tests
#                                               (gemmakit_tests' Cuda* suites, the ctest label
#                                               `cuda`), writing logs and JSON to OUT_DIR
#                                               ($OUT by default); the summary is printed last.
#
# Each step's exit status is recorded in OUT_DIR/summary.txt; `run` exits non-zero if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
case "$mode" in
pack)
  build=${2:-build}
  for b in gemmakit gemmakit_tests; do
    [ -x "$build/$b" ] || { echo "device_check: $build/$b not built" >&2; exit 1; }
  done
  grep -q '^GK_CUDA:BOOL=ON' "$build/CMakeCache.txt" || { echo "device_check: $build was configured without the CUDA backend (GK_CUDA=OFF)" >&2; exit 1; }
  stage=$(mktemp -d)
  mkdir -p "$stage/bin" "$stage/lib"
  cp "$build/gemmakit" "$build/gemmakit_tests" "$stage/bin/"
  # Every library the binaries load except the C runtime and the compiler's, which the GPU
  # machine's (newer) system has.
  ldd "$build/gemmakit" "$build/gemmakit_tests" | awk '$3 ~ /^\// {print $3}' | sort -u |
    grep -Ev '/(libc|libm|libgcc_s|libstdc\+\+|libpthread|libdl|librt|ld-linux[^/]*)\.so' |
    while read -r lib; do cp -L "$lib" "$stage/lib/"; done
  mkdir -p .device
  tar -C "$stage" -cJf .device/gemmakit-device.tar.xz bin lib
  rm -rf "$stage"
  grep -qx '/.device/' .git/info/exclude 2>/dev/null || echo '/.device/' >> .git/info/exclude
  ls -l .device/gemmakit-device.tar.xz
  ;;
run)
  out=${2:-${OUT:-device-out}}
  mkdir -p "$out"
  [ -f .device/gemmakit-device.tar.xz ] || { echo "device_check: no .device/gemmakit-device.tar.xz (run pack here, carry .device)" >&2; exit 1; }
  dir=$(mktemp -d)
  tar -C "$dir" -xJf .device/gemmakit-device.tar.xz
  export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  failed=0
  : > "$out/summary.txt"
  step() {  # step NAME COMMAND...: output to OUT/NAME.log, status to the summary
    local name=$1
    shift
    local t0=$SECONDS
    "$@" > "$out/$name.log" 2>&1
    local rc=$?
    echo "$name: exit $rc ($((SECONDS - t0)) s)" >> "$out/summary.txt"
    [ $rc -eq 0 ] || failed=1
  }
  step nvidia_smi nvidia-smi
  step devices "$dir/bin/gemmakit" devices
  "$dir/bin/gemmakit" devices --json > "$out/devices.json" 2>&1
  step cuda_tests "$dir/bin/gemmakit_tests" --gtest_filter='Cuda*' --gtest_output="json:$out/cuda_tests.json"
  cat "$out/summary.txt"
  grep -h -E '^\[  (FAILED|SKIPPED) ' "$out/cuda_tests.log" | head -20
  exit $failed
  ;;
*)
  sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
  ;;
esac
