#!/usr/bin/env bash
# Drives `gemmakit serve` with the official OpenAI Node SDK (npm openai@^6; v7 wants Node 22).
# The package is installed once into <source>/build/npm-openai (like scripts/fetch_tokenizer.sh
# installs the tokenizer package), under a lock so parallel test runs do not race.
#   openai_sdk_test.sh path/to/gemmakit
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
GK=${1:?usage: openai_sdk_test.sh path/to/gemmakit}
NPM_DIR=${GK_OPENAI_NPM_DIR:-$SRC/build/npm-openai}
PKG_RANGE="openai@^6"

command -v node >/dev/null || { echo "FAIL: node not found; run scripts/install_deps.sh" >&2; exit 1; }
have_major() { node -p "require('$NPM_DIR/node_modules/openai/package.json').version.split('.')[0]" 2>/dev/null || true; }
mkdir -p "$NPM_DIR"
(
  flock 9
  if [ "$(have_major)" != "6" ]; then
    echo "openai_sdk_test: npm install $PKG_RANGE into $NPM_DIR"
    npm install --no-audit --no-fund --silent --prefix "$NPM_DIR" "$PKG_RANGE" ||
      { echo "FAIL: npm install $PKG_RANGE failed (the npm registry must be reachable)" >&2; exit 1; }
  fi
) 9>"$NPM_DIR.lock"
echo "openai_sdk_test: openai $(node -p "require('$NPM_DIR/node_modules/openai/package.json').version")"

exec /usr/bin/python3 "$HERE/with_server.py" --gemmakit "$GK" --server-arg=--api-key=sdk-test-key -- \
  env NODE_PATH="$NPM_DIR/node_modules" node "$HERE/openai_sdk_test.cjs"
