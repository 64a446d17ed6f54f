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
#                                               then runs `gemmakit devices`, the GPU tests
#                                               (gemmakit_tests' Cuda* suites, the ctest label
#                                               `cuda`), `bench model --device cuda` on the 31B
#                                               and E4B shapes (random weights made on the GPU;
#                                               the 31B's prefill also with the flash kernel, its
#                                               decode also with the GEMV kernel, and the
#                                               whole again with --batch-invariant),
#                                               `bench train --device cuda` on the 31B shape and
#                                               the tiny recipe trained on the GPU, the
#                                               GPU trainer against the PyTorch oracle and
#                                               against HF transformers + PEFT themselves,
#                                               and the serving end-to-end test with --device
#                                               cuda, and the 64-prompt burst through `serve
#                                               --device cuda --preset 31b` and `bench serve`
#                                               (greedy, then sampled on the GPU; again with an
#                                               fp8 KV cache), and last
#                                               Nsight Compute profiles of the 31B shape's
#                                               decode, prefill and training step, summed per
#                                               kernel by scripts/ncu_summary.py:
#                                               OUT_DIR ($OUT by default) gets summary.txt and
#                                               results.tar.gz (every log and JSON), both brought
#                                               up to date after each step; the summary and the
#                                               figures are printed last.
# cuBLASLt is not packed: gemmakit opens the GPU machine's own at run time. Ask for the H200 kind
# for the 31B figures: on an H100 (78 GiB) the 57 GiB of weights leave about 10 GiB of KV cache,
# too little for the 64-sequence batch (bench model then says so) and the burst.
#
# Each step's exit status is recorded in OUT_DIR/summary.txt; `run` exits non-zero if any failed.
# Every step has a time limit, and steps that would pass DEVICE_CHECK_BUDGET seconds (540) are
# skipped; DEVICE_CHECK_ONLY=cuda_tests,bench_31b,... runs only the steps named (a rerun).
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
  cp -r "$build/tokenizer" "$stage/bin/"  # beside the binary, where `init` looks for it
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
  trap 'rm -rf "$dir"' EXIT  # (what matters is in OUT_DIR by then)
  tar -C "$dir" -xJf .device/gemmakit-device.tar.xz
  export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  gk="$dir/bin/gemmakit"
  tok="$dir/bin/tokenizer/gemma3"
  # Logs go to one folder, packed after each step: the device tool brings back 8 files at most.
  logs="$dir/results"
  mkdir -p "$logs"
  failed=0
  : > "$logs/summary.txt"
  # Each step has a time limit, and a step that cannot finish inside the run's budget
  # (DEVICE_CHECK_BUDGET seconds, default 540: the device tool's 10-minute command less the
  # unpacking and packing; give the tool timeout_s 590) is skipped, so a hung kernel costs one
  # step, not the whole run.
  budget=${DEVICE_CHECK_BUDGET:-540}
  start=$SECONDS
  step() {  # step NAME LIMIT_S COMMAND...: output to NAME.log, status to the summary
    local name=$1 limit=$2
    shift 2
    if [ -n "${DEVICE_CHECK_ONLY:-}" ] && ! [[ ",$DEVICE_CHECK_ONLY," == *",$name,"* ]]; then return 0; fi
    if [ $((SECONDS - start + limit)) -gt "$budget" ]; then
      echo "$name: skipped (${limit} s would pass the ${budget} s budget)" >> "$logs/summary.txt"
      failed=1
      return 0
    fi
    local t0=$SECONDS
    timeout -k 10 "$limit" bash -c '"$@"' "$name" "$@" > "$logs/$name.log" 2>&1  # (functions too: exported)
    local rc=$?
    [ $rc -eq 124 ] && echo "(killed after $limit s)" >> "$logs/$name.log"
    echo "$name: exit $rc ($((SECONDS - t0)) s)" >> "$logs/summary.txt"
    [ $rc -eq 0 ] || failed=1
    save
  }
  # What the run has so far, into OUT_DIR after every step: a run the device tool stops at its
  # time limit still brings back each step that finished.
  save() {
    cp "$logs/summary.txt" "$out/"
    tar -C "$dir" -czf "$out/results.tar.gz.part" results && mv "$out/results.tar.gz.part" "$out/results.tar.gz"
  }
  # The reference case's burst through the real server and client: 64 prompts of 128 tokens,
  # 256 out each, all at once (vLLM reached 3,158 output tokens/s on 2xH100).
  serve_burst() {  # serve_burst NAME PRESET [serve's flags: --num-layers N, --kv-cache-dtype fp8...]
    local name=$1 preset=$2
    shift 2
    "$gk" serve --device cuda --preset "$preset" "$@" --port 8011 --max-model-len 4096 --max-num-seqs 64 \
      --tokenizer-dir "$tok" > "$logs/serve_$name.log" 2>&1 &
    local pid=$!
    for _ in $(seq 300); do  # until it listens, or it has died
      (exec 3<> /dev/tcp/127.0.0.1/8011) 2> /dev/null && break
      kill -0 "$pid" 2> /dev/null || { echo "the server exited:"; tail -3 "$logs/serve_$name.log"; return 1; }
      sleep 1
    done
    "$gk" bench serve --port 8011 --tokenizer "$tok" --num-prompts 64 --random-input-len 128 --random-output-len 256 \
      --request-rate inf --temperature 0 --ready-check-timeout-sec 60 --save-result --result-dir "$logs" \
      --result-filename "serve_burst_$name.json"
    local rc=$?
    # The same burst sampled on the GPU (Gemma's generation_config: top_k 64, top_p 0.95).
    "$gk" bench serve --port 8011 --tokenizer "$tok" --num-prompts 64 --random-input-len 128 --random-output-len 256 \
      --request-rate inf --temperature 1 --top-k 64 --top-p 0.95 --save-result --result-dir "$logs" \
      --result-filename "serve_burst_sampled_$name.json" > "$logs/serve_burst_sampled_$name.log" 2>&1 || rc=1
    kill "$pid" 2> /dev/null
    wait "$pid"
    return $rc
  }
  # The tiny recipe trained on the GPU (issue "CUDA training"): its metrics and training_run.json.
  train_tiny() {
    local d="$dir/train-tiny"
    "$gk" init --preset tiny --out "$d/model" --seed 1 > /dev/null &&
      "$gk" data synth-verilog --out "$d/data" --n 48 --seed 1 --first 6 > /dev/null &&
      "$gk" train --config recipes/tiny-verilog-lora.toml --device cuda --set model="$d/model" \
        --set data="$d/data/sft.jsonl" --set out="$d/run" || return 1
    cp "$d/run/metrics.jsonl" "$logs/train_tiny_cuda_metrics.jsonl"
    cp "$d/run/training_run.json" "$logs/train_tiny_cuda_run.json"
  }
  # A short real run of the 31B shape: a checkpoint of its first 6 layers (5 sliding, 1 global:
  # both head dims; the disk cannot hold all 60), synth-verilog rows (one per micro-batch), the
  # reference recipe for 3 steps; then the report's training table of it beside the tiny run.
  train_31b() {
    local d="$dir/train-31b"
    "$gk" init --preset 31b --num-layers 6 --out "$d/model" --seed 1 > /dev/null &&
      "$gk" data synth-verilog --out "$d/data" --n 600 --seed 2 > /dev/null &&
      "$gk" train --config recipes/gemma4-31b-verilog-lora.toml --device cuda --set model="$d/model" \
        --set data="$d/data/sft.jsonl" --set out="$d/run" --set batch.max_steps=3 --set optim.warmup_steps=1 \
        --set checkpoint.save_every=0
    local rc=$?
    rm -rf "$d/model"  # 8 GB of the machine's disk
    [ $rc = 0 ] || return 1
    cp "$d/run/metrics.jsonl" "$logs/train_31b_cuda_metrics.jsonl"
    cp "$d/run/training_run.json" "$logs/train_31b_cuda_run.json"
    local runs=("$d/run") labels="31B first 6 layers (GPU)"
    [ -f "$dir/train-tiny/run/training_run.json" ] && runs=("$dir/train-tiny/run" "$d/run") labels="tiny (GPU),$labels"
    "$gk" report "${runs[@]}" --label "$labels" --out "$logs/report/training.html" && sed -n '/^## Training/,/^Cost =/p' "$logs/report/training.md"
  }
  # Where the time goes, kernel by kernel, for a goal the figures above miss: Nsight Compute
  # (ncu, on the GPU machine) profiles what the benchmark brackets with cudaProfilerStart/Stop
  # (the model's kernels: not the ceilings, not the weights' fill) at the GPU's own clocks;
  # scripts/ncu_summary.py sums each kernel's time, DRAM bytes and throughputs. The CSV is kept.
  profile() {  # profile NAME GEMMAKIT_ARGS...
    local name=$1 ncu
    shift
    ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2> /dev/null | head -1)
    [ -n "$ncu" ] || { echo "no ncu on this machine"; return 1; }
    local common=(--profile-from-start off --clock-control none --csv --log-file "$logs/$name.csv")
    # The DRAM byte counts if this ncu knows them by these names, else Speed Of Light alone.
    "$ncu" "${common[@]}" --section SpeedOfLight --metrics dram__bytes_read.sum,dram__bytes_write.sum "$gk" "$@" ||
      "$ncu" "${common[@]}" --section SpeedOfLight "$gk" "$@" || return 1
    python3 scripts/ncu_summary.py "$logs/$name.csv" --json "$logs/$name.json"
  }
  export -f serve_burst train_tiny train_31b profile
  export gk tok logs dir
  step nvidia_smi 30 nvidia-smi
  step devices 30 "$gk" devices
  "$gk" devices --json > "$logs/devices.json" 2>&1
  step cuda_tests 240 "$dir/bin/gemmakit_tests" --gtest_filter='Cuda*' --gtest_output="json:$logs/cuda_tests.json"
  # The speed figures of the CUDA backend issue: the 31B shape (its first 40 layers where the
  # GPU's memory cannot hold all 60: the figures then say so), then E4B.
  layers=()
  step bench_31b 120 "$gk" bench model --device cuda --preset 31b --repeats 2
  if grep -q "GPU memory" "$logs/bench_31b.log" 2> /dev/null; then
    layers=(--num-layers 40)
    step bench_31b_40layers 100 "$gk" bench model --device cuda --preset 31b "${layers[@]}" --repeats 2
  fi
  # The prefill again with the fused attention kernel instead of cuBLASLt products.
  step bench_31b_flash 60 "$gk" bench model --device cuda --preset 31b "${layers[@]}" --repeats 2 --batch 0 --gen-len 16 \
    --prefill-attention flash
  # Decode at batch 1 with the weight products through the GEMV kernel instead of cuBLASLt.
  step bench_31b_gemv 75 "$gk" bench model --device cuda --preset 31b "${layers[@]}" --repeats 2 --batch 0 \
    --decode-products gemv
  step bench_e4b 60 "$gk" bench model --device cuda --preset e4b --repeats 2
  # What the decode graphs save where launches outnumber the bytes (E4B's small layers).
  step bench_e4b_eager 45 "$gk" bench model --device cuda --preset e4b --repeats 2 --batch 0 --enforce-eager
  step serve_burst_31b 150 serve_burst 31b 31b "${layers[@]}"
  pkill -f -- '--preset 31b' 2> /dev/null  # a server the time limit left behind
  # Again with an fp8 KV cache: a decode step of the burst reads 7 to 22 GB of bf16 KV beside
  # the 61 GB of weights, so bf16 KV caps this burst near 3,200 tokens/s on an H200 (bench
  # model's "ceiling" line), fp8 near 3,500.
  step serve_burst_31b_fp8kv 120 serve_burst 31b_fp8kv 31b "${layers[@]}" --kv-cache-dtype fp8
  pkill -f -- '--preset 31b' 2> /dev/null
  step bench_train_31b 150 "$gk" bench train --device cuda --preset 31b "${layers[@]}" --seq-len 3072 --rank 64 --steps 2
  step bench_train_e4b 60 "$gk" bench train --device cuda --preset e4b --seq-len 3072 --rank 64 --steps 2
  step train_tiny_cuda 90 train_tiny
  step train_31b_cuda 150 train_31b
  # The GPU engine's logits against the PyTorch reference (every oracle case, f32 and bf16).
  step oracle_logits_cuda 90 python3 tests/oracle/check_logits.py --gemmakit "$gk" --device cuda --dtype both
  # The GPU trainer step for step against the PyTorch oracle (tests/oracle/train_ref.py, on the
  # machine's python3 with torch): losses, gradient norms, the final adapters.
  step train_oracle_cuda 120 env GEMMAKIT_TOKENIZER_DIR="$tok" GEMMAKIT_TRAIN_EXTRA_ARGS="--device cuda" \
    python3 tests/train/train_oracle_e2e_test.py --gemmakit "$gk"
  # The same runs against HF transformers + PEFT + torch AdamW themselves (the machine's python3
  # has them): gemmakit on the CPU and the GPU, and the oracle, each against HF + PEFT.
  step train_hf_peft 150 env GEMMAKIT_TOKENIZER_DIR="$tok" python3 tests/train/train_hf_peft_test.py --gemmakit "$gk"
  step train_device_resume 120 env GEMMAKIT_TOKENIZER_DIR="$tok" python3 tests/train/train_device_resume_test.py --gemmakit "$gk"
  step serve_e2e_cuda 120 env GEMMAKIT_TOKENIZER_DIR="$tok" GEMMAKIT_SERVE_EXTRA_ARGS="--device cuda" \
    python3 tests/serve/serve_e2e_test.py --gemmakit "$gk"
  step serve_lora_cuda 120 env GEMMAKIT_TOKENIZER_DIR="$tok" GEMMAKIT_SERVE_EXTRA_ARGS="--device cuda" \
    python3 tests/serve/serve_lora_e2e_test.py --gemmakit "$gk"
  step bench_train_26b 60 "$gk" bench train --device cuda --preset 26b-a4b --seq-len 3072 --rank 64 --steps 2
  # The benchmark commands' own checks at toy size (ratios recomputed from the JSON, refusals).
  step bench_device 90 env GEMMAKIT_TOKENIZER_DIR="$tok" python3 tests/bench/bench_device_test.py --gemmakit "$gk"
  # What --batch-invariant costs (pinned cuBLASLt algorithms, attention through the paged kernel):
  # against bench_31b's figures from the same run.
  step bench_31b_invariant 90 "$gk" bench model --device cuda --preset 31b "${layers[@]}" --repeats 2 --batch-invariant
  # Profiles (a later run's, DEVICE_CHECK_ONLY=profile_model_31b,profile_train_31b): the 31B
  # shape's first 6 layers (5 sliding, 1 global): a 4,096-token prefill, 2 decode steps, the
  # 64-sequence batch's prefill and 2 steps; then one training step of 3,072 tokens on 2 layers.
  step profile_model_31b 150 profile profile_model_31b bench model --device cuda --preset 31b --num-layers 6 \
    --prompt-len 4096 --gen-len 2 --batch 64 --repeats 1 --enforce-eager
  step profile_train_31b 150 profile profile_train_31b bench train --device cuda --preset 31b --num-layers 2 \
    --seq-len 3072 --rank 64 --steps 1
  save
  cat "$logs/summary.txt"
  grep -H -E '^(model|device|prefill|decode|batched|burst|ceiling|graphs|train|mfu|memory) ' "$logs"/bench_*.log 2> /dev/null
  grep -H -E '^(Output token throughput|Successful requests|Benchmark duration)' "$logs"/serve_burst_*31b*.log 2> /dev/null
  grep -h -E '^\[  (FAILED|SKIPPED) ' "$logs/cuda_tests.log" 2> /dev/null | head -20
  exit $failed
  ;;
*)
  sed -n '2,/^set /{/^#/p}' "$0" | sed 's/^# \{0,1\}//'
  exit 2
  ;;
esac
