#!/usr/bin/env bash
# `make demo`: the main job on the embedded default model. Today that is: write the tiny
# Gemma 4 model (random weights, real tokenizer), chat with it, and print tokens/s.
# Later stages (serve, bench, train, merge, eval, report) join as they land.
set -euo pipefail
BUILD=${1:-build}
GK="$BUILD/gemmakit"
MODEL="$BUILD/demo/tiny"

echo "== gemmakit init --preset tiny --out $MODEL"
"$GK" init --preset tiny --out "$MODEL" --seed 1

echo "== gemmakit generate --model $MODEL --chat ... (random weights: the text is noise, the pipeline is real)"
"$GK" generate --model "$MODEL" --chat "Write a Verilog module that adds two 8-bit numbers." \
  --max-tokens 48 --temperature 0.8 --top-p 0.95 --seed 1

echo "== gemmakit logprobs (first positions)"
"$GK" logprobs --model "$MODEL" --text "module adder(input [7:0] a, b, output [8:0] s);" --json | cut -c1-200
