#!/usr/bin/env bash
# `make demo`: the main job on the embedded default model. Today that is: write the tiny
# Gemma 4 model (random weights, real tokenizer), chat with it, print tokens/s, then serve it
# over the OpenAI API, send a chat request with curl and shut the server down with SIGTERM.
# Then a serving benchmark, a Verilog eval through the server, and a LoRA fine-tune of the
# tiny model, merged into a copy of the base and served. A second, cheaper run of the same
# steps on one thread gives `gemmakit report` two runs to compare; the report comes last.
set -euo pipefail
BUILD=${1:-build}
GK="$BUILD/gemmakit"
MODEL="$BUILD/demo/tiny"
# One RUN_DIR per run (docs/REPORT.md): run A uses every core, run B one thread.
CORES=$(nproc)
RUN_A="$BUILD/demo/runs/cpu-$CORES-threads"
RUN_B="$BUILD/demo/runs/cpu-1-thread"
rm -rf "$BUILD/demo/runs"
mkdir -p "$RUN_A" "$RUN_B"

# start_server LOG WHAT ARGS...: `gemmakit serve ARGS` in the background, its output in LOG;
# sets SERVER (pid) and URL once it listens (up to 60 s for the weights to load).
start_server() {
  local log=$1 what=$2
  shift 2
  "$GK" serve "$@" >"$log" 2>&1 &
  SERVER=$!
  trap 'kill -9 $SERVER 2>/dev/null || true' EXIT
  URL=
  for _ in $(seq 600); do
    URL=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$log" | head -n1)
    [ -n "$URL" ] && break
    kill -0 $SERVER 2>/dev/null || { cat "$log"; echo "demo: $what exited" >&2; exit 1; }
    sleep 0.1
  done
  [ -n "$URL" ] || { cat "$log"; echo "demo: $what did not start" >&2; exit 1; }
}

# stop_server LOG WHAT: SIGTERM, then the exit status must be 0 (drained cleanly).
stop_server() {
  kill -TERM $SERVER
  if wait $SERVER; then
    echo "$2 exited cleanly"
  else
    local code=$?
    cat "$1"; echo "demo: $2 exited with status $code" >&2; exit 1
  fi
  trap - EXIT
}

echo "== gemmakit init --preset tiny --out $MODEL"
"$GK" init --preset tiny --out "$MODEL" --seed 1

echo "== gemmakit generate --model $MODEL --chat ... (random weights: the text is noise, the pipeline is real)"
"$GK" generate --model "$MODEL" --chat "Write a Verilog module that adds two 8-bit numbers." \
  --max-tokens 48 --temperature 0.8 --top-p 0.95 --seed 1

echo "== gemmakit logprobs (first positions)"
"$GK" logprobs --model "$MODEL" --text "module adder(input [7:0] a, b, output [8:0] s);" --json | cut -c1-200

echo "== gemmakit serve --model $MODEL --served-model-name tiny --port 0 (OpenAI-compatible, loopback)"
LOG="$BUILD/demo/serve.log"
start_server "$LOG" "the server" --model "$MODEL" --served-model-name tiny --port 0 --max-model-len 1024
grep -E "KV cache size|Maximum concurrency" "$LOG"
echo "== curl $URL/v1/chat/completions"
curl -sS --fail-with-body "$URL/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"model": "tiny", "messages": [{"role": "user", "content": "Write a Verilog counter"}], "max_tokens": 32, "temperature": 0.8, "seed": 1}'
echo
echo "== curl $URL/metrics (a few of vLLM's metric names)"
curl -sS --fail-with-body "$URL/metrics" | grep -E '^vllm:(generation_tokens_total|request_success_total|num_requests_running)' | head -n 5
echo "== gemmakit bench serve: a short request-rate sweep against this server (vLLM's metrics and layout)"
"$GK" bench serve --base-url "$URL" --model tiny --tokenizer "$MODEL" --random-input-len 64 --random-output-len 16 \
  --num-prompts 16 --request-rate 4,16,inf --temperature 0 --label demo --disable-tqdm \
  --save-result --result-dir "$RUN_A/bench"
echo "== gemmakit data synth-verilog + eval verilog: a small synthetic eval set, scored through this server"
echo "   (random weights write no Verilog: expect pass@k = 0; the pipeline, iverilog and the sandbox are real)"
"$GK" data synth-verilog --out "$BUILD/demo/verilog-eval" --n 6 --seed 1
"$GK" eval verilog --dataset "$BUILD/demo/verilog-eval" --base-url "$URL" --model tiny \
  --n-samples 2 --max-tokens 64 --k 1,2 --out "$RUN_A/eval"
echo "== SIGTERM: drain and exit"
stop_server "$LOG" "the server"
echo "== gemmakit data synth-verilog + train: LoRA SFT of the tiny model on 48 tasks disjoint from the eval set"
echo "   (recipes/tiny-verilog-lora.toml; random base weights: the loss starts near ln(262144) = 12.5)"
"$GK" data synth-verilog --out "$BUILD/demo/verilog-train" --n 48 --seed 1 --first 6
"$GK" train --config recipes/tiny-verilog-lora.toml --set model="$MODEL" \
  --set data="$BUILD/demo/verilog-train/sft.jsonl" --set out="$RUN_A/train-run"
ls "$RUN_A/train-run/adapter"
echo "== gemmakit merge: the adapter into a copy of the base (float32, rounded once to bf16, streaming)"
rm -rf "$BUILD/demo/tiny-merged"
"$GK" merge --base "$MODEL" --adapter "$RUN_A/train-run/adapter" --out "$BUILD/demo/tiny-merged"
"$GK" verify "$MODEL" "$BUILD/demo/tiny-merged" --logits | tail -n 3 || true  # different by design: shows by how much
echo "== gemmakit serve the merged model, one chat request, SIGTERM"
LOG2="$BUILD/demo/serve-merged.log"
start_server "$LOG2" "the merged model's server" --model "$BUILD/demo/tiny-merged" \
  --served-model-name tiny-verilog --port 0 --max-model-len 1024
curl -sS --fail-with-body "$URL/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"model": "tiny-verilog", "messages": [{"role": "user", "content": "Write a Verilog counter"}], "max_tokens": 24, "temperature": 0}'
echo
stop_server "$LOG2" "the merged model's server"
echo "== run B for the report: the same model and recipe on 1 thread ($CORES above), kept short to save time:"
echo "   a bench serve sweep against a 1-thread server and the recipe cut to 10 steps (run A: 30); no eval"
echo "   (so the report shows run B's eval as not measured, and does not rank losses or costs of unequal runs)"
LOG3="$BUILD/demo/serve-1-thread.log"
start_server "$LOG3" "the 1-thread server" --model "$MODEL" --served-model-name tiny --port 0 \
  --max-model-len 1024 --threads 1
"$GK" bench serve --base-url "$URL" --model tiny --tokenizer "$MODEL" --random-input-len 64 --random-output-len 16 \
  --num-prompts 16 --request-rate 4,16,inf --temperature 0 --label demo-1-thread --disable-tqdm \
  --save-result --result-dir "$RUN_B/bench" 2>&1 | tail -n 4
stop_server "$LOG3" "the 1-thread server"
"$GK" train --config recipes/tiny-verilog-lora.toml --set model="$MODEL" --threads 1 \
  --set data="$BUILD/demo/verilog-train/sft.jsonl" --set out="$RUN_B/train-run" \
  --set batch.max_steps=10 2>&1 | tail -n 1
echo "== gemmakit report: run A ($CORES threads) vs run B (1 thread)"
echo "   prices are an assumed \$0.05 per core-hour (illustrative, not a quote), so that the cost tables have numbers"
PRICE_A=$(awk -v c="$CORES" 'BEGIN { printf "%.2f", 0.05 * c }')
echo "   hardware \"cpu\": this machine, its bandwidth and FLOP peak measured now, for the roofline section"
printf '{"label": "CPU %s threads", "hardware": "cpu", "price_per_hour": %s}\n' "$CORES" "$PRICE_A" >"$RUN_A/run.json"
printf '{"label": "CPU 1 thread", "hardware": "cpu", "price_per_hour": 0.05}\n' >"$RUN_B/run.json"
"$GK" report "$RUN_A" "$RUN_B" --out "$BUILD/demo/report/report.html" \
  --title "gemmakit demo: tiny Gemma 4 on $CORES threads vs 1 thread"
echo "open $BUILD/demo/report/report.html (or read $BUILD/demo/report/report.md)"
