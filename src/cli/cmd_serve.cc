// gemmakit serve (--model DIR | --device cuda --preset NAME [--num-layers N]) [--host 127.0.0.1] [--port 8000] [--served-model-name N ...]
//   [--max-model-len N] [--max-num-seqs N] [--max-num-batched-tokens N] [--kv-cache-dtype auto|...]
//   [--kv-cache-memory BYTES | --kv-cache-memory-fraction F] [--block-size 16]
//   [--[no-]enable-prefix-caching] [--[no-]enable-chunked-prefill] [--api-key KEY] [--max-queue N]
//   [--reject-unknown-fields] [--tokenizer-dir DIR] [--threads N] [--quantize none|q8_0] [--bf16-activations split|round]
//   [--lora NAME=PATH[:alpha=A] ...] [--max-loras 1] [--max-cpu-loras N] [--max-lora-rank 16]
//   [--allow-runtime-lora [--lora-root DIR]]
//
// An OpenAI-compatible server (src/server/) over the continuous-batching engine
// (src/engines/serve/). SIGTERM or SIGINT: stop accepting, let requests in flight finish, exit 0;
// a second signal aborts what is still running.
#include <pthread.h>
#include <unistd.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <thread>

#include <CLI/CLI.hpp>

#include "cli/common.h"
#include "dist/communicator.h"
#include "engines/serve/engine.h"
#include "engines/serve/lora_registry.h"
#include "formats/chat_format.h"
#include "model/presets.h"
#include "server/http_server.h"
#include "server/model_registry.h"
#include "server/serve_flags.h"
#include "util/guarded_parse.h"
#include "util/open_file_limit.h"
#include "util/stop_signals.h"

namespace gk::cli {
namespace {

// SIGTERM/SIGINT: how many arrived and the last one (set by the handler, read by the watcher).
std::atomic<int> g_signals{0};
std::atomic<int> g_last_signal{0};
extern "C" void CountSignal(int sig) {
  g_last_signal.store(sig);
  g_signals.fetch_add(1);
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

Result<Tokenizer> LoadServeTokenizer(const std::string& model_dir, const std::string& tokenizer_dir) {
  if (std::filesystem::exists(model_dir + "/tokenizer.json")) return LoadModelTokenizer(model_dir);
  const std::string dir = tokenizer_dir.empty() ? DefaultTokenizerDir() : tokenizer_dir;
  const std::string path = dir + "/tokenizer.json";
  if (!std::filesystem::exists(path)) {
    return Result<Tokenizer>::Error(StrCat(model_dir, "/tokenizer.json not found, nor ", path,
                                           "; give a model directory with its tokenizer.json or --tokenizer-dir"));
  }
  return Tokenizer::Load(path);
}

}  // namespace

int RunServe(int argc, char** argv) {
  CLI::App app{"An OpenAI-compatible HTTP server (vLLM's API) with continuous batching and a paged KV cache."};
  std::string model_dir, host = "127.0.0.1", api_key, tokenizer_dir, kv_dtype_name = "auto", kv_memory;
  std::vector<std::string> served_names, loras;
  int port = 8000, max_queue = 4096;
  double kv_fraction = 0;
  EngineOptions eo;
  std::string preset;
  int preset_layers = 0;
  auto* model_opt = app.add_option("--model", model_dir, "model directory (Hugging Face layout)");
  app.add_option("--preset", preset, "--device cuda: serve a preset's shape with random bf16 weights made on the GPU "
                                     "(serving benchmarks without a checkpoint), e.g. 31b")
      ->excludes(model_opt);
  app.add_option("--num-layers", preset_layers, "with --preset: its first N layers only")->check(CLI::Range(1, 4096));
  app.add_option("--host", host, "address to listen on (loopback by default)");
  app.add_option("--port", port, "TCP port (0: any free port, printed at start-up)")->check(CLI::Range(0, 65535));
  app.add_option("--served-model-name", served_names,
                 "name(s) clients use in \"model\" (default: the --model path); the first is reported");
  app.add_option("--max-model-len", eo.max_model_len, "prompt + output tokens per request (default: the model's, at most 8192)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40));
  app.add_option("--max-num-seqs", eo.max_num_seqs, "requests in one engine step")->check(CLI::Range(1, 1 << 20));
  app.add_option("--max-num-batched-tokens", eo.max_num_batched_tokens,
                 "token budget per engine step (default: 2048 with chunked prefill, else max-model-len)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40));
  app.add_option("--kv-cache-dtype", kv_dtype_name, "auto, f32, f16, bf16, fp8 (= fp8_e4m3), fp8_e4m3, fp8_e5m2");
  auto* mem = app.add_option("--kv-cache-memory", kv_memory, "KV cache size in bytes (suffixes: 2GiB, 512MiB, 1.5G)");
  auto* frac = app.add_option("--kv-cache-memory-fraction,--gpu-memory-utilization", kv_fraction,
                              "fraction of memory the server may use in all (weights + KV cache): of physical RAM "
                              "on the CPU, of the GPU's memory with --device cuda (default 0.9 there), as vLLM's "
                              "--gpu-memory-utilization")
                   ->check(CLI::Range(0.0, 1.0));
  mem->excludes(frac);
  app.add_option("--block-size", eo.block_size, "tokens per KV block")->check(CLI::Range(1, 4096));
  app.add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", eo.enable_prefix_caching,
               "reuse the KV blocks of shared prompt prefixes (default on)");
  app.add_flag("--enable-chunked-prefill,!--no-enable-chunked-prefill", eo.enable_chunked_prefill,
               "split long prompts over several engine steps (default on)");
  app.add_option("--api-key", api_key, "require 'Authorization: Bearer KEY' (except /health, /metrics, /version)");
  app.add_option("--max-queue", max_queue, "waiting requests beyond this are refused with 503")->check(CLI::Range(1, 1 << 24));
  bool reject_unknown = false;
  app.add_flag("--reject-unknown-fields", reject_unknown,
               "answer 400 to requests with fields the API does not know (default: ignore them with a warning, as vLLM)");
  app.add_option("--tokenizer-dir", tokenizer_dir, "tokenizer.json directory when the model has none");
  app.add_option("--lora,--lora-modules", loras,
                 "NAME=PATH: a LoRA adapter a request picks with \"model\": NAME. PATH: a PEFT adapter directory, or "
                 "a Qwix item of a Tunix Orbax checkpoint (PATH:alpha=A gives its alpha; default the rank); also "
                 "vLLM's JSON form {\"name\": ..., \"path\": ...}")
      ->expected(1, -1);
  bool enable_lora = false, allow_runtime_lora = false;
  int max_loras = 1, max_cpu_loras = 0, max_lora_rank = 16;
  std::string lora_root;
  app.add_flag("--enable-lora", enable_lora, "serve LoRA adapters (implied by --lora and --allow-runtime-lora)");
  app.add_option("--max-loras", max_loras, "distinct adapters in one engine step (vLLM's default 1); requests of "
                                           "another adapter wait for a slot")
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--max-cpu-loras", max_cpu_loras, "adapters kept in memory; beyond, the least recently used one "
                                                   "that no request holds is dropped and read again on demand "
                                                   "(default: --max-loras)")
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--max-lora-rank", max_lora_rank, "adapters of a higher rank are refused (vLLM's default 16)")
      ->check(CLI::Range(1, 1 << 16));
  app.add_flag("--allow-runtime-lora", allow_runtime_lora,
               "POST /v1/load_lora_adapter and /v1/unload_lora_adapter (vLLM's VLLM_ALLOW_RUNTIME_LORA_UPDATING)");
  app.add_option("--lora-root", lora_root, "runtime loads read adapters only under this directory (relative "
                                           "lora_path values start here)");
  std::string chat_template, reasoning_parser = "auto", tool_call_parser = "auto";
  app.add_option("--chat-template", chat_template,
                 "Jinja chat template FILE, or the NAME of one of the checkpoint's templates (default: the "
                 "checkpoint's chat_template.jinja / tokenizer_config.json, else the built-in one)");
  app.add_option("--reasoning-parser", reasoning_parser,
                 "gemma4: the thought channel becomes reasoning_content; none: left in the content "
                 "(auto: gemma4 for Gemma 4 checkpoints)")
      ->check(CLI::IsMember({"auto", "gemma4", "none"}));
  app.add_option("--tool-call-parser", tool_call_parser,
                 "gemma4: <|tool_call> blocks become tool_calls when a request gives tools; none: text "
                 "(auto: gemma4 for Gemma 4 checkpoints)")
      ->check(CLI::IsMember({"auto", "gemma4", "none"}));
  std::string default_kwargs_text;
  app.add_option("--default-chat-template-kwargs", default_kwargs_text,
                 "JSON object of chat_template_kwargs for every chat request, under the request's own "
                 "(e.g. '{\"enable_thinking\": true}'), as vLLM's flag");
  bool auto_tool_choice = false;  // vLLM needs it for tool_choice "auto"; here the parser suffices
  app.add_flag("--enable-auto-tool-choice", auto_tool_choice, "accepted for vLLM compatibility (always on)");
  EngineFlags engine_flags;
  engine_flags.AddTo(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return Fail(e.what());
  }
  engine_flags.Apply();
  if (Status st = engine_flags.CheckDevice(); !st.ok()) return Fail(st);

  auto kv_dtype = server::ParseKvCacheDType(kv_dtype_name);
  if (!kv_dtype.ok()) return Fail(kv_dtype.status());
  eo.kv_dtype = *kv_dtype;
  eo.max_waiting = max_queue;
  if (!kv_memory.empty()) {
    auto bytes = server::ParseByteSize(kv_memory);
    if (!bytes.ok()) return Fail(StrCat("--kv-cache-memory: ", bytes.message()));
    if (*bytes == 0) return Fail("--kv-cache-memory must be more than 0 bytes");
    eo.kv_cache_bytes = *bytes;
  }
  std::vector<std::pair<std::string, LoraLocation>> lora_specs;
  for (const std::string& l : loras) {
    auto spec = server::ParseLoraSpec(l);
    if (!spec.ok()) return Fail(spec.status());
    auto where = ParseLoraLocation(spec->dir);
    if (!where.ok()) return Fail(StrCat("--lora ", spec->name, ": ", where.message()));
    lora_specs.emplace_back(spec->name, *where);
  }
  const bool lora_on = enable_lora || allow_runtime_lora || !lora_specs.empty();
  if (!lora_root.empty() && !allow_runtime_lora) return Fail("--lora-root needs --allow-runtime-lora");
  if (!lora_root.empty() && !std::filesystem::is_directory(lora_root)) {
    return Fail(StrCat("--lora-root ", lora_root, ": not a directory"));
  }
  if (max_cpu_loras == 0) max_cpu_loras = max_loras;
  if (max_cpu_loras < max_loras) {
    return Fail(StrCat("--max-cpu-loras (", max_cpu_loras, ") must be at least --max-loras (", max_loras, ")"));
  }

  // A handler, not a blocked mask and sigwait: libraries start threads before main (OpenBLAS
  // does, at load) and a signal delivered to one of those would take the default action and
  // kill the server mid-drain. The handler only counts, on a thread of its own; the watcher
  // thread acts.
  InstallStopHandler(CountSignal);
  // --tp N: rank 0 serves; the other ranks run each forward pass on their shares (after the
  // handler: MPI's threads inherit its blocked signals).
  auto tp = engine_flags.TensorParallelGroup();
  if (!tp.ok()) return Fail(tp.status());
  if (lora_on && tp->active()) return Fail("LoRA adapters are not supported with --tp yet: serve on one process");

  if (model_dir.empty() && preset.empty()) return Fail("serve needs --model DIR (or, with --device cuda, --preset NAME)");
  if (!preset.empty()) model_dir = preset;  // the served name and root (no directory behind it)
  if (preset.empty() && !std::filesystem::is_directory(model_dir)) {
    return Fail(StrCat("--model ", model_dir, ": not a directory (give a Hugging Face model directory)"));
  }
  auto tokenizer = LoadServeTokenizer(model_dir, tokenizer_dir);
  if (!tokenizer.ok()) return Fail(tokenizer.status());
  ThreadPool pool(engine_flags.threads);
  ModelLoadOptions lo;
  if (engine_flags.device != "cpu") {
    // A GPU runs a step's whole token budget in one pass (the CPU's 256-token passes keep its
    // working set in cache; a GPU wants the widest products).
    lo.max_chunk = int(std::min<int64_t>(eo.max_num_batched_tokens > 0 ? eo.max_num_batched_tokens : 2048, 16384));
  }
  lo.quantize = engine_flags.Quantize();
  lo.tp = *tp;
  if (kv_fraction > 0) engine_flags.gpu_memory_utilization = kv_fraction;  // the GPU's share, on --device cuda
  Result<std::unique_ptr<ModelRunner>> model = Status::Error("");
  if (preset.empty()) {
    model = engine_flags.LoadRunner(model_dir, &pool, lo);
  } else {
    auto config = PresetConfig(preset, preset_layers);
    if (!config.ok()) return Fail(config.status());
    model = engine_flags.RandomRunner(*config, lo);
  }
  if (!model.ok()) return Fail(model.status());
  // Tensor parallelism is the CPU runner's (LoadRunner refuses --tp elsewhere); LoRA adapters
  // run on both.
  GemmaModel* cpu_model = dynamic_cast<GemmaModel*>(model->get());
  // On a GPU the runner sized its KV budget from the fraction at load (kv_memory_budget).
  if (kv_fraction > 0 && cpu_model != nullptr) {
    const uint64_t budget = uint64_t(double(server::PhysicalMemoryBytes()) * kv_fraction);
    const uint64_t used = server::ResidentBytes();
    if (budget <= used) {
      return Fail(StrCat("--kv-cache-memory-fraction ", kv_fraction, " of RAM is ", budget >> 20,
                         " MiB, but the model already takes ", used >> 20, " MiB; raise the fraction"));
    }
    eo.kv_cache_bytes = budget - used;
  }
  if (tp->active()) {  // every rank sizes rank 0's pool: the block ids it hands out must exist everywhere
    Status st = tp->comm->Broadcast(std::as_writable_bytes(std::span<uint64_t>(&eo.kv_cache_bytes, 1)), 0);
    if (!st.ok()) return Fail(st);
    eo.tp_comm = tp->comm;
    cpu_model->set_logits_to_rank0_only(true);  // only rank 0's engine samples
    if (tp->rank != 0) {
      model->release();
      st = ServeEngine::Follow(std::unique_ptr<GemmaModel>(cpu_model), eo);
      return st.ok() ? 0 : Fail(st);
    }
  }
  const ModelConfig config = (*model)->config();
  auto chat_format = ChatFormat::ForModel(
      model_dir, config.arch == Arch::kGemma3 ? BuiltinChat::kGemma3 : BuiltinChat::kGemma4, chat_template);
  if (!chat_format.ok()) return Fail(chat_format.status());
  nlohmann::ordered_json default_kwargs = nlohmann::ordered_json::object();
  if (!default_kwargs_text.empty()) {
    auto parsed = ParseOrderedJson(default_kwargs_text, "--default-chat-template-kwargs");
    if (!parsed.ok()) return Fail(parsed.status());
    if (!parsed->is_object()) return Fail("--default-chat-template-kwargs must be a JSON object");
    default_kwargs = std::move(*parsed);
  }
  const bool gemma4 = config.arch == Arch::kGemma4;
  if (served_names.empty()) served_names.push_back(model_dir);
  // LoRA adapters: each read and checked against the model now, so a bad one stops the start.
  LoraRegistryOptions lro;
  lro.max_cpu_loras = max_cpu_loras;
  lro.max_lora_rank = max_lora_rank;
  lro.root = lora_root;
  // Adapters in the base model's dtype, as vLLM holds them: f32 for f32 weights, else bf16.
  lro.storage = (*model)->default_kv_dtype() == DType::kF32 ? DType::kF32 : DType::kBF16;
  LoraRegistry lora_registry(model_dir, config, (*model)->weight_prefix(), lro);
  for (const auto& [name, where] : lora_specs) {
    if (std::find(served_names.begin(), served_names.end(), name) != served_names.end()) {
      return Fail(StrCat("--lora ", name, ": the name is the base model's"));
    }
    if (Status st = lora_registry.Add(name, where, /*confined=*/false); !st.ok()) {
      return Fail(StrCat("--lora ", name, ": ", st.message()));
    }
  }
  if (lora_on) eo.max_loras = max_loras;
  // Declared before the engine so it outlives every engine callback (they record queue times).
  server::ServerMetrics metrics(served_names.front());
  auto engine = ServeEngine::Create(std::move(*model), eo);
  if (!engine.ok()) return Fail(engine.status());
  ServeEngine& eng = **engine;
  const EngineCapacity& cap = eng.capacity();

  server::ServeContext ctx;
  ctx.engine = &eng;
  ctx.tokenizer = &*tokenizer;
  ctx.config = &eng.config();
  ctx.eos_ids = StopIds(config, *tokenizer);
  ctx.chat_format = &*chat_format;
  ctx.default_chat_template_kwargs = default_kwargs;
  ctx.reasoning_parser = reasoning_parser == "gemma4" || (reasoning_parser == "auto" && gemma4);
  ctx.tool_call_parser = tool_call_parser == "gemma4" || (tool_call_parser == "auto" && gemma4);
  ctx.max_model_len = cap.max_model_len;
  server::ModelRegistry registry(served_names, model_dir, cap.max_model_len, int64_t(std::time(nullptr)),
                                 lora_on ? &lora_registry : nullptr);
  if (lora_on) metrics.set_max_loras(max_loras);
  server::HttpServerOptions ho;
  ho.host = host;
  ho.port = port;
  ho.api_key = api_key;
  ho.reject_unknown_fields = reject_unknown;
  ho.allow_runtime_lora = allow_runtime_lora;
  ho.http_threads = 64;  // grows with open connections (server/elastic_thread_pool.h)
  ctx.metrics = &metrics;
  RaiseOpenFileLimit();  // a descriptor per open connection: bursts of a thousand are normal
  server::HttpServer http(ctx, registry, ho);
  auto bound = http.Bind();
  if (!bound.ok()) {
    eng.Shutdown(false);
    return Fail(bound.status());
  }

  std::fprintf(stderr, "gemmakit serve: model %s served as \"%s\" (%d layers, %d threads)\n", model_dir.c_str(),
               registry.base_name().c_str(), config.num_layers, pool.size());
  std::fprintf(stderr,
               "gemmakit serve: KV cache size: %lld tokens (%.1f MiB %s, blocks of %d tokens: %lld full-attention, "
               "%lld sliding)\n",
               (long long)cap.kv_tokens, double(cap.kv_bytes) / (1 << 20), Lower(DTypeName(cap.kv_dtype)).c_str(),
               cap.block_size, (long long)cap.num_blocks[0], (long long)cap.num_blocks[1]);
  if (tp->active()) {
    std::fprintf(stderr,
                 "gemmakit serve: tensor parallel: %d ranks (%s); each holds 1/%d of the query heads, MLP and "
                 "vocabulary, and its KV heads of every block (the KV sizes above are per rank)\n",
                 tp->size, tp->comm->backend().c_str(), tp->size);
  }
  std::fprintf(stderr, "gemmakit serve: chat template: %s; reasoning parser: %s; tool-call parser: %s\n",
               chat_format->Describe().c_str(), ctx.reasoning_parser ? "gemma4" : "none",
               ctx.tool_call_parser ? "gemma4" : "none");
  if (lora_on) {
    std::string names;
    for (const auto& [name, where] : lora_specs) names += (names.empty() ? "" : ", ") + name;
    std::fprintf(stderr,
                 "gemmakit serve: LoRA: %zu adapter(s)%s%s%s; at most %d per step, %d kept in memory, rank <= %d; "
                 "runtime loading %s%s\n",
                 lora_specs.size(), names.empty() ? "" : " (", names.c_str(), names.empty() ? "" : ")", max_loras,
                 max_cpu_loras, max_lora_rank, allow_runtime_lora ? "on" : "off",
                 lora_root.empty() ? "" : StrCat(" (under ", lora_root, ")").c_str());
  }
  std::fprintf(stderr, "gemmakit serve: Maximum concurrency for %lld tokens per request: %.2fx\n",
               (long long)cap.max_model_len, cap.max_concurrency);
  // The pid: a tensor-parallel server is stopped through this process (rank 0), not mpirun.
  std::fprintf(stderr, "gemmakit serve: listening on http://%s:%d (pid %d)\n", host.c_str(), *bound, int(getpid()));
  std::fflush(stderr);

  // The watcher: first signal drains, a second aborts what is still running. Shutdown is
  // serialised: the watcher and the main thread may both call it.
  std::mutex shutdown_mu;
  auto shutdown = [&](bool drain) {
    std::lock_guard<std::mutex> lock(shutdown_mu);
    eng.Shutdown(drain);
  };
  std::atomic<bool> done{false};
  std::thread watcher([&] {
    int count = 0;
    while (!done.load()) {
      if (g_signals.load() == count) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      const int sig = g_last_signal.load();
      if (++count == 1) {
        const EngineStats s = eng.Stats();
        std::fprintf(stderr, "gemmakit serve: %s: shutting down, finishing %d running and %d waiting requests\n",
                     sig == SIGTERM ? "SIGTERM" : "SIGINT", s.running, s.waiting);
        http.Stop();
      } else {
        std::fprintf(stderr, "gemmakit serve: second signal: aborting the requests in flight\n");
        shutdown(/*drain=*/false);
      }
    }
  });
  http.Listen();  // returns once stopped and every in-flight request has finished
  shutdown(/*drain=*/true);
  done = true;
  watcher.join();
  std::fprintf(stderr, "gemmakit serve: stopped\n");
  return 0;
}

}  // namespace gk::cli
